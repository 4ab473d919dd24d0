// dp/core/threads.h's thread settings, implemented by the CPU backend: they are its BLAS thread
// policy (backend/cpu/blas.h), so core declares them and never reaches into a backend.
#include "dp/core/threads.h"

#include <unistd.h>

#include <cstdlib>

#include "backend/cpu/blas.h"

namespace dp {

void set_num_threads(int n) { backend::cpu::blas::set_host_threads(n); }
int get_num_threads() { return backend::cpu::blas::host_threads(); }

std::string blas_coretype_suggestion() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";
  return backend::cpu::blas::coretype_suggestion();
}

void reexec_for_blas_kernels(char** argv) {
  // The marker stops a second re-execution should OpenBLAS ignore the setting.
  if (argv == nullptr || argv[0] == nullptr || std::getenv("DP_BLAS_REEXEC") != nullptr) return;
  const std::string core = blas_coretype_suggestion();
  if (core.empty()) return;
  ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  ::setenv("DP_BLAS_REEXEC", "1", 1);
  ::execv("/proc/self/exe", argv);
  ::unsetenv("OPENBLAS_CORETYPE");  // exec failed: carry on as we were
  ::unsetenv("DP_BLAS_REEXEC");
}

}  // namespace dp
