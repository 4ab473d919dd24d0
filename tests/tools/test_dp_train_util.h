#pragma once
// Helpers of the dp-train end-to-end tests: run the built program (DP_TRAIN_BIN, set by
// tools/CMakeLists.txt) with arguments, capture its exit status and output, read its files.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include "support/unprivileged.h"

extern char** environ;

namespace dp_train_test {

#ifdef DP_TRAIN_BIN
inline const char* kBinary = DP_TRAIN_BIN;
#else
inline const char* kBinary = nullptr;  // tools not built (DP_BUILD_TOOLS=OFF)
#endif
#define DP_TRAIN_REQUIRE_BINARY() \
  if (::dp_train_test::kBinary == nullptr) GTEST_SKIP() << "dp-train is not built (configure with -DDP_BUILD_TOOLS=ON)"

inline const char* kFashionDir = "/usr/share/datasets/fashion-mnist";
inline bool have_fashion_mnist() {
  return std::filesystem::exists(std::string(kFashionDir) + "/train-images-idx3-ubyte.gz") &&
         std::filesystem::exists(std::string(kFashionDir) + "/t10k-images-idx3-ubyte.gz");
}
#define DP_TRAIN_REQUIRE_FASHION_MNIST()      \
  if (!::dp_train_test::have_fashion_mnist()) \
  GTEST_SKIP() << "Fashion-MNIST is not installed in " << ::dp_train_test::kFashionDir << " (apt-get install dataset-fashion-mnist)"

// A fresh directory, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dp-train-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

inline std::vector<nlohmann::json> events(const std::vector<nlohmann::json>& log, const std::string& event) {
  std::vector<nlohmann::json> out;
  for (const auto& r : log)
    if (r.at("event") == event) out.push_back(r);
  return out;
}

// A started dp-train process; stdout and stderr go to files in `dir`.
struct Process {
  pid_t pid = -1;
  std::string out_path, err_path;
};

inline Process start(const std::vector<std::string>& args, const TempDir& dir, const std::string& tag = "run") {
  Process p;
  p.out_path = dir.file(tag + ".stdout");
  p.err_path = dir.file(tag + ".stderr");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, p.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> all{kBinary};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = posix_spawn(&p.pid, kBinary, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error(std::string("posix_spawn ") + kBinary + " failed");
  return p;
}

struct Result {
  int status = -1;  // exit status, or -signal when killed by one
  std::string out, err;
  std::string command;
};

inline Result wait(const Process& p) {
  int st = 0;
  ::waitpid(p.pid, &st, 0);
  Result r;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : (WIFSIGNALED(st) ? -WTERMSIG(st) : -1000);
  r.out = read_text(p.out_path);
  r.err = read_text(p.err_path);
  return r;
}

// Runs dp-train to the end.
inline Result run(const std::vector<std::string>& args, const TempDir& dir, const std::string& tag = "run") {
  Result r = wait(start(args, dir, tag));
  r.command = "dp-train";
  for (const auto& a : args) r.command += " " + a;
  return r;
}

// As run(), but dp-train runs as a user that permission bits bind: the caller, or, when the caller
// is root (who writes anywhere), the unprivileged user nobody (support/unprivileged.h) in a forked
// child that then execs dp-train. That user must be able to reach the paths it is given. Status
// dp::test::kCannotDropPrivileges: the child could not become nobody (the test should skip).
inline Result run_unprivileged(const std::vector<std::string>& args, const TempDir& dir, const std::string& tag = "run") {
  if (dp::test::permissions_bind()) return run(args, dir, tag);
  Process p;
  p.out_path = dir.file(tag + ".stdout");
  p.err_path = dir.file(tag + ".stderr");
  std::vector<std::string> all{kBinary};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  p.pid = ::fork();
  if (p.pid < 0) throw std::runtime_error("fork failed");
  if (p.pid == 0) {
    // Only async-signal-safe calls between fork and exec (the test process may have threads).
    const int out = ::open(p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err = ::open(p.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0 || err < 0 || ::dup2(out, STDOUT_FILENO) < 0 || ::dup2(err, STDERR_FILENO) < 0) ::_exit(127);
    if (!dp::test::become_nobody()) {
      static const char msg[] = "test: cannot drop root privileges (setgroups/setresgid/setresuid)\n";
      (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
      ::_exit(dp::test::kCannotDropPrivileges);
    }
    ::execve(kBinary, argv.data(), environ);
    static const char msg[] = "test: the user nobody cannot execute dp-train\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  Result r = wait(p);
  r.command = "(as nobody) dp-train";
  for (const auto& a : args) r.command += " " + a;
  return r;
}

inline std::string describe(const Result& r) {
  return r.command + "\nexit status " + std::to_string(r.status) + "\n--- stdout (tail) ---\n" +
         (r.out.size() > 3000 ? r.out.substr(r.out.size() - 3000) : r.out) + "\n--- stderr ---\n" + r.err;
}

inline std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The last "test accuracy X" the summary printed.
inline double final_accuracy(const std::string& out) {
  const auto at = out.rfind("test accuracy ");
  return at == std::string::npos ? -1 : std::stod(out.substr(at + 14));
}

// /usr/bin/python3 with PyTorch, or an empty string and the reason.
inline std::string torch_python(std::string* why) {
  const char* python = "/usr/bin/python3";
  if (::access(python, X_OK) != 0) {
    *why = std::string(python) + " not found";
    return "";
  }
  if (std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") != 0) {
    *why = std::string(python) + " cannot import torch (apt-get install python3-torch)";
    return "";
  }
  return python;
}

}  // namespace dp_train_test
