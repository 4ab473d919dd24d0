// DataParallel and its comm primitives on CUDA devices, against the single-device (host) result.
// Needs a GPU; most tests need 2 or 4 CUDA devices, which one GPU provides as virtual devices: CTest
// runs this program again with DP_CUDA_VIRTUAL_DEVICES=2 and =4 (tests/CMakeLists.txt). Each test
// reads the device count and skips when there are too few. float32 results are compared by relative
// error ||out - ref|| / ||ref||, integer ones exactly.
#include <gtest/gtest.h>
#include <cmath>
#include <memory>
#include "dp/core/device_registry.h"
#include "dp/core/warning.h"
#include "dp/dp.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"
#include "dp/parallel/parallel.h"
#include "parallel/reduce.h"
#include "support/cuda.h"

namespace dp::parallel {
namespace {

#define DP_REQUIRE_CUDA_DEVICES(n) \
  DP_REQUIRE_GPU();                \
  if (cuda_device_count() < (n))   \
  GTEST_SKIP() << "needs " << (n) << " CUDA devices, there are " << cuda_device_count() << " (one GPU gives more with DP_CUDA_VIRTUAL_DEVICES)"

std::vector<Device> cuda_devices(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(Device::cuda(i));
  return d;
}

// ||a - b|| / ||b|| in double, on the host.
double rel_err(const Tensor& a, const Tensor& b) {
  Tensor x = a.detach().cpu().to(kFloat64).contiguous(), y = b.detach().cpu().to(kFloat64).contiguous();
  EXPECT_EQ(x.sizes(), y.sizes());
  if (x.sizes() != y.sizes()) return INFINITY;
  const double* p = static_cast<const double*>(x.data_ptr());
  const double* q = static_cast<const double*>(y.data_ptr());
  double num = 0, den = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    num += (p[i] - q[i]) * (p[i] - q[i]);
    den += q[i] * q[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

constexpr double kTol = 1e-5;  // float32, a few roundings apart

struct Mlp : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr}, unused{nullptr};
  Mlp() {
    fc1 = register_module("fc1", nn::Linear(12, 32));
    fc2 = register_module("fc2", nn::Linear(32, 5));
    unused = register_module("unused", nn::Linear(3, 3));  // gets zero gradients, as in PyTorch
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};

// ---- comm primitives ----

TEST(CommCuda, BroadcastCoalescedCopiesEveryTensorToEveryDevice) {
  DP_REQUIRE_CUDA_DEVICES(2);
  const int n = std::min(cuda_device_count(), 4);
  manual_seed(1);
  const Device d0 = Device::cuda(0);
  std::vector<Tensor> host{randn({7, 5}), randn({300}), randn({3, 2}).to(kFloat64), randint(-50, 50, {9}), randn({0, 4}), randn({64, 64})};
  std::vector<Tensor> src;
  for (const Tensor& t : host) src.push_back(t.to(d0));
  for (size_t buffer : {size_t{256}, kDefaultBufferSize}) {  // several buckets, then one per dtype
    SCOPED_TRACE("buffer " + std::to_string(buffer));
    auto out = broadcast_coalesced(src, cuda_devices(n), buffer);
    ASSERT_EQ(out.size(), static_cast<size_t>(n));
    for (size_t i = 0; i < src.size(); ++i) EXPECT_TRUE(out[0][i].is_same(src[i]));
    for (int j = 1; j < n; ++j) {
      ASSERT_EQ(out[j].size(), src.size());
      for (size_t i = 0; i < src.size(); ++i) {
        EXPECT_EQ(out[j][i].device(), Device::cuda(j));
        EXPECT_EQ(out[j][i].sizes(), host[i].sizes());
        EXPECT_EQ(out[j][i].dtype(), host[i].dtype());
        EXPECT_TRUE(equal(out[j][i].cpu(), host[i])) << "tensor " << i << " on cuda:" << j;
      }
    }
  }
}

TEST(CommCuda, ReduceAddCoalescedSumsOntoAnyDestination) {
  DP_REQUIRE_CUDA_DEVICES(2);
  const int n = std::min(cuda_device_count(), 4);
  manual_seed(2);
  std::vector<std::vector<Tensor>> host(n), dev(n);
  for (int j = 0; j < n; ++j) {
    host[j] = {randn({33, 7}), randn({1000}).to(kFloat64), randint(-9, 9, {5, 5}), randn({4}).t()};
    for (const Tensor& t : host[j]) dev[j].push_back(t.to(Device::cuda(j)));
  }
  std::vector<Tensor> expected;
  for (size_t i = 0; i < host[0].size(); ++i) {
    Tensor s = host[0][i].clone();
    for (int j = 1; j < n; ++j) s = s + host[j][i];
    expected.push_back(s);
  }
  for (Device dest : {Device::cuda(0), Device::cuda(n - 1), Device::cpu()}) {
    for (size_t buffer : {size_t{128}, kDefaultBufferSize}) {
      SCOPED_TRACE(dest.str() + ", buffer " + std::to_string(buffer));
      std::vector<Tensor> out = reduce_add_coalesced(dev, dest, buffer);
      ASSERT_EQ(out.size(), expected.size());
      for (size_t i = 0; i < out.size(); ++i) {
        EXPECT_EQ(out[i].device(), dest);
        if (is_floating_point(out[i].dtype()))
          EXPECT_LT(rel_err(out[i], expected[i]), kTol) << "tensor " << i;
        else
          EXPECT_TRUE(equal(out[i].cpu(), expected[i])) << "tensor " << i;
      }
    }
  }
  // reduce_add: one tensor from each device; the inputs are left alone.
  std::vector<Tensor> ones;
  for (int j = 0; j < n; ++j) ones.push_back(full({3}, 1.0, TensorOptions().device(Device::cuda(j))));
  EXPECT_TRUE(equal(reduce_add(ones, Device::cuda(0)).cpu(), full({3}, static_cast<double>(n))));
  EXPECT_TRUE(equal(ones[0].cpu(), full({3}, 1.0)));
}

TEST(CommCuda, GradientReductionTreatsMissingGradientsAsAbsent) {
  DP_REQUIRE_CUDA_DEVICES(2);
  manual_seed(3);
  const Tensor a = randn({6, 3}), b = randn({6, 3}), c = randn({2});
  std::vector<detail::TensorSpec> specs{{{6, 3}, kFloat32}, {{2}, kFloat32}, {{4}, kFloat32}};
  std::vector<std::vector<Tensor>> in{{a.to(Device::cuda(0)), Tensor(), Tensor()}, {b.to(Device::cuda(1)), c.to(Device::cuda(1)), Tensor()}};
  std::vector<Tensor> out = detail::reduce_sum(in, specs, Device::cuda(0));
  ASSERT_EQ(out.size(), 3u);
  for (const Tensor& t : out) EXPECT_EQ(t.device(), Device::cuda(0));
  EXPECT_LT(rel_err(out[0], a + b), kTol);
  EXPECT_TRUE(equal(out[1].cpu(), c));           // one contribution: moved over
  EXPECT_TRUE(equal(out[2].cpu(), zeros({4})));  // none: zeros
}

TEST(CommCuda, ScatterAndGatherBetweenHostAndDevicesAreDifferentiable) {
  DP_REQUIRE_CUDA_DEVICES(2);
  const int n = std::min(cuda_device_count(), 4);
  manual_seed(4);
  Tensor x = randn({10, 3}).requires_grad_(true);
  std::vector<Tensor> chunks = scatter(x, cuda_devices(n));
  const std::vector<int64_t> sizes = chunk_sizes(10, n);
  ASSERT_EQ(chunks.size(), sizes.size());
  int64_t offset = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].device(), Device::cuda(static_cast<int>(i)));
    EXPECT_TRUE(equal(chunks[i].cpu(), x.detach().narrow(0, offset, sizes[i])));
    offset += sizes[i];
  }
  std::vector<Tensor> scaled;
  for (size_t i = 0; i < chunks.size(); ++i) scaled.push_back(chunks[i] * static_cast<double>(i + 1));
  for (Device dest : {Device::cuda(0), Device::cpu()}) {
    SCOPED_TRACE(dest.str());
    Tensor y = gather(scaled, dest);
    EXPECT_EQ(y.device(), dest);
    EXPECT_EQ(y.sizes(), x.sizes());
    y.sum().backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().device(), Device::cpu());
    offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_TRUE(equal(x.grad().narrow(0, offset, sizes[i]), full({sizes[i], 3}, static_cast<double>(i + 1))));
      offset += sizes[i];
    }
    x.mutable_grad() = Tensor();
    chunks = scatter(x, cuda_devices(n));
    scaled.clear();
    for (size_t i = 0; i < chunks.size(); ++i) scaled.push_back(chunks[i] * static_cast<double>(i + 1));
  }
  // Along dim 1, from a device tensor.
  Tensor z = randn({4, 9}).to(Device::cuda(0));
  std::vector<Tensor> cols = scatter(z, {Device::cuda(1), Device::cuda(0)}, std::nullopt, 1);
  EXPECT_TRUE(equal(gather(cols, Device::cpu(), 1), z.cpu()));
}

// ---- DataParallel ----

// Three training steps of an MLP under DataParallel on `n` CUDA devices against the host module:
// output, every gradient (the unused layer's zeros included, on several devices), the input's
// gradient, and the parameters after each SGD step.
void check_mlp(int n, int64_t rows, Device input_device, std::optional<Device> output_device) {
  SCOPED_TRACE(std::to_string(n) + " devices, " + std::to_string(rows) + " rows, input on " + input_device.str());
  manual_seed(5);
  auto model = std::make_shared<Mlp>();
  auto reference = nn::clone(model);
  model->to(Device::cuda(0));
  DataParallelOptions options(cuda_devices(n));
  if (output_device) options.output_device(*output_device);
  nn::DataParallel<Mlp> net(model, options);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD opt_ref(reference->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    Tensor x_host = randn({rows, 12});
    Tensor x = x_host.to(input_device).detach().requires_grad_(true);
    Tensor x_ref = x_host.clone().requires_grad_(true);
    opt.zero_grad();
    opt_ref.zero_grad();
    Tensor y = net(x);
    Tensor y_ref = reference->forward(x_ref);
    EXPECT_EQ(y.device(), output_device.value_or(Device::cuda(0)));
    ASSERT_LT(rel_err(y, y_ref), kTol);
    Tensor target = randn({rows, 5});
    (y - target.to(y.device())).pow(2).mean().backward();
    (y_ref - target).pow(2).mean().backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().device(), input_device);
    EXPECT_LT(rel_err(x.grad(), x_ref.grad()), kTol);
    auto p = model->named_parameters();
    auto p_ref = reference->named_parameters();
    for (size_t i = 0; i < p.size(); ++i) {
      const Tensor& g = p[i].value().grad();
      const bool unused = p[i].key().rfind("unused", 0) == 0;
      if (unused && n == 1) {  // one device calls the module itself: no broadcast, no gradient
        EXPECT_FALSE(g.defined()) << p[i].key();
        continue;
      }
      ASSERT_TRUE(g.defined()) << p[i].key();
      EXPECT_EQ(g.device(), Device::cuda(0)) << p[i].key();
      if (unused)
        EXPECT_TRUE(equal(g.cpu(), zeros(g.sizes()))) << p[i].key();
      else
        EXPECT_LT(rel_err(g, p_ref[i].value().grad()), kTol) << "gradient of " << p[i].key();
    }
    opt.step();
    opt_ref.step();
    for (size_t i = 0; i < p.size(); ++i) EXPECT_LT(rel_err(p[i].value(), p_ref[i].value()), kTol) << "parameter " << p[i].key();
  }
  EXPECT_LE(net->replica_builds(), n);  // built once per device, refreshed each step
}

TEST(DataParallelCuda, TwoDevicesEqualTheSingleDeviceResult) {
  DP_REQUIRE_CUDA_DEVICES(2);
  check_mlp(2, 30, Device::cuda(0), std::nullopt);
  check_mlp(2, 7, Device::cuda(0), std::nullopt);  // uneven: 4, 3
}

TEST(DataParallelCuda, FourDevicesEqualTheSingleDeviceResult) {
  DP_REQUIRE_CUDA_DEVICES(4);
  check_mlp(4, 30, Device::cuda(0), std::nullopt);
  check_mlp(4, 10, Device::cuda(0), std::nullopt);  // 3, 3, 3, 1
  check_mlp(4, 5, Device::cuda(0), std::nullopt);   // 2, 2, 1: three replicas
}

TEST(DataParallelCuda, InputOnTheHostAndOutputOnTheHost) {
  DP_REQUIRE_CUDA_DEVICES(2);
  const int n = std::min(cuda_device_count(), 4);
  check_mlp(n, 30, Device::cpu(), std::nullopt);
  check_mlp(n, 30, Device::cpu(), Device::cpu());
  check_mlp(n, 30, Device::cuda(0), Device::cpu());
  check_mlp(n, 30, Device::cuda(n - 1), Device::cuda(n - 1));
}

TEST(DataParallelCuda, OneDeviceCallsTheModuleThere) {
  DP_REQUIRE_CUDA_DEVICES(1);
  check_mlp(1, 9, Device::cpu(), std::nullopt);
}

TEST(DataParallelCuda, DefaultDevicesAreEveryCudaDevice) {
  DP_REQUIRE_CUDA_DEVICES(1);
  auto model = std::make_shared<Mlp>();
  model->to(Device::cuda(0));
  nn::DataParallel<Mlp> net(model);
  EXPECT_EQ(net->device_ids(), cuda_devices(cuda_device_count()));
  EXPECT_EQ(net->output_device(), Device::cuda(0));
  Tensor y = net(randn({2 * cuda_device_count() + 1, 12}).to(Device::cuda(0)));
  EXPECT_EQ(y.sizes(), (Shape{2 * cuda_device_count() + 1, 5}));
}

TEST(DataParallelCuda, TheLocationCheckNamesTheDevices) {
  DP_REQUIRE_CUDA_DEVICES(2);
  auto model = std::make_shared<Mlp>();  // left on the host
  nn::DataParallel<Mlp> net(model, cuda_devices(2));
  try {
    net(randn({4, 12}));
    ADD_FAILURE() << "no error";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("module must have its parameters and buffers on device cuda:0 (device_ids[0]) but found one of them on "
                                         "device: cpu"),
              std::string::npos)
        << e.what();
  }
}

// PyTorch's "Part of the model on CPU and part on the GPU": an Embedding on the host feeding a
// DataParallel Linear on the CUDA devices; the embedding's gradient comes back to the host.
struct HostEmbedding : nn::Module {
  nn::Embedding emb{nullptr};
  nn::DataParallel<nn::LinearImpl> fc{nullptr};
  std::shared_ptr<nn::LinearImpl> linear;
  explicit HostEmbedding(const std::vector<Device>& devices) {
    emb = register_module("emb", nn::Embedding(40, 8));
    linear = nn::Linear(8, 6).ptr();
    linear->to(devices[0]);
    fc = register_module("fc", nn::DataParallel<nn::LinearImpl>(linear, devices));
  }
  Tensor forward(const Tensor& tokens) { return fc(emb(tokens)); }
};

TEST(DataParallelCuda, AHostEmbeddingFeedsACudaLayer) {
  DP_REQUIRE_CUDA_DEVICES(2);
  const int n = std::min(cuda_device_count(), 4);
  manual_seed(6);
  auto model = std::make_shared<HostEmbedding>(cuda_devices(n));
  nn::Embedding emb_ref(40, 8);
  nn::Linear fc_ref(8, 6);
  NoGradGuard no_grad;
  emb_ref->weight.detach().copy_(model->emb->weight);
  fc_ref->weight.detach().copy_(model->linear->weight.cpu());
  fc_ref->bias.detach().copy_(model->linear->bias.cpu());
  {
    AutoGradMode on(true);
    Tensor tokens = randint(0, 40, {20});
    Tensor y = model->forward(tokens);
    Tensor y_ref = fc_ref(emb_ref(tokens));
    EXPECT_EQ(y.device(), Device::cuda(0));
    EXPECT_LT(rel_err(y, y_ref), kTol);
    y.pow(2).sum().backward();
    y_ref.pow(2).sum().backward();
    ASSERT_TRUE(model->emb->weight.grad().defined());
    EXPECT_EQ(model->emb->weight.grad().device(), Device::cpu());
    EXPECT_LT(rel_err(model->emb->weight.grad(), emb_ref->weight.grad()), kTol);
    EXPECT_LT(rel_err(model->linear->weight.grad(), fc_ref->weight.grad()), kTol);
    EXPECT_LT(rel_err(model->linear->bias.grad(), fc_ref->bias.grad()), kTol);
  }
}

TEST(DataParallelCuda, LossOnTheReplicasEqualsTheHostLoss) {
  DP_REQUIRE_CUDA_DEVICES(2);
  const int n = std::min(cuda_device_count(), 4);
  manual_seed(7);
  auto model = std::make_shared<Mlp>();
  auto reference = nn::clone(model);
  model->to(Device::cuda(0));
  nn::DataParallel<Mlp> net(model, cuda_devices(n));
  Tensor x = randn({23, 12});
  Tensor target = randn({23, 5});
  auto criterion = [](const Tensor& out, const Tensor& t) { return mse_loss(out, t); };
  Tensor loss = net->forward_loss(criterion, target.to(Device::cuda(0)), x.to(Device::cuda(0)));
  Tensor loss_ref = mse_loss(reference->forward(x), target);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_LT(rel_err(loss, loss_ref), kTol);
  loss.backward();
  loss_ref.backward();
  EXPECT_LT(rel_err(model->fc1->weight.grad(), reference->fc1->weight.grad()), kTol);
  EXPECT_LT(rel_err(model->fc2->bias.grad(), reference->fc2->bias.grad()), kTol);
}

TEST(DataParallelCuda, NoImbalanceWarningForDevicesOfOneGpu) {
  DP_REQUIRE_CUDA_DEVICES(2);
  auto props = device_properties(Device::cuda(0));
  ASSERT_TRUE(props.has_value());
  EXPECT_GT(props->total_memory, 0);
  EXPECT_GT(props->multi_processor_count, 0);
  auto model = std::make_shared<Mlp>();
  model->to(Device::cuda(0));
  bool one_gpu = true;
#if DP_HAVE_CUDA
  for (int i = 1; i < cuda_device_count(); ++i) one_gpu = one_gpu && cuda::physical_device(i) == cuda::physical_device(0);
#endif
  WarningCapture capture;
  nn::DataParallel<Mlp> net(model, cuda_devices(cuda_device_count()));
  if (one_gpu) {
    EXPECT_TRUE(capture.messages().empty());
  }
}

// BatchNorm in training normalises each replica's chunk on its own, so the reference is DataParallel
// over as many CPU devices (the same chunks): outputs, gradients, and the running statistics that
// replica 0 updates in place; then eval mode, where every replica reads the refreshed statistics.
struct BnNet : nn::Module {
  nn::Linear fc{nullptr};
  nn::BatchNorm1d bn{nullptr};
  BnNet() {
    fc = register_module("fc", nn::Linear(6, 4));
    bn = register_module("bn", nn::BatchNorm1d(4));
  }
  Tensor forward(const Tensor& x) { return bn(fc(x)); }
};

TEST(DataParallelCuda, BatchNormMatchesDataParallelOnCpuDevices) {
  DP_REQUIRE_CUDA_DEVICES(2);
  const int n = std::min(cuda_device_count(), 4);
  set_cpu_device_count(std::max(cpu_device_count(), n));
  manual_seed(9);
  auto gpu_model = std::make_shared<BnNet>();
  auto cpu_model = nn::clone(gpu_model);
  gpu_model->to(Device::cuda(0));
  cpu_model->to(Device::cpu(0));
  std::vector<Device> cpus;
  for (int i = 0; i < n; ++i) cpus.push_back(Device::cpu(i));
  nn::DataParallel<BnNet> gpu(gpu_model, cuda_devices(n));
  nn::DataParallel<BnNet> cpu(cpu_model, cpus);
  optim::SGD opt_gpu(gpu_model->parameters(), optim::SGDOptions(0.1));
  optim::SGD opt_cpu(cpu_model->parameters(), optim::SGDOptions(0.1));
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const bool train = step < 3;
    gpu->train(train);
    cpu->train(train);
    Tensor x = randn({4 * n + 2, 6});
    opt_gpu.zero_grad();
    opt_cpu.zero_grad();
    Tensor y = gpu(x.to(Device::cuda(0)));
    Tensor y_ref = cpu(x);
    ASSERT_LT(rel_err(y, y_ref), kTol);
    y.pow(2).sum().backward();
    y_ref.pow(2).sum().backward();
    auto p = gpu_model->named_parameters();
    auto p_ref = cpu_model->named_parameters();
    for (size_t i = 0; i < p.size(); ++i) EXPECT_LT(rel_err(p[i].value().grad(), p_ref[i].value().grad()), kTol) << p[i].key();
    opt_gpu.step();
    opt_cpu.step();
    EXPECT_LT(rel_err(gpu_model->bn->running_mean, cpu_model->bn->running_mean), kTol);
    EXPECT_LT(rel_err(gpu_model->bn->running_var, cpu_model->bn->running_var), kTol);
  }
}

TEST(DataParallelCuda, NoGradForwardAndRepeatedStepsKeepReplicas) {
  DP_REQUIRE_CUDA_DEVICES(2);
  manual_seed(8);
  auto model = std::make_shared<Mlp>();
  auto reference = nn::clone(model);
  model->to(Device::cuda(0));
  nn::DataParallel<Mlp> net(model, cuda_devices(2));
  for (int i = 0; i < 3; ++i) {
    NoGradGuard no_grad;
    Tensor x = randn({8, 12});
    Tensor y = net(x.to(Device::cuda(0)));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_LT(rel_err(y, reference->forward(x)), kTol);
  }
  EXPECT_LE(net->replica_builds(), 2);
}

}  // namespace
}  // namespace dp::parallel
