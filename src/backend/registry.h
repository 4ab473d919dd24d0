#pragma once
// The backends a program has. The CPU backend is part of the library (libdparallel) and always
// there. The CUDA backend is a library of its own, dparallel::cuda (libdparallel_cuda, as
// libtorch_cuda beside libtorch_cpu), so that a program that never uses a GPU links no CUDA
// library: linked or loaded, it enlists its register function here from a static initializer
// (a BackendRegistrar), and ensure_registered() (kernel_stub.h) calls each enlisted function once,
// after the CPU's, before the first kernel call or device-runtime lookup.
//
// A static library's linker drops an object file nothing refers to, registrar and all, and
// --as-needed drops a shared library nothing refers to: the CUDA library's CMake target and
// dparallel-cuda.pc make the program refer to its registrar's object, or keep the shared library
// (cmake/Cuda.cmake; docs/architecture.md, "The CUDA library").
#include "dp/core/device.h"

namespace dp::backend {

using RegisterBackendFn = void (*)();

// Enlists `fn` as the backend of `type` (not the CPU's: that one is always registered first). If
// the backends were already registered (a library loaded with dlopen after the first kernel call),
// fn runs at once; it must then not race with kernel calls on other threads.
void enlist_backend(DeviceType type, RegisterBackendFn fn);

// Whether a backend for `type` is enlisted: the CPU's always, CUDA's when dparallel::cuda is part
// of the program (dp::backend_linked, dp/core/device_registry.h, is the public form).
bool backend_enlisted(DeviceType type);

// A backend library's static registrar: `static const BackendRegistrar registrar(DeviceType::CUDA,
// &register_cuda_kernels);` in an object file the program is made to link.
struct BackendRegistrar {
  BackendRegistrar(DeviceType type, RegisterBackendFn fn) { enlist_backend(type, fn); }
};

}  // namespace dp::backend
