# Install rules (DP_INSTALL, on by default when dparallel is the top-level project), the CMake
# package, the pkg-config file and the Debian package (cpack -G DEB). Included after the dparallel
# target and cmake/Cuda.cmake.
#
#   <prefix>/include/dp/**                          public headers, and the generated dp/config.h
#   <prefix>/lib/libdparallel.{a,so.*}              the library
#   <prefix>/lib/libdparallel_cuda.{a,so.*}         the CUDA backend's library (a build with CUDA)
#   <prefix>/lib/cmake/dparallel/                   dparallelConfig.cmake (+ Version, Targets, CudaTargets)
#   <prefix>/lib/pkgconfig/dparallel.pc             pkg-config (+ dparallel-cuda.pc with CUDA)
#   <prefix>/bin/dp-train, dp-run                   tools/CMakeLists.txt (DP_BUILD_TOOLS)
#
# A consumer:  find_package(dparallel CONFIG REQUIRED)
#              target_link_libraries(app PRIVATE dparallel::dparallel)
# gets the include directory, C++20, DP_HAVE_CUDA=0/1 (also fixed by the installed dp/config.h, for
# a consumer that only adds -I<prefix>/include) and the link interface: no CUDA library, the
# program runs on the CPU. Adding dparallel::cuda to target_link_libraries (no source change) links
# the CUDA backend too, which registers itself (cmake/Cuda.cmake); find_package(dparallel
# COMPONENTS cuda) makes it required. For the static libraries the link interface holds the
# private dependencies too (BLAS, zlib, Gloo, OpenSSL's libcrypto; CUDA's libraries for
# dparallel::cuda), so the package config looks them up again with find_dependency.
include(CMakePackageConfigHelpers)

set(DP_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/dparallel CACHE STRING "Where dparallelConfig.cmake is installed")
mark_as_advanced(DP_INSTALL_CMAKEDIR)

install(TARGETS dparallel EXPORT dparallelTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT lib NAMELINK_COMPONENT dev
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT lib
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/dp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev
  FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/dp/config.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dp COMPONENT dev)
install(EXPORT dparallelTargets NAMESPACE dparallel:: DESTINATION ${DP_INSTALL_CMAKEDIR} COMPONENT dev)
# The CUDA library in an export set of its own (dparallelCudaTargets.cmake): the package config
# loads it only where CUDA's toolkit (CUDA::cudart) is found, so a CPU-only consumer of a CUDA build
# does not need the toolkit at configure time.
if(TARGET dparallel_cuda)
  install(TARGETS dparallel_cuda EXPORT dparallelCudaTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT lib NAMELINK_COMPONENT dev
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT lib)
  install(EXPORT dparallelCudaTargets NAMESPACE dparallel:: DESTINATION ${DP_INSTALL_CMAKEDIR} COMPONENT dev)
endif()

# What the package config needs to know about this build.
get_target_property(DP_LIBRARY_TYPE dparallel TYPE)
set(DP_PACKAGE_STATIC OFF)
if(DP_LIBRARY_TYPE STREQUAL "STATIC_LIBRARY")
  set(DP_PACKAGE_STATIC ON)
endif()
set(DP_PACKAGE_CUDA ${DP_HAVE_CUDA})
set(DP_PACKAGE_CUDA_BIN_DIR "")
if(DP_HAVE_CUDA)
  set(DP_PACKAGE_CUDA_BIN_DIR "${CUDAToolkit_BIN_DIR}")
endif()
# The BLAS vendor (FindBLAS's BLA_VENDOR) the static library's consumers must link: the one this
# build asked for, else OpenBLAS when that is what FindBLAS found (Debian's libopenblas-dev; the
# .pc's -lopenblas). Empty: find_dependency(BLAS) takes FindBLAS's default.
set(DP_PACKAGE_BLA_VENDOR "${BLA_VENDOR}")
if(NOT DP_PACKAGE_BLA_VENDOR OR DP_PACKAGE_BLA_VENDOR STREQUAL "All")
  set(DP_PACKAGE_BLA_VENDOR "")
  if(BLAS_LIBRARIES MATCHES "libopenblas[^/]*$")
    set(DP_PACKAGE_BLA_VENDOR OpenBLAS)
  endif()
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dparallelConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dparallelConfig.cmake INSTALL_DESTINATION ${DP_INSTALL_CMAKEDIR})
# 0.x: a minor release may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dparallelConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dparallelConfig.cmake ${PROJECT_BINARY_DIR}/dparallelConfigVersion.cmake
  DESTINATION ${DP_INSTALL_CMAKEDIR} COMPONENT dev)

# pkg-config. The link flags of a dependency given as a file become -L/-l (no -L for the compiler's
# own directories). Static library: the dependencies are in Libs (a plain `pkg-config --libs`
# must link); shared: in Libs.private.
function(dp_pc_link_flags out)
  set(flags "")
  foreach(item IN LISTS ARGN)
    if(item MATCHES "^-")
      list(APPEND flags "${item}")
    elseif(IS_ABSOLUTE "${item}")
      get_filename_component(dir "${item}" DIRECTORY)
      get_filename_component(file "${item}" NAME)
      string(REGEX MATCH "^lib(.+)\\.(so(\\..*)?|a)$" lib_file "${file}")
      set(lib_name "${CMAKE_MATCH_1}")
      if(lib_file)
        if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES AND NOT dir STREQUAL "/usr/lib")
          list(APPEND flags "-L${dir}")
        endif()
        list(APPEND flags "-l${lib_name}")
      else()
        list(APPEND flags "${item}")
      endif()
    elseif(item)
      list(APPEND flags "-l${item}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES flags)
  string(REPLACE ";" " " flags "${flags}")
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

set(DP_PC_DEPS ${BLAS_LIBRARIES} ${ZLIB_LIBRARIES})
if(DP_HAVE_ONEDNN)
  list(APPEND DP_PC_DEPS ${DP_ONEDNN_LIBRARY})
endif()
get_target_property(DP_GLOO_LOCATION gloo LOCATION)
list(APPEND DP_PC_DEPS ${DP_GLOO_LOCATION} ${OPENSSL_CRYPTO_LIBRARY})
set(DP_PC_CFLAGS "-DDP_HAVE_CUDA=0")
if(DP_HAVE_CUDA)
  set(DP_PC_CFLAGS "-DDP_HAVE_CUDA=1")
endif()
dp_pc_link_flags(DP_PC_PRIVATE_LIBS ${DP_PC_DEPS})
if(DP_PACKAGE_STATIC)
  set(DP_PC_LIBS "-L\${libdir} -ldparallel ${DP_PC_PRIVATE_LIBS} -pthread")
  set(DP_PC_LIBS_PRIVATE "")
else()
  set(DP_PC_LIBS "-L\${libdir} -ldparallel -pthread")
  set(DP_PC_LIBS_PRIVATE "${DP_PC_PRIVATE_LIBS}")
endif()
# dparallel-cuda.pc: the CUDA library, on top of dparallel.pc (Requires), whose Libs come after its
# own, as a static link needs. -Wl,--undefined makes the linker take the object file whose static
# registrar enlists the backend; for the shared library, --no-as-needed keeps it needed
# (cmake/Cuda.cmake). CUDA's runtime is public (dp/cuda/check.h
# includes its header); cuDNN and NCCL are private.
if(DP_HAVE_CUDA)
  dp_pc_link_flags(DP_PC_CUDA_PUBLIC_LIBS -L${CUDAToolkit_LIBRARY_DIR} -lcudart ${CMAKE_DL_LIBS})
  dp_pc_link_flags(DP_PC_CUDA_PRIVATE_LIBS ${DP_CUDNN_LIBRARY} ${DP_NCCL_LIBRARY})
  set(DP_PC_CUDA_CFLAGS "")
  foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
    if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
      string(APPEND DP_PC_CUDA_CFLAGS " -I${dir}")
    endif()
  endforeach()
  string(STRIP "${DP_PC_CUDA_CFLAGS}" DP_PC_CUDA_CFLAGS)
  if(DP_PACKAGE_STATIC)
    set(DP_PC_CUDA_LIBS "-Wl,--undefined=${DP_CUDA_LINK_SYMBOL} -L\${libdir} -ldparallel_cuda ${DP_PC_CUDA_PUBLIC_LIBS} ${DP_PC_CUDA_PRIVATE_LIBS}")
    set(DP_PC_CUDA_LIBS_PRIVATE "")
  else()
    # Needed even under --as-needed: the program refers to none of its symbols.
    set(DP_PC_CUDA_LIBS "-L\${libdir} -Wl,--push-state,--no-as-needed -ldparallel_cuda -Wl,--pop-state ${DP_PC_CUDA_PUBLIC_LIBS}")
    set(DP_PC_CUDA_LIBS_PRIVATE "${DP_PC_CUDA_PRIVATE_LIBS}")
  endif()
endif()
# A relative libdir/includedir (the usual case) is written relative to ${prefix}, which pkg-config
# users may override (--define-prefix).
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(DP_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(DP_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(DP_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(DP_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# The prefix is only known at install time (cmake --install --prefix P): the file is configured
# then, from a template prepared now.
set(DP_PC_PREFIX "@prefix@")
set(_dp_pc_files dparallel)
if(DP_HAVE_CUDA)
  list(APPEND _dp_pc_files dparallel-cuda)
endif()
foreach(_dp_pc IN LISTS _dp_pc_files)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${_dp_pc}.pc.in ${PROJECT_BINARY_DIR}/${_dp_pc}.pc.in @ONLY)
  install(CODE "
    set(prefix \"\${CMAKE_INSTALL_PREFIX}\")
    configure_file(\"${PROJECT_BINARY_DIR}/${_dp_pc}.pc.in\" \"${PROJECT_BINARY_DIR}/pc-install/${_dp_pc}.pc\" @ONLY)
  " COMPONENT dev)
  install(FILES ${PROJECT_BINARY_DIR}/pc-install/${_dp_pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
endforeach()
unset(_dp_pc)
unset(_dp_pc_files)

include(${PROJECT_SOURCE_DIR}/cmake/Package.cmake)
