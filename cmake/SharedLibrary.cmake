# Library file names and, for BUILD_SHARED_LIBS=ON, what libdparallel.so (and libdparallel_cuda.so)
# exports.
#
# The shared library exports dparallel's API and nothing else: cmake/dparallel.map (a linker
# version script) keeps the symbols of namespace dp (functions, variables, typeinfo, vtables: the
# inline and template code in the public headers calls into dp::detail too, so all of dp stays) and
# makes everything else local: the instantiations of the standard library and of the libraries it
# uses privately (nlohmann_json, Gloo's templates, ...). -fvisibility=hidden is not used: the API
# is templates and classes without export macros.
#
# 0.x: any minor release may change the ABI, so the soname carries major.minor (libdparallel.so.0.1).
# The CUDA library (dparallel_cuda, cmake/Cuda.cmake) follows the same rules: libdparallel_cuda.so.0.1,
# exporting namespace dp only, linked with --no-undefined against libdparallel.so and CUDA's libraries.
set(_dp_libraries dparallel)
if(TARGET dparallel_cuda)
  list(APPEND _dp_libraries dparallel_cuda)
endif()
foreach(_dp_lib IN LISTS _dp_libraries)
  set_target_properties(${_dp_lib} PROPERTIES
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  get_target_property(_dp_type ${_dp_lib} TYPE)
  if(_dp_type STREQUAL "SHARED_LIBRARY")
    target_link_options(${_dp_lib} PRIVATE
      "LINKER:--version-script=${PROJECT_SOURCE_DIR}/cmake/dparallel.map"
      "LINKER:--no-undefined")
    set_property(TARGET ${_dp_lib} APPEND PROPERTY LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/dparallel.map)
  endif()
endforeach()
get_target_property(_dp_type dparallel TYPE)
if(_dp_type STREQUAL "SHARED_LIBRARY" AND TARGET dparallel_cuda_kernels)
  set_property(TARGET dparallel_cuda_kernels PROPERTY POSITION_INDEPENDENT_CODE ON)
endif()
unset(_dp_type)
unset(_dp_lib)
unset(_dp_libraries)
