#pragma once
// Starting a worker process: its own process group (so a signal reaches the worker and whatever it
// starts, and the terminal's Ctrl-C reaches dp-run, which passes it on), killed with SIGKILL when
// dp-run dies (PR_SET_PDEATHSIG, checked against the race with getppid), stdin from /dev/null (a
// background process group reading the terminal would be stopped by SIGTTIN), SIGPIPE ignored (as
// Python programs have it: a write to a dead peer is an error, not a silent death), stdout and
// stderr inherited.
#include <sys/types.h>
#include <string>
#include <vector>

namespace dp::run {

// The absolute path `program` runs as: a name with a '/' as it is, else the first executable
// match in PATH. Throws std::runtime_error naming the program when there is none.
std::string resolve_program(const std::string& program, const std::string& path_env);

// Forks and execs `path` with argv and envp. Call only from the main thread (the death signal is
// tied to the thread that forks). Returns the pid once exec has succeeded; throws
// std::runtime_error naming the program and the reason when it could not run (the child is reaped).
pid_t spawn_process(const std::string& path, const std::vector<std::string>& argv, const std::vector<std::string>& envp);

// Signals the worker's whole process group; ESRCH (already gone) is not an error.
void signal_group(pid_t pid, int sig);

// "SIGKILL" for SIGKILL; "signal 77" for a number without a name.
std::string signal_name(int sig);

}  // namespace dp::run
