// The process's Chrome trace (dp/distributed/timeline.h): one file, opened on first use when
// DP_TIMELINE names it, one event per line, flushed at exit.
#include "dp/distributed/timeline.h"
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace dp::distributed::timeline {
namespace {

struct Sink {
  std::mutex mu;
  std::FILE* file = nullptr;
  int pid = 0;
  bool on = false;

  Sink() {
    const char* path = std::getenv("DP_TIMELINE");
    if (path == nullptr || *path == '\0') return;
    file = std::fopen(path, "w");
    if (file == nullptr) {
      // Diagnostics must not stop training: say so once and go on without a timeline.
      std::fprintf(stderr, "dparallel: DP_TIMELINE='%s' cannot be written (%s); no timeline is recorded\n", path, std::strerror(errno));
      return;
    }
    const char* rank = std::getenv("RANK");
    pid = rank != nullptr ? std::atoi(rank) : 0;
    std::fputs("[\n", file);
    on = true;
  }
  ~Sink() {
    if (file != nullptr) std::fclose(file);
  }
  void write(const std::string& event) {
    std::lock_guard<std::mutex> lock(mu);
    std::fputs(event.c_str(), file);
    std::fputs(",\n", file);
  }
};

Sink& sink() {
  static Sink s;
  return s;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string event(const std::string& name, const char* category, const char* phase, int64_t ts, int tid, const std::string& extra,
                  const std::string& args) {
  std::string e = "{\"name\": " + quoted(name) + ", \"cat\": " + quoted(category) + ", \"ph\": \"" + phase + "\", \"ts\": " + std::to_string(ts) +
                  ", \"pid\": " + std::to_string(sink().pid) + ", \"tid\": " + std::to_string(tid) + extra;
  if (!args.empty()) e += ", \"args\": {" + args + "}";
  return e + "}";
}

}  // namespace

bool enabled() { return sink().on; }

int64_t now_us() { return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void span(const std::string& name, const char* category, int64_t start_us, int64_t end_us, int tid, const std::string& args) {
  if (!enabled()) return;
  sink().write(event(name, category, "X", start_us, tid, ", \"dur\": " + std::to_string(end_us > start_us ? end_us - start_us : 0), args));
}

void instant(const std::string& name, const char* category, int64_t at_us, int tid, const std::string& args) {
  if (!enabled()) return;
  sink().write(event(name, category, "i", at_us, tid, ", \"s\": \"t\"", args));
}

void flush() {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(sink().mu);
  std::fflush(sink().file);
}

}  // namespace dp::distributed::timeline
