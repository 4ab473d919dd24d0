# The Debian package: cpack -G DEB (in the build folder) makes dparallel_<version>_amd64.deb with
# the library, the headers, the CMake package, dparallel.pc and the tools (when built). A package
# is for other machines, so it is made from the portable, shared, CUDA-less build (the one
# Install.Packaging tests, tests/consumer/packaging.sh; docs/getting-started.md):
#   cmake -S . -B build-deb -G Ninja -DCMAKE_BUILD_TYPE=Release -DDP_NATIVE=OFF -DDP_WITH_CUDA=OFF \
#         -DBUILD_SHARED_LIBS=ON -DDP_BUILD_TESTS=OFF -DDP_BUILD_BENCH=OFF -DDP_BUILD_EXAMPLES=OFF
#   cmake --build build-deb && (cd build-deb && cpack -G DEB)
#   apt install ./build-deb/dparallel_*.deb
# The run-time dependencies come from dpkg-shlibdeps (package dpkg-dev); the -dev packages are
# what the CMake package and dparallel.pc ask a consumer's build for.
#
# cpack refuses (cmake/PackageCheck.cmake, run by cpack before it installs anything) to make a
# Debian package of a build that would not run, or not install, elsewhere:
#  - DP_NATIVE=ON: -march=native code, which dies with SIGILL on an older CPU;
#  - the CUDA backend: its library libdparallel_cuda needs libcudart, cuDNN and NCCL, which are not
#    Debian packages (they come with NVIDIA's toolkit or Python wheels), so dpkg-shlibdeps cannot
#    declare them and the package would install and then fail to load (libdparallel itself needs
#    none of them, but one package holds every installed file);
#  - a sanitizer build (DP_SANITIZE).
# The check is at cpack time, not at configure time, because only then is it known that a Debian
# package is being made (configuring a native or CUDA build is the normal case). A package for this
# machine only: cpack -G DEB -D CPACK_DP_ALLOW_UNPORTABLE=ON. A static library is allowed (its
# Depends are then the -dev packages below).
set(CPACK_PACKAGE_NAME dparallel)
set(CPACK_PACKAGE_VENDOR "dparallel")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Data-parallel deep-learning training in C++20")
set(CPACK_PACKAGE_DESCRIPTION "dparallel: tensors, autograd, modules and optimizers in C++20, with DataParallel over several devices of one machine and DistributedDataParallel over several processes (Gloo). Library, headers, CMake package, pkg-config file and the dp-train and dp-run tools.")
set(CPACK_PACKAGE_CONTACT "dparallel maintainers <dparallel@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL OFF)  # one package with every component
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # dparallel_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# A static libdparallel.a brings its dependencies into the consumer's link: the -dev packages of
# BLAS, zlib, Gloo and OpenSSL (the CMake package finds them again), and oneDNN's when the build has
# it. A shared library names them itself.
if(DP_PACKAGE_STATIC)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libopenblas-dev | libblas-dev, zlib1g-dev, libgloo-dev, libssl-dev")
  if(DP_HAVE_ONEDNN)
    string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", libdnnl-dev")
  endif()
endif()
set(CPACK_DP_NATIVE OFF)
if("-march=native" IN_LIST DP_ARCH_FLAGS)
  set(CPACK_DP_NATIVE ON)
endif()
set(CPACK_DP_CUDA ${DP_HAVE_CUDA})
set(CPACK_DP_SANITIZE "${DP_SANITIZE}")
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_SOURCE_DIR}/cmake/PackageCheck.cmake)
include(CPack)
