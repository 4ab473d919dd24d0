#pragma once
// Shared plumbing of the bench/ programs: running the PyTorch side in a subprocess, machine
// information for the reports, number formatting and the marked tables in docs/benchmarks.md.
#include <array>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

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
  return {{"cpu_model", cpu_model()},
          {"cores", std::thread::hardware_concurrency()},
          {"date", utc_now()},
          {"git_commit", commit.empty() ? "unknown" : commit},
          {"git_dirty", !dirty.empty()},
          {"load_average_1min_at_start", load_average()},
          {"compiler", __VERSION__}};
}


inline std::string fmt(double v, int prec = 2) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(prec);
  s << v;
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


inline std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}


}  // namespace bench
