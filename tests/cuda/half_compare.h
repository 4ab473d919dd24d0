#pragma once
// GPU tests of ops in float16/bfloat16 against a float32 CPU reference: the inputs are rounded to
// the 16-bit type first (so both sides see the same values), the op runs on cuda:0 in that type
// and on the CPU in float32, and the output and every input's gradient (for one random output
// gradient, also rounded) must agree to about the type's precision.
#include <gtest/gtest.h>
#include <functional>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "support/cuda_compare.h"

namespace dp::test {

inline double half_tol(DType dt) { return dt == kBFloat16 ? 1e-2 : 3e-3; }

// f builds the op's output from its inputs (on whichever device and dtype they are).
inline void check_half_against_float(const std::string& what, const std::vector<Tensor>& inputs32,
                                     const std::function<Tensor(const std::vector<Tensor>&)>& f) {
  for (DType dt : {kBFloat16, kFloat16}) {
    const std::string name = what + " " + dtype_name(dt);
    std::vector<Tensor> cpu, gpu;
    for (const Tensor& in : inputs32) {
      Tensor v = in.to(dt).to(kFloat32);
      cpu.push_back(v.clone().requires_grad_(true));
      gpu.push_back(v.to(kGpu, dt).requires_grad_(true));
    }
    poison_device_cache();
    Tensor yc = f(cpu), yg = f(gpu);
    ASSERT_TRUE(yg.is_cuda()) << name;
    ASSERT_EQ(yg.dtype(), dt) << name;
    ASSERT_EQ(yg.sizes(), yc.sizes()) << name;
    EXPECT_LE(rel_err(yg, yc), half_tol(dt)) << name << " forward";
    Tensor go = sample(yc.sizes(), dt, 4242).to(kFloat32);
    yc.backward(go);
    yg.backward(go.to(kGpu, dt));
    for (size_t i = 0; i < cpu.size(); ++i) {
      ASSERT_TRUE(gpu[i].grad().defined()) << name << " input " << i;
      EXPECT_EQ(gpu[i].grad().dtype(), dt) << name << " input " << i;
      EXPECT_LE(rel_err(gpu[i].grad(), cpu[i].grad()), half_tol(dt)) << name << " gradient of input " << i;
    }
  }
}

}  // namespace dp::test
