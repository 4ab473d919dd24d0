# The CUDA backend: its own library, dparallel_cuda (dparallel::cuda, libdparallel_cuda.{a,so}), beside
# dparallel (as libtorch_cuda beside libtorch_cpu), so that a program that does not use GPUs links no
# CUDA library. Included after the dparallel target is defined.
#
#  - When DP_WITH_CUDA is ON (the default) and nvcc is found, everything under src/cuda (the CUDA
#    runtime, dp::cuda: include/dp/cuda's devices, streams, allocator, graphs) and src/backend/cuda
#    (the backend's kernels, dp::backend::cuda) goes into dparallel_cuda: the *.cpp files (CUDA runtime API calls, compiled by the C++ compiler with
#    dparallel's flags) and the *.cu files (kernels), compiled into the object library
#    dparallel_cuda_kernels whose objects are part of it. dparallel_cuda links dparallel, CUDA::cudart
#    and (found or not) cuDNN and NCCL; dparallel links no CUDA library. dparallel defines
#    DP_HAVE_CUDA=1 (PUBLIC: "built with the CUDA backend", as dp/config.h says).
#  - The backend registers itself when linked: register_kernels.cpp holds a static registrar that
#    enlists it with the core's backend registry (src/backend/registry.h). A static library's linker
#    would not take that object file (nothing names it), so dparallel_cuda's users are given
#    -Wl,--undefined=<DP_CUDA_LINK_SYMBOL> (INTERFACE_LINK_OPTIONS; dparallel-cuda.pc the same), which
#    makes the linker take it, and through the registrar every other object of the library. The
#    shared library runs the registrar when it is loaded; its users are given
#    -Wl,--push-state,--no-as-needed,<the library>,--pop-state, so that a linker that drops unused
#    libraries (--as-needed, the default of some distributions) keeps it.
#  - src/cuda/caching_allocator.cpp is plain C++ (the caching allocator's logic over a
#    raw-memory backend): without CUDA, tests/cuda/test_caching_allocator compiles it itself, so it
#    is tested on every machine.
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
    target_include_directories(dparallel_cuda PRIVATE ${DP_${name}_INCLUDE_DIR})
    target_link_libraries(dparallel_cuda PRIVATE ${DP_${name}_LIBRARY})
    target_compile_definitions(dparallel_cuda PRIVATE DP_HAVE_${name}=1)
    message(STATUS "dparallel: ${name} ${DP_${name}_LIBRARY}")
  else()
    target_compile_definitions(dparallel_cuda PRIVATE DP_HAVE_${name}=0)
    message(STATUS "dparallel: ${name} not found; the CUDA paths that need it are off")
  endif()
endfunction()

set(DP_HAVE_CUDA OFF)
# The symbol a program linking dparallel::cuda is made to refer to: dp::cuda::detail::link_backend()
# (src/backend/cuda/register_kernels.cpp), mangled.
set(DP_CUDA_LINK_SYMBOL _ZN2dp4cuda6detail12link_backendEv)

if(DP_WITH_CUDA)
  include(CheckLanguage)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # src/cuda: the CUDA runtime (dp::cuda, include/dp/cuda); src/backend/cuda: the backend's kernels.
    file(GLOB_RECURSE DP_CUDA_KERNEL_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/*.cu ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cu)
    file(GLOB_RECURSE DP_CUDA_HOST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/*.cpp ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cpp)
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

    add_library(dparallel_cuda ${DP_CUDA_HOST_SOURCES})
    add_library(dparallel::cuda ALIAS dparallel_cuda)
    # Exported (Install.cmake) as dparallel::cuda, the name the build tree's alias has.
    set_target_properties(dparallel_cuda PROPERTIES EXPORT_NAME cuda CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
    target_include_directories(dparallel_cuda PRIVATE ${PROJECT_SOURCE_DIR}/src)
    target_compile_options(dparallel_cuda PRIVATE ${DP_WARNINGS} ${DP_ARCH_FLAGS} $<$<CONFIG:Release>:-O3>)
    # cuBLAS/cuBLASLt are not linked: src/backend/cuda/cublas_api.cpp loads them on first use (loading
    # libcublasLt costs every process ~0.15 s and ~210 MB at start); DP_CUDA_LIBRARY_DIR is where it
    # looks after the soname.
    target_link_libraries(dparallel_cuda PUBLIC dparallel CUDA::cudart ${CMAKE_DL_LIBS})
    target_compile_definitions(dparallel_cuda PRIVATE DP_CUDA_LIBRARY_DIR="${CUDAToolkit_LIBRARY_DIR}")
    # Linked means registered (see the top of this file): a static library's users refer to the
    # registrar's object file; a shared one's name the library as needed even under --as-needed
    # (their program refers to none of its symbols), the linker's state restored after it.
    get_target_property(_dp_cuda_type dparallel_cuda TYPE)
    if(_dp_cuda_type STREQUAL "SHARED_LIBRARY")
      target_link_options(dparallel_cuda INTERFACE "LINKER:--push-state,--no-as-needed,$<TARGET_FILE:dparallel::cuda>,--pop-state")
    else()
      target_link_options(dparallel_cuda INTERFACE "LINKER:--undefined=${DP_CUDA_LINK_SYMBOL}")
    endif()
    unset(_dp_cuda_type)
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
      target_sources(dparallel_cuda PRIVATE $<TARGET_OBJECTS:dparallel_cuda_kernels>)
      add_dependencies(dparallel_cuda dparallel_cuda_kernels)
    endif()
    target_compile_definitions(dparallel PUBLIC DP_HAVE_CUDA=1)
    dp_find_optional_cuda_library(CUDNN cudnn cudnn.h nvidia/cudnn)
    dp_find_optional_cuda_library(NCCL nccl nccl.h nvidia/nccl)
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
