// Autocast's behaviour: a training step against torch 1.13 under bf16 autocast
// (tests/golden/gen_autocast.py), where gradients land, the cast cache, nesting and disabling,
// thread-locality, DataParallel replicas, and refused settings.
#include <algorithm>
#include <cmath>
#include <atomic>
#include <mutex>
#include <thread>
#include "dp/amp/autocast.h"
#include "dp/dp.h"
#include "dp/optim/optim.h"
#include "dp/nn/nn.h"
#include "dp/parallel/parallel.h"
#include "support/cuda.h"
#include "support/devices.h"
#include "support/golden.h"

namespace dp {
namespace {

using test::all_close;
using test::golden_file;
using test::tensor_from_json;

// The golden MLP: Linear(8, 16) -> ReLU -> Linear(16, 4), with the golden's float32 parameters.
struct Mlp : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  explicit Mlp(const test::json& params) {
    fc1 = register_module("fc1", nn::Linear(8, 16));
    fc2 = register_module("fc2", nn::Linear(16, 4));
    NoGradGuard no_grad;
    fc1->weight.copy_(tensor_from_json(params["fc1.weight"]));
    fc1->bias.copy_(tensor_from_json(params["fc1.bias"]));
    fc2->weight.copy_(tensor_from_json(params["fc2.weight"]));
    fc2->bias.copy_(tensor_from_json(params["fc2.bias"]));
  }
  Tensor forward(const Tensor& x) { return fc2(dp::relu(fc1(x))); }
};

void check_training_step(const std::string& loss_name) {
  SCOPED_TRACE(loss_name);
  const auto& g = golden_file("autocast.json")["training"][loss_name];
  auto model = std::make_shared<Mlp>(g["params"]);
  const Tensor x = tensor_from_json(g["x"]), y = tensor_from_json(g["y"]);
  Tensor out, loss;
  {
    AutocastGuard autocast(DeviceType::CPU, kBFloat16);
    out = model->forward(x);
    loss = loss_name == "mse_loss" ? dp::mse_loss(out, y) : dp::cross_entropy(out, y);
  }
  loss.backward();
  EXPECT_EQ(out.dtype(), kBFloat16);
  EXPECT_EQ(loss.dtype(), kFloat32);
  // bfloat16 keeps 8 bits of mantissa: one rounding differs by up to 2^-8 relative. Both sides
  // multiply in float32 and round the product once, so most elements agree exactly.
  EXPECT_TRUE(all_close(out, g["out"], 1e-2, 1e-2));
  EXPECT_TRUE(all_close(loss, g["loss"], 1e-2, 1e-3));
  for (const auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    const Tensor& p = item.value();
    SCOPED_TRACE(name);
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.dtype(), kFloat32);
    EXPECT_EQ(p.grad().dtype(), kFloat32);  // the cast's backward brings the gradient back to float32
    EXPECT_TRUE(all_close(p.grad(), g["grads"][name], 2e-2, 2e-3));
  }
}

TEST(Autocast, MlpTrainingStepMatchesTorchMse) { check_training_step("mse_loss"); }
TEST(Autocast, MlpTrainingStepMatchesTorchCrossEntropy) { check_training_step("cross_entropy"); }

// A GPT-like block trains under CPU bfloat16 autocast without a dtype error: causal attention
// (Linear q/k/v, q k^T * scale + a float32 mask, softmax, @ v, Linear), then Linear -> GELU(tanh)
// -> Linear -> LayerNorm -> residual, a head and cross-entropy, AdamW. The products run in
// bfloat16, layer_norm and the loss in float32 (the mask's addition promotes the scores to float32
// before softmax, as in nanoGPT); the losses follow float32 training's closely.
TEST(Autocast, GptLikeBlockTrainsUnderCpuBFloat16) {
  const int64_t b = 4, t = 16, c = 32, vocab = 11;
  auto run = [&](bool bf16, bool check_dtypes) {
    manual_seed(0);
    nn::Linear q(c, c), k(c, c), v(c, c), attn_proj(c, c), fc(c, 4 * c), proj(4 * c, c), head(c, vocab);
    nn::LayerNorm ln(nn::LayerNormOptions({c}));
    std::vector<Tensor> params;
    for (nn::Module* m : std::initializer_list<nn::Module*>{q.get(), k.get(), v.get(), attn_proj.get(), fc.get(), proj.get(), head.get(), ln.get()})
      for (const Tensor& p : m->parameters()) params.push_back(p);
    optim::AdamW opt(params, optim::AdamWOptions(1e-2));
    const Tensor x = randn({b, t, c}), y = randint(0, vocab, {b, t});
    Tensor mask = zeros({t, t});  // 0 on and below the diagonal, -inf above
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = i + 1; j < t; ++j) mask.data_ptr<float>()[i * t + j] = -INFINITY;
    std::vector<double> losses;
    for (int step = 0; step < 8; ++step) {
      opt.zero_grad();
      Tensor loss;
      {
        AutocastGuard autocast(DeviceType::CPU, kBFloat16, bf16);
        const Tensor scores = matmul(q(x), k(x).transpose(1, 2)) * (1.0 / std::sqrt(double(c))) + mask;
        const Tensor att = softmax(scores, -1);
        const Tensor h = x + attn_proj(matmul(att, v(x)));
        const Tensor mlp = proj(gelu(fc(h), "tanh"));
        const Tensor normed = ln(mlp);
        const Tensor z = h + normed;
        const Tensor logits = head(z);
        loss = cross_entropy(logits.reshape({b * t, vocab}), y.reshape({b * t}));
        if (check_dtypes) {
          EXPECT_EQ(scores.dtype(), kFloat32);  // bfloat16 q k^T plus the float32 mask
          EXPECT_EQ(mlp.dtype(), kBFloat16);
          EXPECT_EQ(normed.dtype(), kFloat32);  // layer_norm on the float32 list
          EXPECT_EQ(z.dtype(), kFloat32);
          EXPECT_EQ(logits.dtype(), kBFloat16);
          EXPECT_EQ(loss.dtype(), kFloat32);
          check_dtypes = false;
        }
      }
      loss.backward();
      for (const Tensor& p : params) EXPECT_EQ(p.grad().dtype(), kFloat32);
      opt.step();
      losses.push_back(loss.item<double>());
    }
    return losses;
  };
  const std::vector<double> f32 = run(false, false), bf16 = run(true, true);
  ASSERT_EQ(bf16.size(), f32.size());
  EXPECT_LT(bf16.back(), 0.8 * bf16.front());  // it learns
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_NEAR(bf16[i], f32[i], 0.03 * f32[i]) << "step " << i;
}

TEST(Autocast, DefaultsAndStateRestoredAfterGuard) {
  EXPECT_FALSE(autocast::is_cpu_enabled());
  EXPECT_FALSE(autocast::is_enabled());
  EXPECT_EQ(autocast::get_autocast_cpu_dtype(), kBFloat16);
  EXPECT_EQ(autocast::get_autocast_gpu_dtype(), kFloat16);
  EXPECT_TRUE(autocast::is_autocast_cache_enabled());
  {
    AutocastGuard a(DeviceType::CPU, kBFloat16, true, false);
    EXPECT_TRUE(autocast::is_cpu_enabled());
    EXPECT_FALSE(autocast::is_enabled());
    EXPECT_FALSE(autocast::is_autocast_cache_enabled());
    {
      AutocastGuard b(DeviceType::CUDA, kBFloat16);
      EXPECT_TRUE(autocast::is_enabled());
      EXPECT_EQ(autocast::get_autocast_gpu_dtype(), kBFloat16);
    }
    EXPECT_FALSE(autocast::is_enabled());
    EXPECT_EQ(autocast::get_autocast_gpu_dtype(), kFloat16);
  }
  EXPECT_FALSE(autocast::is_cpu_enabled());
  EXPECT_TRUE(autocast::is_autocast_cache_enabled());
}

TEST(Autocast, NestedGuardsAndDisablingInside) {
  const Tensor a = randn({4, 6}), w = randn({3, 6});
  AutocastGuard outer(DeviceType::CPU, kBFloat16);
  EXPECT_EQ(dp::linear(a, w).dtype(), kBFloat16);
  {
    AutocastGuard off(DeviceType::CPU, std::nullopt, false);  // torch.autocast("cpu", enabled=False)
    EXPECT_FALSE(autocast::is_cpu_enabled());
    EXPECT_EQ(dp::linear(a, w).dtype(), kFloat32);
    Tensor e = dp::linear(a.to(kBFloat16), w.to(kBFloat16));  // untouched: runs in what it is given
    EXPECT_EQ(e.dtype(), kBFloat16);
    {
      AutocastGuard again(DeviceType::CPU, kBFloat16);
      EXPECT_EQ(dp::linear(a, w).dtype(), kBFloat16);
    }
    EXPECT_EQ(dp::linear(a, w).dtype(), kFloat32);
  }
  EXPECT_EQ(dp::linear(a, w).dtype(), kBFloat16);
  // CUDA autocast does not touch CPU tensors.
  AutocastGuard cuda(DeviceType::CUDA);
  AutocastGuard cpu_off(DeviceType::CPU, std::nullopt, false);
  EXPECT_EQ(dp::linear(a, w).dtype(), kFloat32);
}

TEST(Autocast, ParameterCastsAreCachedPerRegionAndClearedOnExit) {
  nn::Linear fc(6, 3);
  const Tensor x = randn({4, 6});
  ASSERT_EQ(autocast::cache_size(), 0u);
  {
    AutocastGuard outer(DeviceType::CPU, kBFloat16);
    Tensor y1 = fc(x);
    EXPECT_EQ(autocast::cache_size(), 2u);  // weight and bias: leaves that require grad
    Tensor y2 = fc(x);
    EXPECT_EQ(autocast::cache_size(), 2u);  // reused, not cast again
    // The input is not a parameter: never cached. Nor is a tensor that does not require grad.
    Tensor z = dp::mm(randn({2, 6}), randn({6, 2}));
    EXPECT_EQ(autocast::cache_size(), 2u);
    {
      AutocastGuard inner(DeviceType::CPU, kBFloat16);
      fc(x);
      EXPECT_EQ(autocast::cache_size(), 2u);
    }
    EXPECT_EQ(autocast::cache_size(), 2u);  // an inner region's exit keeps the outer region's cache
    (y1.sum() + y2.sum()).backward();
  }
  EXPECT_EQ(autocast::cache_size(), 0u);  // the outermost region's exit clears it
  // Both uses of the cached cast sent their gradient to the float32 parameter.
  EXPECT_EQ(fc->weight.grad().dtype(), kFloat32);
  Tensor expected = dp::sum(x, {0}).unsqueeze(0).expand({3, 6}) * 2;
  EXPECT_TRUE(all_close(fc->weight.grad(), expected, 2e-2, 2e-2));
  {
    AutocastGuard no_cache(DeviceType::CPU, kBFloat16, true, false);
    fc(x);
    EXPECT_EQ(autocast::cache_size(), 0u);
  }
}

TEST(Autocast, BackwardRunsInTheDtypesForwardUsed) {
  Tensor w = randn({3, 6}).requires_grad_(true);
  Tensor x = randn({4, 6}).to(kBFloat16).requires_grad_(true);
  Tensor loss;
  {
    AutocastGuard autocast(DeviceType::CPU, kBFloat16);
    Tensor h = dp::linear(x, w);
    EXPECT_EQ(h.dtype(), kBFloat16);
    loss = dp::mse_loss(h, dp::zeros({4, 3}));
    EXPECT_EQ(loss.dtype(), kFloat32);
    loss.backward();  // inside the region: backward functions still run in forward's dtypes
  }
  EXPECT_EQ(x.grad().dtype(), kBFloat16);
  EXPECT_EQ(w.grad().dtype(), kFloat32);
}

TEST(Autocast, StateIsPerThread) {
  AutocastGuard autocast(DeviceType::CPU, kBFloat16);
  std::atomic<bool> enabled_there{true};
  DType dtype_there = kFloat32;
  std::thread t([&] {
    enabled_there = autocast::is_cpu_enabled();
    dtype_there = dp::mm(randn({2, 2}), randn({2, 2})).dtype();
    AutocastGuard own(DeviceType::CPU, kBFloat16);  // a region of its own leaves the caller's alone
  });
  t.join();
  EXPECT_FALSE(enabled_there);
  EXPECT_EQ(dtype_there, kFloat32);
  EXPECT_TRUE(autocast::is_cpu_enabled());
  EXPECT_EQ(dp::mm(randn({2, 2}), randn({2, 2})).dtype(), kBFloat16);
}

// A model that records what each replica's forward saw.
struct Recorder : nn::Module {
  nn::Linear fc{nullptr};
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
  std::shared_ptr<std::vector<std::string>> seen = std::make_shared<std::vector<std::string>>();
  Recorder() { fc = register_module("fc", nn::Linear(6, 3)); }
  Tensor forward(const Tensor& x) {
    Tensor y = fc(x);
    std::lock_guard<std::mutex> lock(*mu);
    seen->push_back(x.device().str() + (autocast::is_cpu_enabled() ? " on " : " off ") + dtype_name(y.dtype()));
    return y;
  }
};

TEST(Autocast, DataParallelReplicasRunWithTheCallersState) {
  set_cpu_device_count(2);
  auto model = std::make_shared<Recorder>();
  model->to("cpu:0");
  nn::DataParallel<Recorder> net(model, test::cpu_devices(2));
  const Tensor x = randn({8, 6});
  Tensor y;
  {
    AutocastGuard autocast(DeviceType::CPU, kBFloat16);
    y = net(x);
  }
  EXPECT_EQ(y.dtype(), kBFloat16);
  std::sort(model->seen->begin(), model->seen->end());
  EXPECT_EQ(*model->seen, (std::vector<std::string>{"cpu:0 on bfloat16", "cpu:1 on bfloat16"}));
  // The replicas' gradients reach the float32 module's parameters in float32.
  y.to(kFloat32).sum().backward();
  EXPECT_EQ(model->fc->weight.grad().dtype(), kFloat32);
  EXPECT_TRUE(all_close(model->fc->weight.grad().cpu(), dp::sum(x, {0}).unsqueeze(0).expand({3, 6}), 2e-2, 5e-2));
  // Off in the caller: off in the replicas; and the workers kept no state of their own.
  model->seen->clear();
  Tensor z = net(x);
  EXPECT_EQ(z.dtype(), kFloat32);
  std::sort(model->seen->begin(), model->seen->end());
  EXPECT_EQ(*model->seen, (std::vector<std::string>{"cpu:0 off float32", "cpu:1 off float32"}));
  // forward_loss runs the criterion on the replicas too: the loss is float32 (mse_loss's policy).
  {
    AutocastGuard autocast(DeviceType::CPU, kBFloat16);
    Tensor loss = net->forward_loss([](const Tensor& out, const Tensor& t) { return dp::mse_loss(out, t); }, dp::zeros({8, 3}), x);
    EXPECT_EQ(loss.dtype(), kFloat32);
  }
}

TEST(Autocast, RefusedSettingsNameWhatIsWrong) {
  try {
    AutocastGuard g(DeviceType::CPU, kFloat16);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("CPU autocast supports only bfloat16, got float16"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(autocast::is_cpu_enabled());  // a refused guard changes nothing
  EXPECT_THROW(AutocastGuard(DeviceType::CUDA, kFloat32), ValueError);
  EXPECT_THROW(autocast::set_autocast_cpu_dtype(kFloat64), ValueError);
  EXPECT_EQ(autocast::get_autocast_cpu_dtype(), kBFloat16);
  // Disabled, any dtype is accepted (nothing will be cast to it).
  EXPECT_NO_THROW(AutocastGuard(DeviceType::CPU, kFloat16, false));
  // Ops still check their arguments after the casts: float64 is never cast, so it meets bfloat16.
  AutocastGuard autocast(DeviceType::CPU, kBFloat16);
  try {
    dp::linear(randn({2, 3}, kFloat64), randn({4, 3}));
    FAIL() << "expected DTypeError";
  } catch (const DTypeError& e) {
    // The op's own message, prefixed with the cast the caller did not write.
    const std::string what = e.what();
    EXPECT_NE(what.find("under CPU autocast, which cast linear's floating arguments to bfloat16"), std::string::npos) << what;
    EXPECT_NE(what.find("linear: expected"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace dp

namespace dp {
namespace {

// CUDA's lists (PyTorch 1.13's CUDA column; no torch with CUDA here to make goldens from, so the
// expected dtypes are the lists themselves). Skips without a GPU.
TEST(AutocastCuda, ListsAndDtypesOnAGpu) {
  DP_REQUIRE_GPU();
  const Device d("cuda:0");
  const Tensor a = randn({4, 6}).to(d), w = randn({3, 6}).to(d), p = rand({4, 6}).to(d);
  for (DType low : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(low));
    AutocastGuard autocast(DeviceType::CUDA, low);
    EXPECT_EQ(dp::linear(a, w).dtype(), low);
    EXPECT_EQ(dp::mm(a, w.t()).dtype(), low);
    const Tensor h = a.to(low);
    EXPECT_EQ(dp::softmax(h, 1).dtype(), kFloat32);
    EXPECT_EQ(dp::log_softmax(h, 1).dtype(), kFloat32);
    EXPECT_EQ(dp::exp(h).dtype(), kFloat32);
    EXPECT_EQ(dp::sum(h).dtype(), kFloat32);
    EXPECT_EQ(dp::sum(h, kBFloat16).dtype(), kBFloat16);  // an explicit dtype is kept
    EXPECT_EQ(dp::layer_norm(h, {6}).dtype(), kFloat32);
    EXPECT_EQ(dp::mse_loss(h, h).dtype(), kFloat32);
    EXPECT_EQ(dp::relu(h).dtype(), low);                       // untouched
    EXPECT_EQ(dp::cat({h, h}).dtype(), low);                   // not on CUDA's promote list
    EXPECT_EQ(dp::dot(h[0], a[0]).dtype(), kFloat32);          // promote
    EXPECT_THROW(dp::binary_cross_entropy(p, p), DTypeError);  // banned, as in PyTorch
    // CPU tensors are not CUDA autocast's business.
    EXPECT_EQ(dp::linear(a.cpu(), w.cpu()).dtype(), kFloat32);
  }
}

}  // namespace
}  // namespace dp
