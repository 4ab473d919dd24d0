# Run-time choice of instruction set (src/backend/cpu/cpu_dispatch.h says how). It only acts when
# the build does not already target AVX2: a portable build (DP_NATIVE=OFF, -march=x86-64) compiles
# the hot loops for x86-64, x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512) and picks one per process
# from the CPU; a native build on an AVX2 machine compiles them once, for the machine.
# DP_CPU_DISPATCH=OFF (and the sanitizer builds) keep the portable build to x86-64 code only.
option(DP_CPU_DISPATCH "Portable builds: also compile the hot loops for AVX2 and AVX-512, chosen at run time" ON)
if(NOT DP_CPU_DISPATCH OR DP_SANITIZE)
  target_compile_definitions(dparallel PRIVATE DP_CPU_DISPATCH=0)
endif()
if(NOT DP_NATIVE)
  string(REPLACE ";" " " _dp_flags "${DP_ARCH_FLAGS}")
  if(DP_CPU_DISPATCH AND NOT DP_SANITIZE AND DP_ARCH_FLAGS)
    message(STATUS "dparallel: portable build (${_dp_flags}), hot loops dispatched at run time (x86-64, AVX2, AVX-512)")
  else()
    message(STATUS "dparallel: portable build (${_dp_flags}), no run-time dispatch")
  endif()
  unset(_dp_flags)
endif()
