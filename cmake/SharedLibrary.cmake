# Library file names and, for BUILD_SHARED_LIBS=ON, what libdparallel.so exports.
#
# The shared library exports dparallel's API and nothing else: cmake/dparallel.map (a linker
# version script) keeps the symbols of namespace dp (functions, variables, typeinfo, vtables: the
# inline and template code in the public headers calls into dp::detail too, so all of dp stays) and
# makes everything else local: the instantiations of the standard library and of the libraries it
# uses privately (nlohmann_json, Gloo's templates, ...). -fvisibility=hidden is not used: the API
# is templates and classes without export macros.
#
# 0.x: any minor release may change the ABI, so the soname carries major.minor (libdparallel.so.0.1).
set_target_properties(dparallel PROPERTIES
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})

get_target_property(_dp_type dparallel TYPE)
if(_dp_type STREQUAL "SHARED_LIBRARY")
  target_link_options(dparallel PRIVATE
    "LINKER:--version-script=${PROJECT_SOURCE_DIR}/cmake/dparallel.map"
    "LINKER:--no-undefined")
  set_property(TARGET dparallel APPEND PROPERTY LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/dparallel.map)
  if(TARGET dparallel_cuda_kernels)
    set_property(TARGET dparallel_cuda_kernels PROPERTY POSITION_INDEPENDENT_CODE ON)
  endif()
endif()
unset(_dp_type)
