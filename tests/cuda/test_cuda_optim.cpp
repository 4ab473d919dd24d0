// Optimizers on CUDA: SGD, Adam and AdamW on cuda:0 against the same optimizer on the CPU with
// identical gradients, over several steps, several groups (float32 and float64), more tensors than
// one multi-tensor launch holds, a tensor of several chunks and a non-contiguous parameter; state
// on the parameter's device; state saved on CUDA and loaded on the CPU and the other way round;
// zero_grad. The launch plan and the argument checks run on every machine; the rest needs a GPU.
#include <gtest/gtest.h>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "dp/optim/optim.h"
#include "backend/cuda/optim.h"
#include "support/cuda.h"
#include "support/cuda_compare.h"

namespace dp {
namespace {

using backend::cuda::optim::MultiTensorLaunch;
using backend::cuda::optim::plan_launches;
using namespace dp::optim;

// ---------------------------------------------------------------- host: launch plan, checks

TEST(CudaOptimPlan, ListsAreCutIntoLaunchesOfAtMostMaxTensors) {
  std::vector<int64_t> sizes(70, 10);
  sizes[3] = 0;              // empty: no block, still counted in its launch
  sizes[40] = 3 * 8192 + 1;  // four chunks
  const auto plan = plan_launches(sizes);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].first, 0u);
  EXPECT_EQ(plan[0].count, 32u);
  EXPECT_EQ(plan[0].blocks, 31);  // 31 tensors of one chunk, one empty
  EXPECT_EQ(plan[1].first, 32u);
  EXPECT_EQ(plan[1].count, 32u);
  EXPECT_EQ(plan[1].blocks, 31 + 4);
  EXPECT_EQ(plan[2].first, 64u);
  EXPECT_EQ(plan[2].count, 6u);
  EXPECT_EQ(plan[2].blocks, 6);
  EXPECT_TRUE(plan_launches({}).empty());
  const auto one = plan_launches({1}, 4, 100);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].blocks, 1);
  const auto chunks = plan_launches({100, 101, 250}, 2, 100);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].blocks, 1 + 2);
  EXPECT_EQ(chunks[1].blocks, 3);
}

TEST(CudaOptimPlan, BadArgumentsAreValueErrors) {
  EXPECT_THROW(plan_launches({-1}), ValueError);
  EXPECT_THROW(plan_launches({1}, 0), ValueError);
  EXPECT_THROW(plan_launches({1}, 4, 0), ValueError);
  // More chunks than one grid holds.
  EXPECT_THROW(plan_launches({int64_t{1} << 62}, 4, 1), ValueError);
}

TEST(CudaOptimErrors, ParametersOnAMissingCudaDeviceAreRefusedNamingOptimizerAndDevice) {
  // A tensor labelled cuda:15 over host memory (never dereferenced): no such device here.
  static float host[2];
  auto storage = std::make_shared<StorageImpl>(host, sizeof(host), Device::cuda(15), [](void*) {});
  Tensor t(std::make_shared<TensorImpl>(storage, Shape{2}, Shape{1}, 0, kFloat32));
  try {
    SGD({t}, SGDOptions(0.1));
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("SGD: parameter 0 of param group 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda:15"), std::string::npos) << msg;
  }
  EXPECT_THROW(Adam({t}), DeviceError);
}

// ---------------------------------------------------------------- GPU

using test::kGpu;

// NaN propagates (a NaN result fails every comparison, EXPECT_GT too).
double rel_error(const Tensor& out, const Tensor& ref) { return test::rel_err(out, ref, /*nan_as_infinity=*/false); }

double tol_for(DType dt) { return dt == kFloat64 ? 1e-12 : 1e-6; }

void expect_close(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_TRUE(gpu.is_cuda()) << what;
  ASSERT_EQ(gpu.sizes(), cpu.sizes()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  EXPECT_LE(rel_error(gpu, cpu), tol_for(cpu.dtype())) << what;
}

// Random non-zero values: |x| in [0.1, 1.1), random sign.
Tensor nonzero_sample(IntArrayRef sizes, DType dt, uint64_t seed) {
  Generator g(seed);
  Tensor mag = rand(sizes, TensorOptions().dtype(kFloat64), &g) + 0.1;
  Tensor sign = lt(rand(sizes, TensorOptions().dtype(kFloat64), &g), 0.5).to(kFloat64) * 2.0 - 1.0;
  return (mag * sign).to(dt);
}

// Fills the CUDA caching allocator's free blocks with NaN, so state that a step fails to write
// shows up as NaN in the results.
void poison_cuda_cache(const std::vector<Tensor>& like) {
  std::vector<Tensor> held;
  for (const Tensor& p : like)
    for (int k = 0; k < 3; ++k) held.push_back(full(p.sizes(), NAN, TensorOptions(p.dtype()).device(kGpu)));
}

// A model's parameters on the CPU and the same values on the GPU, in two groups: float32 (more
// tensors than one launch takes, one of several chunks, one non-contiguous) and float64.
struct Twin {
  std::vector<Tensor> cpu32, gpu32, cpu64, gpu64;

  Twin() {
    uint64_t seed = 100;
    auto add = [&](IntArrayRef shape, DType dt, bool transposed) {
      Tensor v = nonzero_sample(shape, dt, seed++);
      Tensor c = transposed ? v.t() : v;  // a non-contiguous leaf when transposed
      Tensor g = transposed ? v.to(kGpu).t() : v.to(kGpu);
      c.requires_grad_(true);
      g.requires_grad_(true);
      (dt == kFloat32 ? cpu32 : cpu64).push_back(c);
      (dt == kFloat32 ? gpu32 : gpu64).push_back(g);
    };
    for (int i = 0; i < 36; ++i) add({1 + (i * 7) % 23}, kFloat32, false);
    add({20000}, kFloat32, false);  // 3 chunks
    add({37, 29}, kFloat32, true);  // strided
    add({5, 6}, kFloat64, false);
    add({9000}, kFloat64, false);
  }

  std::vector<OptimizerParamGroup> groups(bool gpu) const {
    return {OptimizerParamGroup(gpu ? gpu32 : cpu32), OptimizerParamGroup(gpu ? gpu64 : cpu64)};
  }

  // The same random gradient on both sides (a new one per step); one parameter gets none on odd
  // steps (skipped by the step).
  void set_grads(int step) {
    uint64_t seed = 1000 + 100 * static_cast<uint64_t>(step);
    auto set = [&](std::vector<Tensor>& c, std::vector<Tensor>& g) {
      for (size_t i = 0; i < c.size(); ++i) {
        if (i == 2 && step % 2 == 1) {
          c[i].set_grad(Tensor());
          g[i].set_grad(Tensor());
          continue;
        }
        Tensor v = nonzero_sample(c[i].sizes(), c[i].dtype(), seed++);
        c[i].set_grad(v);
        g[i].set_grad(v.to(kGpu));
      }
    };
    set(cpu32, gpu32);
    set(cpu64, gpu64);
  }

  void expect_equal(const std::string& what) const {
    for (size_t i = 0; i < cpu32.size(); ++i) expect_close(gpu32[i], cpu32[i], what + " float32 parameter " + std::to_string(i));
    for (size_t i = 0; i < cpu64.size(); ++i) expect_close(gpu64[i], cpu64[i], what + " float64 parameter " + std::to_string(i));
  }
};

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<OptimizerParamGroup>)>;

void run_twin(const MakeOptimizer& make, const std::string& what, int steps = 4) {
  Twin t;
  auto cpu = make(t.groups(false));
  auto gpu = make(t.groups(true));
  for (int s = 0; s < steps; ++s) {
    t.set_grads(s);
    poison_cuda_cache(t.gpu32);
    cpu->step();
    gpu->step();
    t.expect_equal(what + " step " + std::to_string(s + 1));
  }
  // State lives on the parameter's device.
  for (const auto& [impl, state] : gpu->state()) {
    OrderedDict<std::string, Tensor> tensors;
    state->save("", tensors);
    for (const auto& item : tensors) {
      if (item.key() == "step") continue;
      EXPECT_TRUE(item.value().is_cuda()) << what << ": state " << item.key() << " on " << item.value().device().str();
    }
  }
}

TEST(CudaOptim, SgdMatchesTheCpu) {
  DP_REQUIRE_GPU();
  run_twin([](auto g) { return std::make_unique<SGD>(std::move(g), SGDOptions(0.05)); }, "SGD plain");
  run_twin([](auto g) { return std::make_unique<SGD>(std::move(g), SGDOptions(0.05).momentum(0.9).dampening(0.2).weight_decay(0.01)); },
           "SGD momentum dampening weight decay");
  run_twin([](auto g) { return std::make_unique<SGD>(std::move(g), SGDOptions(0.05).momentum(0.8).nesterov(true).maximize(true)); },
           "SGD nesterov maximize");
}

TEST(CudaOptim, AdamMatchesTheCpu) {
  DP_REQUIRE_GPU();
  run_twin([](auto g) { return std::make_unique<Adam>(std::move(g), AdamOptions(1e-2)); }, "Adam");
  run_twin([](auto g) { return std::make_unique<Adam>(std::move(g), AdamOptions(1e-2).weight_decay(0.1).amsgrad(true)); },
           "Adam weight decay amsgrad");
  run_twin(
      [](auto g) {
        return std::make_unique<Adam>(std::move(g), AdamOptions(1e-2).betas({0.8, 0.99}).eps(1e-6).maximize(true));
      },
      "Adam betas eps maximize");
}

TEST(CudaOptim, AdamWMatchesTheCpu) {
  DP_REQUIRE_GPU();
  run_twin([](auto g) { return std::make_unique<AdamW>(std::move(g), AdamWOptions(1e-2)); }, "AdamW");
  run_twin([](auto g) { return std::make_unique<AdamW>(std::move(g), AdamWOptions(1e-2).weight_decay(0.05).amsgrad(true)); }, "AdamW amsgrad");
}

TEST(CudaOptim, GroupsWithTheirOwnOptionsAndAStepCountPerParameter) {
  DP_REQUIRE_GPU();
  // The float64 group gets its own lr; the parameter without a gradient on odd steps has a
  // smaller step count, so the launch carries per-tensor bias corrections.
  run_twin(
      [](std::vector<OptimizerParamGroup> g) {
        g[1] = OptimizerParamGroup(g[1].params(), AdamOptions(3e-3).weight_decay(0.2));
        return std::make_unique<Adam>(std::move(g), AdamOptions(1e-2));
      },
      "Adam per-group options", 5);
  Twin t;
  Adam gpu(t.groups(true), AdamOptions(1e-2));
  for (int s = 0; s < 4; ++s) {
    t.set_grads(s);
    gpu.step();
  }
  EXPECT_EQ(static_cast<AdamParamState&>(*gpu.state().at(t.gpu32[0].unsafe_impl())).step, 4);
  EXPECT_EQ(static_cast<AdamParamState&>(*gpu.state().at(t.gpu32[2].unsafe_impl())).step, 2);
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("dp_test_cuda_optim_" + name + ".safetensors")).string();
}

// Steps `from` (on one side) 3 times, saves it, loads the file into a fresh optimizer over the
// other side's parameters (set to the same values), then steps both twice more.
template <typename Opt, typename Options>
void save_and_load_across(bool save_from_gpu, const Options& options, const std::string& what) {
  Twin t;
  Opt cpu(t.groups(false), options);
  Opt gpu(t.groups(true), options);
  for (int s = 0; s < 3; ++s) {
    t.set_grads(s);
    cpu.step();
    gpu.step();
  }
  const std::string path = temp_path(what);
  save(save_from_gpu ? static_cast<Optimizer&>(gpu) : static_cast<Optimizer&>(cpu), path);
  // The other side restarts from the saved state.
  Opt fresh(t.groups(!save_from_gpu), options);
  load(fresh, path);
  std::filesystem::remove(path);
  for (const auto& [impl, state] : fresh.state()) {
    OrderedDict<std::string, Tensor> tensors;
    state->save("", tensors);
    for (const auto& item : tensors) {
      if (item.key() == "step") continue;
      EXPECT_EQ(item.value().device(), save_from_gpu ? Device::cpu() : kGpu) << what << ": loaded state " << item.key();
    }
  }
  Optimizer& cpu_side = save_from_gpu ? static_cast<Optimizer&>(fresh) : static_cast<Optimizer&>(cpu);
  Optimizer& gpu_side = save_from_gpu ? static_cast<Optimizer&>(gpu) : static_cast<Optimizer&>(fresh);
  for (int s = 3; s < 5; ++s) {
    t.set_grads(s);
    cpu_side.step();
    gpu_side.step();
    t.expect_equal(what + " step " + std::to_string(s + 1) + " after load");
  }
}

TEST(CudaOptim, StateSavedOnCudaLoadsOnTheCpuAndTheOtherWay) {
  DP_REQUIRE_GPU();
  save_and_load_across<SGD>(true, SGDOptions(0.05).momentum(0.9), "sgd_gpu_to_cpu");
  save_and_load_across<SGD>(false, SGDOptions(0.05).momentum(0.9), "sgd_cpu_to_gpu");
  save_and_load_across<Adam>(true, AdamOptions(1e-2).amsgrad(true), "adam_gpu_to_cpu");
  save_and_load_across<AdamW>(false, AdamWOptions(1e-2).weight_decay(0.1), "adamw_cpu_to_gpu");
}

TEST(CudaOptim, ZeroGradOnCuda) {
  DP_REQUIRE_GPU();
  Twin t;
  SGD opt(t.groups(true), SGDOptions(0.1));
  t.set_grads(0);
  opt.zero_grad(/*set_to_none=*/false);
  for (const Tensor& p : t.gpu32) {
    Tensor g = p.grad();
    ASSERT_TRUE(g.defined());
    EXPECT_TRUE(g.is_cuda());
    for (double v : g.to(Device::cpu(), kFloat64).contiguous().to_vector<double>()) EXPECT_EQ(v, 0.0);
  }
  opt.zero_grad();
  for (const Tensor& p : t.gpu32) EXPECT_FALSE(p.grad().defined());
}

TEST(CudaOptim, MismatchedGradientIsAClearError) {
  DP_REQUIRE_GPU();
  Tensor p = zeros({4}, TensorOptions().device(kGpu)).requires_grad_(true);
  SGD opt({p}, SGDOptions(0.1));
  // Either set_grad or the step refuses it (the kernels read raw memory of the parameter's dtype).
  EXPECT_THROW(
      {
        p.set_grad(zeros({4}, TensorOptions().device(kGpu).dtype(kFloat64)));
        opt.step();
      },
      Error);
}

// float16/bfloat16 parameters (state in their dtype, float32 math, one rounding per store): the
// CUDA kernels do the CPU kernels' operations, so the results agree to the last bit in practice;
// checked against the CPU in the same dtype (tight) and against a float32 CPU run from the same
// 16-bit values (about the type's precision). Parameters: many small ones (more than one launch),
// one of several chunks, one non-contiguous.
void run_half_twin(const MakeOptimizer& make, const std::string& what) {
  for (DType dt : {kBFloat16, kFloat16}) {
    const std::string name = what + " " + dtype_name(dt);
    std::vector<Tensor> cpu, gpu, ref;
    uint64_t seed = 500;
    auto add = [&](IntArrayRef shape, bool transposed) {
      Tensor v = nonzero_sample(shape, dt, seed++);
      cpu.push_back((transposed ? v.clone().t() : v.clone()).requires_grad_(true));
      gpu.push_back((transposed ? v.to(kGpu).t() : v.to(kGpu)).requires_grad_(true));
      ref.push_back((transposed ? v.to(kFloat32).t() : v.to(kFloat32)).requires_grad_(true));
    };
    for (int i = 0; i < 34; ++i) add({1 + (i * 5) % 19}, false);
    add({17000}, false);
    add({13, 11}, true);
    auto o_cpu = make({OptimizerParamGroup(cpu)});
    auto o_gpu = make({OptimizerParamGroup(gpu)});
    auto o_ref = make({OptimizerParamGroup(ref)});
    for (int step = 0; step < 4; ++step) {
      for (size_t i = 0; i < cpu.size(); ++i) {
        Tensor g = nonzero_sample(cpu[i].sizes(), dt, 2000 + 100 * static_cast<uint64_t>(step) + i);
        cpu[i].set_grad(g);
        gpu[i].set_grad(g.to(kGpu));
        ref[i].set_grad(g.to(kFloat32));
      }
      poison_cuda_cache(gpu);
      o_cpu->step();
      o_gpu->step();
      o_ref->step();
    }
    for (size_t i = 0; i < cpu.size(); ++i) {
      const std::string at = name + " parameter " + std::to_string(i);
      ASSERT_EQ(gpu[i].dtype(), dt) << at;
      EXPECT_LE(rel_error(gpu[i], cpu[i]), 1e-3) << at << " vs the CPU in " << dtype_name(dt);
      EXPECT_LE(rel_error(gpu[i], ref[i]), dt == kBFloat16 ? 1e-2 : 2e-3) << at << " vs float32";
    }
    for (const auto& [impl, state] : o_gpu->state()) {
      OrderedDict<std::string, Tensor> tensors;
      state->save("", tensors);
      for (const auto& item : tensors) {
        if (item.key() == "step") continue;
        EXPECT_TRUE(item.value().is_cuda()) << name << ": state " << item.key();
        EXPECT_EQ(item.value().dtype(), dt) << name << ": state " << item.key();
      }
    }
  }
}

TEST(CudaOptim, HalfParametersMatchTheCpu) {
  DP_REQUIRE_GPU();
  run_half_twin([](auto g) { return std::make_unique<SGD>(std::move(g), SGDOptions(0.05).momentum(0.9)); }, "SGD momentum");
  run_half_twin([](auto g) { return std::make_unique<SGD>(std::move(g), SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(0.01)); },
                "SGD nesterov weight decay");
  run_half_twin([](auto g) { return std::make_unique<Adam>(std::move(g), AdamOptions(1e-2).amsgrad(true)); }, "Adam amsgrad");
  run_half_twin([](auto g) { return std::make_unique<AdamW>(std::move(g), AdamWOptions(1e-2).weight_decay(0.05)); }, "AdamW");
}

}  // namespace
}  // namespace dp
