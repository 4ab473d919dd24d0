# Install rules (DP_INSTALL, on by default when dparallel is the top-level project), the CMake
# package, the pkg-config file and the Debian package (cpack -G DEB). Included after the dparallel
# target and cmake/Cuda.cmake.
#
#   <prefix>/include/dp/**                          public headers, and the generated dp/config.h
#   <prefix>/lib/libdparallel.{a,so.*}              the library
#   <prefix>/lib/cmake/dparallel/                   dparallelConfig.cmake (+ Version, Targets)
#   <prefix>/lib/pkgconfig/dparallel.pc             pkg-config
#   <prefix>/bin/dp-train, dp-run                   tools/CMakeLists.txt (DP_BUILD_TOOLS)
#
# A consumer:  find_package(dparallel CONFIG REQUIRED)
#              target_link_libraries(app PRIVATE dparallel::dparallel)
# gets the include directory, C++20, DP_HAVE_CUDA=0/1 (also fixed by the installed dp/config.h, for
# a consumer that only adds -I<prefix>/include) and the link interface. For the static library
# that interface holds the private dependencies too (BLAS, zlib, Gloo, OpenSSL's libcrypto, CUDA's libraries), so the
# package config looks them up again with find_dependency.
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
set(DP_PC_PUBLIC_LIBS "")
if(DP_HAVE_CUDA)
  set(DP_PC_CFLAGS "-DDP_HAVE_CUDA=1")
  set(DP_PC_PUBLIC_LIBS -L${CUDAToolkit_LIBRARY_DIR} -lcudart ${CMAKE_DL_LIBS})
  list(APPEND DP_PC_DEPS ${DP_CUDNN_LIBRARY} ${DP_NCCL_LIBRARY})
endif()
dp_pc_link_flags(DP_PC_PRIVATE_LIBS ${DP_PC_DEPS})
if(DP_PC_PUBLIC_LIBS)
  dp_pc_link_flags(DP_PC_PUBLIC_LIBS ${DP_PC_PUBLIC_LIBS})
endif()
if(DP_PACKAGE_STATIC)
  set(DP_PC_LIBS "-L\${libdir} -ldparallel ${DP_PC_PRIVATE_LIBS} ${DP_PC_PUBLIC_LIBS} -pthread")
  set(DP_PC_LIBS_PRIVATE "")
else()
  set(DP_PC_LIBS "-L\${libdir} -ldparallel ${DP_PC_PUBLIC_LIBS} -pthread")
  set(DP_PC_LIBS_PRIVATE "${DP_PC_PRIVATE_LIBS}")
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
configure_file(${PROJECT_SOURCE_DIR}/cmake/dparallel.pc.in ${PROJECT_BINARY_DIR}/dparallel.pc.in @ONLY)
install(CODE "
  set(prefix \"\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${PROJECT_BINARY_DIR}/dparallel.pc.in\" \"${PROJECT_BINARY_DIR}/pc-install/dparallel.pc\" @ONLY)
" COMPONENT dev)
install(FILES ${PROJECT_BINARY_DIR}/pc-install/dparallel.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

include(${PROJECT_SOURCE_DIR}/cmake/Package.cmake)
