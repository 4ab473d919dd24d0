// What a launched worker needs beyond init_process_group (dp/distributed/launch.h): its restart
// count, the run's id, and the error file through which dp-run learns why it failed.
//
// The error file is one JSON object: {"type": ..., "message": ..., "rank": ..., "unix_ms": ...,
// "pid": ...}. read_error_file also reads the file PyTorch's elastic error handler writes
// ({"message": {"message": ..., "extraInfo": {"timestamp": ...}}}), so a Python program started
// by dp-run with torch's @record reports its error too.
#include "dp/distributed/launch.h"

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <nlohmann/json.hpp>
#include "dp/core/errors.h"
#include "dp/distributed/checkpoint.h"
#include "dp/distributed/errors.h"

namespace dp::distributed {
namespace {

// The first of the variables that is set and not empty; nullptr when none is.
const char* first_set(const char* a, const char* b) {
  for (const char* name : {a, b}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return nullptr;
}

// The most derived dp error class `e` is, by name; "std::exception" for the rest.
const char* type_name(const std::exception& e) {
  // Most derived first: a class is tested before its bases.
  if (dynamic_cast<const StoreTimeout*>(&e)) return "StoreTimeout";
  if (dynamic_cast<const StoreError*>(&e)) return "StoreError";
  if (dynamic_cast<const PeerLostError*>(&e)) return "PeerLostError";
  if (dynamic_cast<const CollectiveTimeout*>(&e)) return "CollectiveTimeout";
  if (dynamic_cast<const RendezvousError*>(&e)) return "RendezvousError";
  if (dynamic_cast<const CollectiveMismatch*>(&e)) return "CollectiveMismatch";
  if (dynamic_cast<const StateMismatch*>(&e)) return "StateMismatch";
  if (dynamic_cast<const DistributedError*>(&e)) return "DistributedError";
  if (dynamic_cast<const ShapeError*>(&e)) return "ShapeError";
  if (dynamic_cast<const DTypeError*>(&e)) return "DTypeError";
  if (dynamic_cast<const DeviceError*>(&e)) return "DeviceError";
  if (dynamic_cast<const IndexError*>(&e)) return "IndexError";
  if (dynamic_cast<const ValueError*>(&e)) return "ValueError";
  if (dynamic_cast<const AutogradError*>(&e)) return "AutogradError";
  if (dynamic_cast<const NotImplementedError*>(&e)) return "NotImplementedError";
  if (dynamic_cast<const OutOfMemory*>(&e)) return "OutOfMemory";
  if (dynamic_cast<const IOError*>(&e)) return "IOError";
  if (dynamic_cast<const Error*>(&e)) return "Error";
  return "std::exception";
}

int env_rank() {
  const char* v = std::getenv("RANK");
  if (v == nullptr || *v == '\0') return -1;
  int rank = -1;
  const char* end = v + std::strlen(v);
  auto [p, ec] = std::from_chars(v, end, rank);
  return ec == std::errc() && p == end && rank >= 0 ? rank : -1;
}

// Writes all of `text` to fd; false on an error.
bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int restart_count() {
  const char* v = first_set("DP_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT");
  if (v == nullptr) return 0;
  int n = 0;
  const char* end = v + std::strlen(v);
  auto [p, ec] = std::from_chars(v, end, n);
  DP_CHECK(ec == std::errc() && p == end && n >= 0, ValueError, std::getenv("DP_RESTART_COUNT") ? "DP_RESTART_COUNT" : "TORCHELASTIC_RESTART_COUNT",
           "='", v, "' is not a count (an integer >= 0)");
  return n;
}

std::string run_id() {
  const char* v = first_set("DP_RUN_ID", "TORCHELASTIC_RUN_ID");
  return v != nullptr ? std::string(v) : std::string();
}

void record_error(const std::string& type, const std::string& message) noexcept {
  try {
    const char* path = first_set("DP_ERROR_FILE", "TORCHELASTIC_ERROR_FILE");
    if (path == nullptr) return;
    const int64_t unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    nlohmann::json j;
    j["type"] = type;
    // Invalid UTF-8 in a message (bytes of a file name) is replaced, not a reason to lose the error.
    j["message"] = message;
    j["rank"] = env_rank();
    j["unix_ms"] = unix_ms;
    j["pid"] = static_cast<int64_t>(::getpid());
    const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    // A temporary file beside the target and a rename: a reader sees the old file or the whole new one.
    const std::string tmp = std::string(path) + ".tmp." + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    const bool ok = write_all(fd, text);
    ::close(fd);
    if (!ok || ::rename(tmp.c_str(), path) != 0) ::unlink(tmp.c_str());
  } catch (...) {
    // Out of memory while reporting an error: nothing better to do than to keep the first error.
  }
}

void record_error(const std::exception& e) noexcept {
  try {
    record_error(type_name(e), e.what());
  } catch (...) {
  }
}

std::optional<RecordedError> read_error_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("message")) return std::nullopt;
  RecordedError e;
  const nlohmann::json& message = j["message"];
  if (message.is_string()) {
    e.message = message.get<std::string>();
    if (j.contains("type") && j["type"].is_string()) e.type = j["type"].get<std::string>();
    if (j.contains("rank") && j["rank"].is_number_integer()) e.rank = j["rank"].get<int>();
    if (j.contains("unix_ms") && j["unix_ms"].is_number_integer()) e.unix_ms = j["unix_ms"].get<int64_t>();
  } else if (message.is_object() && message.contains("message") && message["message"].is_string()) {
    // torch.distributed.elastic's ErrorHandler: the message holds "<Type>: <text>" and a traceback.
    e.message = message["message"].get<std::string>();
    if (const size_t colon = e.message.find(": "); colon != std::string::npos && colon < 80 && e.message.find_first_of(" \n") > colon) {
      e.type = e.message.substr(0, colon);
      e.message = e.message.substr(colon + 2);
    }
    if (message.contains("extraInfo") && message["extraInfo"].is_object()) {
      const nlohmann::json& extra = message["extraInfo"];
      if (extra.contains("timestamp")) {
        const nlohmann::json& ts = extra["timestamp"];
        int64_t seconds = 0;
        if (ts.is_number_integer()) {
          seconds = ts.get<int64_t>();
        } else if (ts.is_string()) {
          const std::string s = ts.get<std::string>();
          std::from_chars(s.data(), s.data() + s.size(), seconds);
        }
        e.unix_ms = seconds * 1000;
      }
    }
  } else {
    return std::nullopt;
  }
  if (e.type.empty()) e.type = "Error";
  return e;
}

}  // namespace dp::distributed
