# Read by cpack for each generator it runs (CPACK_PROJECT_CONFIG_FILE, set in cmake/Package.cmake),
# before anything is installed: a Debian package must not be made from a build that only works on
# this machine (cmake/Package.cmake says why). Override: cpack -G DEB -D CPACK_DP_ALLOW_UNPORTABLE=ON.
if(CPACK_GENERATOR STREQUAL "DEB" AND NOT CPACK_DP_ALLOW_UNPORTABLE)
  set(_dp_why "")
  if(CPACK_DP_NATIVE)
    string(APPEND _dp_why "\n  - it is built with -march=native (for this CPU only): configure with -DDP_NATIVE=OFF")
  endif()
  if(CPACK_DP_CUDA)
    string(APPEND _dp_why "\n  - it has the CUDA backend's library libdparallel_cuda, whose dependencies (libcudart, cuDNN, NCCL) no Debian package provides: configure with -DDP_WITH_CUDA=OFF")
  endif()
  if(CPACK_DP_SANITIZE)
    string(APPEND _dp_why "\n  - it is a sanitizer build (DP_SANITIZE=${CPACK_DP_SANITIZE})")
  endif()
  if(_dp_why)
    message(FATAL_ERROR "dparallel: refusing to make a Debian package of this build:${_dp_why}\n"
      "Build the package from the portable, shared, CUDA-less configuration (docs/getting-started.md):\n"
      "  cmake -S . -B build-deb -G Ninja -DCMAKE_BUILD_TYPE=Release -DDP_NATIVE=OFF -DDP_WITH_CUDA=OFF "
      "-DBUILD_SHARED_LIBS=ON -DDP_BUILD_TESTS=OFF -DDP_BUILD_BENCH=OFF -DDP_BUILD_EXAMPLES=OFF\n"
      "  cmake --build build-deb && (cd build-deb && cpack -G DEB)\n"
      "A package for this machine only: cpack -G DEB -D CPACK_DP_ALLOW_UNPORTABLE=ON")
  endif()
endif()
