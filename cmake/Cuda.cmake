# The CUDA backend. Included after the dparallel target is defined.
#
#  - src/backend/cuda/caching_allocator.cpp is plain C++ (the caching allocator's logic over a raw-memory
#    backend) and is always built, so it is tested on every machine.
#  - When DP_WITH_CUDA is ON (the default) and nvcc is found, the rest of src/backend/cuda is built too:
#    the other *.cpp files (CUDA runtime API calls, compiled by the C++ compiler with dparallel's
#    flags) go into dparallel, and the *.cu files (kernels) into the object library
#    dparallel_cuda_kernels, whose objects are part of libdparallel. dparallel then defines
#    DP_HAVE_CUDA=1 and links CUDA::cudart, both PUBLIC.
#  - Kernels are compiled for sm_80 and sm_90 (SASS) plus compute_90 PTX, C++20. Keep the number
#    of .cu files small: they are the slow part of a cold build.
# dp_find_optional_cuda_library(NAME lib header wheel_dir): cuDNN and NCCL are optional. They are
# looked for beside the CUDA toolkit, under $ENV{NAME_ROOT}, and in the Python wheels a PyTorch
# install brings (site-packages/nvidia/cudnn, nvidia/nccl: that is where the lent GPU machines have
# them). Found: dparallel links it and defines DP_HAVE_NAME=1 (PRIVATE; the public headers do not
# depend on it); else DP_HAVE_NAME=0 and the code paths that need it say so when used.
function(dp_find_optional_cuda_library name lib header wheel_dir)
  set(hints ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT} $ENV{${name}_ROOT})
  find_program(DP_PYTHON3 NAMES python3)
  if(DP_PYTHON3)
    execute_process(COMMAND ${DP_PYTHON3} -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
                    OUTPUT_VARIABLE site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(site)
      list(APPEND hints ${site}/${wheel_dir})
    endif()
  endif()
  find_path(DP_${name}_INCLUDE_DIR ${header} HINTS ${CUDAToolkit_INCLUDE_DIRS} ${hints} PATH_SUFFIXES include)
  find_library(DP_${name}_LIBRARY NAMES ${lib} lib${lib}.so.9 lib${lib}.so.2 HINTS ${hints} PATH_SUFFIXES lib lib64)
  if(DP_${name}_INCLUDE_DIR AND DP_${name}_LIBRARY)
    target_include_directories(dparallel PRIVATE ${DP_${name}_INCLUDE_DIR})
    target_link_libraries(dparallel PRIVATE ${DP_${name}_LIBRARY})
    target_compile_definitions(dparallel PRIVATE DP_HAVE_${name}=1)
    message(STATUS "dparallel: ${name} ${DP_${name}_LIBRARY}")
  else()
    target_compile_definitions(dparallel PRIVATE DP_HAVE_${name}=0)
    message(STATUS "dparallel: ${name} not found; the CUDA paths that need it are off")
  endif()
endfunction()

set(DP_HAVE_CUDA OFF)
target_sources(dparallel PRIVATE ${PROJECT_SOURCE_DIR}/src/backend/cuda/caching_allocator.cpp)

if(DP_WITH_CUDA)
  include(CheckLanguage)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    file(GLOB_RECURSE DP_CUDA_KERNEL_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cu)
    file(GLOB_RECURSE DP_CUDA_HOST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cpp)
    list(REMOVE_ITEM DP_CUDA_HOST_SOURCES ${PROJECT_SOURCE_DIR}/src/backend/cuda/caching_allocator.cpp)
    if(DP_CUDA_KERNEL_SOURCES OR DP_CUDA_HOST_SOURCES)
      if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
        set(CMAKE_CUDA_ARCHITECTURES "80-real;90")
      endif()
      if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER)
        set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
      endif()
      set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
      if(CCACHE_PROGRAM)
        set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
      endif()
      enable_language(CUDA)
      find_package(CUDAToolkit REQUIRED)
      # CMake before 3.26 does not know nvcc's C++20 flag (and CUDA targets otherwise inherit
      # CXX_STANDARD 20 and fail to generate): tell it.
      if(NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
        set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
        set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
        list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
        set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
      endif()
      set(DP_HAVE_CUDA ON)
      # dparallel was created before CUDA was enabled, so its CUDA_ARCHITECTURES was not initialised
      # from the variable; the Makefile generators refuse an empty one for a target holding CUDA objects.
      set_property(TARGET dparallel PROPERTY CUDA_ARCHITECTURES ${CMAKE_CUDA_ARCHITECTURES})

      target_sources(dparallel PRIVATE ${DP_CUDA_HOST_SOURCES})
      if(DP_CUDA_KERNEL_SOURCES)
        add_library(dparallel_cuda_kernels OBJECT ${DP_CUDA_KERNEL_SOURCES})
        # The directory's options (cmake/Sanitizers.cmake: -fsanitize=…) are host-compiler flags
        # nvcc rejects; kernel objects are built without them (uninstrumented host code is fine
        # under ASan and TSan).
        set_property(TARGET dparallel_cuda_kernels PROPERTY COMPILE_OPTIONS "")
        # No kernel includes dp/autograd/node.h (the only header that includes the generated
        # dp/config.h): a kernel that comes to need it needs ${PROJECT_BINARY_DIR}/include here too.
        target_include_directories(dparallel_cuda_kernels PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
        target_compile_definitions(dparallel_cuda_kernels PRIVATE DP_HAVE_CUDA=1)
        target_compile_options(dparallel_cuda_kernels PRIVATE $<$<CONFIG:Release>:-O3>)
        set_target_properties(dparallel_cuda_kernels PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF)
        target_link_libraries(dparallel_cuda_kernels PRIVATE CUDA::cudart)
        target_sources(dparallel PRIVATE $<TARGET_OBJECTS:dparallel_cuda_kernels>)
        add_dependencies(dparallel dparallel_cuda_kernels)
      endif()
      target_compile_definitions(dparallel PUBLIC DP_HAVE_CUDA=1)
      # cuBLAS/cuBLASLt are not linked: src/backend/cuda/cublas_api.cpp loads them on first use (loading
      # libcublasLt costs every process ~0.15 s and ~210 MB at start); DP_CUDA_LIBRARY_DIR is where it
      # looks after the soname.
      target_link_libraries(dparallel PUBLIC CUDA::cudart ${CMAKE_DL_LIBS})
      target_compile_definitions(dparallel PRIVATE DP_CUDA_LIBRARY_DIR="${CUDAToolkit_LIBRARY_DIR}")
      dp_find_optional_cuda_library(CUDNN cudnn cudnn.h nvidia/cudnn)
      dp_find_optional_cuda_library(NCCL nccl nccl.h nvidia/nccl)
    endif()
  endif()
endif()
if(NOT DP_HAVE_CUDA)
  # Users' programs may test `#if DP_HAVE_CUDA`. Its value is fixed by the generated dp/config.h
  # (CMakeLists.txt), which dp/dp.h includes; the definition is passed on to the target's users
  # too, so their own sources may test it before including a dparallel header. The library's
  # sources read it undefined, which #if takes as the same 0.
  target_compile_definitions(dparallel INTERFACE DP_HAVE_CUDA=0)
endif()
message(STATUS "dparallel: CUDA backend ${DP_HAVE_CUDA}")
if(DP_HAVE_CUDA)
  message(STATUS "dparallel: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
endif()
