# The Debian package: cpack -G DEB (in the build folder) makes dparallel_<version>_amd64.deb with
# the library, the headers, the CMake package, dparallel.pc and the tools (when built). Build it
# portable so it runs on any x86-64 machine, e.g.:
#   cmake -S . -B build-deb -G Ninja -DCMAKE_BUILD_TYPE=Release -DDP_NATIVE=OFF -DDP_WITH_CUDA=OFF \
#         -DBUILD_SHARED_LIBS=ON -DDP_BUILD_TESTS=OFF -DDP_BUILD_BENCH=OFF -DDP_BUILD_EXAMPLES=OFF
#   cmake --build build-deb && (cd build-deb && cpack -G DEB)
#   apt install ./build-deb/dparallel_*.deb
# The run-time dependencies come from dpkg-shlibdeps (package dpkg-dev); the -dev packages are
# what the CMake package and dparallel.pc ask a consumer's build for.
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
# BLAS, zlib and Gloo (the CMake package finds them again). A shared library names them itself.
if(DP_PACKAGE_STATIC)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libopenblas-dev | libblas-dev, zlib1g-dev, libgloo-dev")
endif()
if(DP_HAVE_CUDA)
  message(STATUS "dparallel: a Debian package of a CUDA build needs a CUDA toolkit that Debian's packages do not declare; configure with -DDP_WITH_CUDA=OFF for the package")
endif()
include(CPack)
