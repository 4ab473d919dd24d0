#pragma once
// Running another program from a test (e.g. python3 with a checker script).
#include <stdio.h>
#include <sys/wait.h>
#include <string>
#include <utility>

namespace dp::test {

// Runs `cmd` in a shell, its stderr joined to its stdout; returns its exit status (-1 if it did not
// exit normally or could not start) and its output.
inline std::pair<int, std::string> run_command(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace dp::test
