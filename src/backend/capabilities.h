#pragma once
// What a backend's kernels accept, per device type, so that an op's argument checks can refuse an
// input its device cannot run without naming the device in the op. Each backend's register
// function fills its entry (src/backend/cpu/register.cpp, src/backend/cuda/register_kernels.cpp); a device
// type no backend registered has every flag false.
#include "dp/core/device.h"
#include "dp/core/dtype.h"

namespace dp::backend {

struct Capabilities {
  // The backend has kernels in this build (the ops' "not implemented for <device> tensors").
  bool kernels = false;
  // Its normalization, pooling, convolution and loss kernels take float16 and bfloat16 inputs
  // (computing in float32). The CPU kernels do not (they take bfloat16 in batch_norm, pooling and
  // convolution only, as PyTorch's CPU kernels).
  bool half_nn = false;
};

// The entry of `type` (all false when no backend registered one). Registers the backends first.
const Capabilities& capabilities(DeviceType type);
inline const Capabilities& capabilities(const Device& d) { return capabilities(d.type); }

// Called by the backends' register functions only (under ensure_registered's once).
void set_capabilities(DeviceType type, const Capabilities& caps);

// A float16 or bfloat16 `dt` on a device whose nn kernels take 16-bit floats.
inline bool half_nn_dtype(const Device& d, DType dt) { return (dt == kFloat16 || dt == kBFloat16) && capabilities(d).half_nn; }

}  // namespace dp::backend
