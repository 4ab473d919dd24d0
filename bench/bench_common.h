#pragma once
// Shared plumbing of the bench/ programs: running the PyTorch side in a subprocess, machine
// information for the reports, the command line, timing and statistics, number formatting and the
// marked tables in docs/benchmarks.md.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dp/core/errors.h"

namespace bench {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline std::string run_command(const std::string& cmd, int* status = nullptr) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    std::array<char, 4096> buf;
    size_t k;
    while ((k = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), k);
    int rc = pclose(p);
    if (status) *status = rc;
  } else if (status) {
    *status = -1;
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(line.find_first_not_of(" \t", p + 1));
    }
  }
  return "unknown";
}

inline std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a;
  f >> a;
  return a.empty() ? "unknown" : a;
}

inline std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

inline json machine_info(const fs::path& root) {
  const std::string git = "git -C " + quote(root.string());
  std::string commit = run_command(git + " rev-parse HEAD 2>/dev/null");
  std::string dirty = run_command(git + " status --porcelain --untracked-files=no 2>/dev/null");
  return {{"cpu_model", cpu_model()},    {"cores", std::thread::hardware_concurrency()},
          {"date", utc_now()},           {"git_commit", commit.empty() ? "unknown" : commit},
          {"git_dirty", !dirty.empty()}, {"load_average_1min_at_start", load_average()},
          {"compiler", __VERSION__}};
}

inline std::string fmt(double v, int prec = 2) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(prec);
  s << v;
  return s.str();
}

// A table cell "median [min – max]", one decimal each.
inline std::string range_cell(double median, double min, double max) { return fmt(median, 1) + " [" + fmt(min, 1) + " – " + fmt(max, 1) + "]"; }

// How a report's description starts, from machine_info's fields: "Measured <date> on <CPU model>
// (<n> hardware threads), commit `<first 12 hex digits>`", then " with local changes" if any.
inline std::string measured_on(const json& m) {
  std::ostringstream s;
  s << "Measured " << m["date"].get<std::string>() << " on " << m["cpu_model"].get<std::string>() << " (" << m["cores"]
    << " hardware threads), commit `" << m["git_commit"].get<std::string>().substr(0, 12) << "`"
    << (m["git_dirty"].get<bool>() ? " with local changes" : "");
  return s.str();
}

// Replaces what lies between the markers (or appends a marked block) in the markdown file.
inline void update_markdown(const fs::path& file, const std::string& marker, const std::string& block) {
  const std::string begin = "<!-- " + marker + ":begin -->", end = "<!-- " + marker + ":end -->";
  std::string text;
  if (std::ifstream in(file); in) text.assign(std::istreambuf_iterator<char>(in), {});
  const std::string marked = begin + "\n" + block + end;
  auto b = text.find(begin), e = text.find(end);
  if (b != std::string::npos && e != std::string::npos && e > b) {
    text.replace(b, e + end.size() - b, marked);
  } else {
    if (!text.empty() && text.back() != '\n') text += "\n";
    text += "\n" + marked + "\n";
  }
  std::ofstream(file) << text;
}

// Writes a program's results: the report as bench/results/<json_name> and its table between the
// `marker` markers in docs/benchmarks.md, both under the repository root.
inline void write_results(const fs::path& root, const std::string& json_name, const json& report, const std::string& marker,
                          const std::string& markdown) {
  fs::create_directories(root / "bench" / "results");
  std::ofstream(root / "bench" / "results" / json_name) << report.dump(2) << "\n";
  update_markdown(root / "docs" / "benchmarks.md", marker, markdown);
}

// This program's own path (to re-execute it as a worker process).
inline std::string self_exe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  DP_CHECK(!ec, ValueError, "cannot read /proc/self/exe: ", ec.message());
  return p.string();
}

// A loopback TCP port that was free a moment ago (bound to port 0, read back, closed).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  DP_CHECK(fd >= 0, ValueError, "free_port: socket: ", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  DP_CHECK(ok, ValueError, "cannot find a free port: ", std::strerror(errno));
  return ntohs(a.sin_port);
}

inline std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Steps through a program's arguments; its errors (dp::ValueError) start with the program's name:
//
//   for (bench::Args args("bench_x", argc, argv); args.next();) {
//     if (args.is("--threads")) o.threads = std::stoi(args.value());
//     else if (args.is("--no-pin")) o.pin = false;
//     else args.unknown();
//   }
class Args {
 public:
  Args(std::string program, int argc, char** argv) : program_(std::move(program)), argc_(argc), argv_(argv) {}

  // Moves to the next argument; false after the last one.
  bool next() { return ++i_ < argc_; }
  // Whether the current argument is `option`.
  bool is(const std::string& option) const { return current() == option; }
  bool is_help() const { return is("--help") || is("-h"); }
  // The current option's value: the argument after it, which is used up.
  std::string value() {
    if (i_ + 1 >= argc_) throw dp::ValueError(program_ + ": " + current() + " needs a value");
    return argv_[++i_];
  }
  [[noreturn]] void unknown() const { throw dp::ValueError(program_ + ": unknown option " + current() + " (see --help)"); }

 private:
  std::string current() const { return argv_[i_]; }

  std::string program_;
  int argc_;
  char** argv_;
  int i_ = 0;
};

// The options of the programs that time training steps of dparallel against PyTorch
// (bench_training, bench_data_parallel): --models a,b, --warmup N, --steps N, --python PATH,
// --root DIR, --no-torch, --no-write.
struct TrainingOptions {
  std::vector<std::string> models;
  int warmup = 10;
  int steps = 0;  // 0: per-model default
  bool torch = true;
  bool write = true;
  std::string python = "/usr/bin/python3";
  fs::path root = fs::path(DP_SOURCE_DIR);  // the repository

  // Reads the current argument if it is one of these options (with its value); false if it is not.
  bool read_option(Args& args) {
    if (args.is("--models"))
      models = split_list(args.value());
    else if (args.is("--warmup"))
      warmup = std::stoi(args.value());
    else if (args.is("--steps"))
      steps = std::stoi(args.value());
    else if (args.is("--python"))
      python = args.value();
    else if (args.is("--root"))
      root = args.value();
    else if (args.is("--no-torch"))
      torch = false;
    else if (args.is("--no-write"))
      write = false;
    else
      return false;
    return true;
  }
};

// Wall time of one call of fn in Unit: std::micro for µs, std::milli for ms.
template <typename Unit, typename F>
double time_call(F&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, Unit>(std::chrono::steady_clock::now() - t0).count();
}

struct Stats {
  double median, min, max;
};

// The median (of the middle two for an even count), min and max of a sample, which must not be empty.
inline Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
}

}  // namespace bench
