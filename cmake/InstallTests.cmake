# The install tests (ctest -L install): dparallel used by another project (tests/consumer), through
# the installed CMake package, through pkg-config, through add_subdirectory and FetchContent, and
# as the Debian package. Registered when the tests and the install rules are on, and not in the
# sanitizer builds (a consumer would have to repeat their link options).
#
# Each builds the consumer program twice where the library has CUDA: linked with dparallel alone
# (no CUDA library among its needed libraries, no CUDA symbol among its undefined ones, and it says
# that dparallel::cuda is not linked), and with dparallel::cuda too (the backend there, no GPU
# visible here): tests/consumer/run.sh.
#
#   Install.FindPackage       cmake --install into a temporary prefix; find_package(dparallel
#                             [COMPONENTS cuda])
#   Install.PkgConfig         another prefix; c++ main.cpp $(pkg-config --cflags --libs dparallel),
#                             and dparallel-cuda
#   Install.AddSubdirectory   add_subdirectory(<source tree>): compiles the library again with this
#                             build's compiler, flags and options (registered only with ccache).
#                             With ccache's defaults (no base_dir: a CI machine) the compiles name
#                             the same absolute paths as this build's and ccache serves every object
#                             (its preprocessor mode ignores the -I and -o that differ). With a
#                             base_dir the paths become relative to another folder depth than this
#                             build's: its first run in a build folder, or after a source is edited,
#                             is a real compile (measured 832 s for 84 of 166 objects on a loaded
#                             2-core machine): hence its long TIMEOUT
#   Install.FetchContent      the same with FetchContent_Declare(dparallel SOURCE_DIR <source tree>)
#                             and FetchContent_MakeAvailable (same rule). Run after
#                             Install.AddSubdirectory, in the same folder layout: ccache serves it
#                             every object of that build (measured 10 s)
#   Install.Packaging         tests/consumer/packaging.sh: builds the library once more as the Debian
#                             package is built (shared, DP_NATIVE=OFF, no CUDA, with the tools), the
#                             configuration nothing else in the suite builds; checks its exports,
#                             installs it, makes the .deb, uses the extracted package, and compares
#                             the consumer's numbers with Install.FindPackage's (its fixture);
#                             find_package(dparallel COMPONENTS cuda) against it is refused.
#                             Its own library build is a real compile the first time (ccache serves
#                             later runs): costs below.
#   Install.DebRefusesUnportable   cpack -G DEB in this build (native or CUDA) stops with
#                             cmake/PackageCheck.cmake's message before installing anything.
if(NOT DP_INSTALL OR DP_SANITIZE)
  return()
endif()
find_program(DP_PKG_CONFIG NAMES pkg-config)

set(_dp_build_type ${CMAKE_BUILD_TYPE})
if(NOT _dp_build_type)
  set(_dp_build_type Release)
endif()
set(_dp_env
  "DP_CXX=${CMAKE_CXX_COMPILER}"
  "DP_GENERATOR=${CMAKE_GENERATOR}"
  "DP_BUILD_TYPE=${_dp_build_type}"
  "DP_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER}")
# The options the add_subdirectory build repeats (DP_CMAKE_ARGS, a ;-list, escaped for ENVIRONMENT).
set(_dp_subdir_args
  -DDP_NATIVE=${DP_NATIVE} -DDP_WITH_CUDA=${DP_WITH_CUDA} -DDP_CPU_DISPATCH=${DP_CPU_DISPATCH}
  -DBUILD_SHARED_LIBS=${BUILD_SHARED_LIBS} -DDP_WERROR=${DP_WERROR})
if(CMAKE_CUDA_COMPILER)
  list(APPEND _dp_subdir_args -DCMAKE_CUDA_COMPILER=${CMAKE_CUDA_COMPILER})
endif()
# The kernels' architectures too (a list: its own variable, DP_CMAKE_ARGS being ;-separated), so
# the consumers' kernel objects are this build's, from ccache.
set(_dp_cuda_archs "")
if(CMAKE_CUDA_ARCHITECTURES)
  string(REPLACE ";" "," _dp_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
endif()
string(REPLACE ";" "\\;" _dp_subdir_args "${_dp_subdir_args}")

set(_dp_run ${PROJECT_SOURCE_DIR}/tests/consumer/run.sh)
set(_dp_work ${PROJECT_BINARY_DIR}/tests/consumer)
add_test(NAME Install.FindPackage
  COMMAND bash ${_dp_run} package ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${_dp_work}/package)
if(DP_PKG_CONFIG)
  add_test(NAME Install.PkgConfig
    COMMAND bash ${_dp_run} pkgconfig ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${_dp_work}/pkgconfig)
else()
  message(STATUS "dparallel: pkg-config not found; Install.PkgConfig is not registered (scripts/install-deps.sh installs it)")
endif()
# Without ccache the add_subdirectory build would compile the whole library again (about 15 min on
# a 2-core machine): the test is then not registered.
if(CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache")
  add_test(NAME Install.AddSubdirectory
    COMMAND bash ${_dp_run} subdir ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${_dp_work}/subdir)
  add_test(NAME Install.FetchContent
    COMMAND bash ${_dp_run} fetchcontent ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${_dp_work}/fetchcontent)
  set_tests_properties(Install.AddSubdirectory Install.FetchContent PROPERTIES TIMEOUT 1500 LABELS install
    ENVIRONMENT "${_dp_env};DP_CMAKE_ARGS=${_dp_subdir_args};DP_CUDA_ARCHITECTURES=${_dp_cuda_archs}")
  # After Install.AddSubdirectory, not beside it: its library build has the same relative paths
  # (with ccache's base_dir), so ccache has every object by then; two at once would both compile.
  set_tests_properties(Install.FetchContent PROPERTIES DEPENDS Install.AddSubdirectory)
else()
  message(STATUS "dparallel: no ccache; Install.AddSubdirectory and Install.FetchContent are not registered")
endif()
# Install.FindPackage's consumer program is Install.Packaging's native reference (a fixture), and
# both start early in a parallel ctest run (COST): Install.Packaging is the suite's longest test.
set_tests_properties(Install.FindPackage PROPERTIES TIMEOUT 300 LABELS install ENVIRONMENT "${_dp_env}"
  FIXTURES_SETUP dp_native_consumer COST 10000)
if(DP_PKG_CONFIG)
  set_tests_properties(Install.PkgConfig PROPERTIES TIMEOUT 300 LABELS install ENVIRONMENT "${_dp_env}")
endif()

# Install.Packaging needs what the Debian package's build and checks use: the tools' dependencies
# (CLI11; DP_BUILD_TOOLS), binutils (nm, c++filt), dpkg-deb and dpkg-shlibdeps (dpkg-dev), cpack.
# Measured on a 2-core machine, -j2, cold (every compile a ccache miss): 493 s with the machine
# nearly idle (load average 2; the build 471 s), 1008 s shared with other builds (load 6; 16.1 min
# of CPU); warm (every compile a hit): 15-33 s. A cold run at load 12 did not finish in 2400 s:
# hence TIMEOUT 3600. In a clean CI run it is one more cold library build (about 8 min of the two
# cores); DP_TEST_PACKAGING=OFF leaves it out.
option(DP_TEST_PACKAGING "Register Install.Packaging (builds the library a second time: see cmake/InstallTests.cmake)" ON)
find_program(DP_NM nm)
find_program(DP_CXXFILT c++filt)
find_program(DP_DPKG_DEB dpkg-deb)
find_program(DP_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(NOT DP_TEST_PACKAGING)
  message(STATUS "dparallel: DP_TEST_PACKAGING=OFF; Install.Packaging is not registered")
elseif(DP_BUILD_TOOLS AND DP_NM AND DP_CXXFILT AND DP_DPKG_DEB AND DP_DPKG_SHLIBDEPS AND CMAKE_CPACK_COMMAND
   AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  add_test(NAME Install.Packaging
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/consumer/packaging.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${_dp_work}/packaging)
  set_tests_properties(Install.Packaging PROPERTIES TIMEOUT 3600 LABELS install
    ENVIRONMENT "${_dp_env};DP_NATIVE_CONSUMER=${_dp_work}/package/consumer/consumer"
    FIXTURES_REQUIRED dp_native_consumer COST 9000)
else()
  message(STATUS "dparallel: Install.Packaging is not registered (it needs DP_BUILD_TOOLS, x86-64, nm, c++filt, dpkg-deb, dpkg-shlibdeps: scripts/install-deps.sh)")
endif()
# cmake/PackageCheck.cmake: cpack -G DEB refuses this build when it is native or has CUDA (the
# message, and nothing installed or packaged). A second's work.
if(CMAKE_CPACK_COMMAND AND (CPACK_DP_NATIVE OR CPACK_DP_CUDA))
  add_test(NAME Install.DebRefusesUnportable
    COMMAND ${CMAKE_CPACK_COMMAND} -G DEB --config ${PROJECT_BINARY_DIR}/CPackConfig.cmake -B ${_dp_work}/deb-refused)
  set_tests_properties(Install.DebRefusesUnportable PROPERTIES TIMEOUT 60 LABELS install
    PASS_REGULAR_EXPRESSION "refusing to make a Debian package of this build"
    FAIL_REGULAR_EXPRESSION "generated|Install project")
endif()

# Installing needs the library and its package files, which the build has made; the tests do not
# install the tools.
unset(_dp_env)
unset(_dp_build_type)
unset(_dp_subdir_args)
unset(_dp_cuda_archs)
unset(_dp_run)
unset(_dp_work)
