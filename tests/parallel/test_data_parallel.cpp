// DataParallel's behaviours, point by point as in docs/data-parallel.md and docs/decisions.md.
#include <gtest/gtest.h>
#include <dirent.h>
#include <mutex>
#include <set>
#include <sstream>
#include "dp/core/warning.h"
#include "dp/dp.h"
#include "support/devices.h"
#include "dp/nn/nn.h"
#include "dp/nn/serialize.h"
#include "dp/parallel/parallel.h"

namespace dp::parallel {
namespace {

class DataParallelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(4); }
};

using test::cpu_devices;

// The tutorial's model: records the input sizes each replica saw.
struct Model : nn::Module {
  nn::Linear fc{nullptr};
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
  std::shared_ptr<std::multiset<std::string>> seen = std::make_shared<std::multiset<std::string>>();
  Model(int64_t in, int64_t out) { fc = register_module("fc", nn::Linear(in, out)); }
  Tensor forward(const Tensor& x) {
    std::lock_guard<std::mutex> lock(*mu);
    seen->insert(x.size_str() + "@" + x.device().str());
    return fc(x);
  }
};

TEST_F(DataParallelTest, OutputAndGradientsEqualSingleDevice) {
  manual_seed(0);
  auto model = std::make_shared<Model>(5, 2);
  auto reference = nn::clone(model);
  model->to("cpu:0");
  nn::DataParallel net(model, {"cpu:0", "cpu:1"});  // as the docs write it (class template argument deduction)
  Tensor x = randn({30, 5});
  Tensor y = net(x);
  EXPECT_EQ(y.sizes(), Shape({30, 2}));
  EXPECT_EQ(y.device(), Device("cpu:0"));
  EXPECT_EQ(*model->seen, (std::multiset<std::string>{"[15, 5]@cpu:0", "[15, 5]@cpu:1"}));
  Tensor y_ref = reference->forward(x);
  EXPECT_TRUE(allclose(y.cpu(), y_ref, 1e-6, 1e-6));
  y.pow(2).sum().backward();
  y_ref.pow(2).sum().backward();
  EXPECT_TRUE(allclose(model->fc->weight.grad().cpu(), reference->fc->weight.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(allclose(model->fc->bias.grad().cpu(), reference->fc->bias.grad(), 1e-5, 1e-6));
}

TEST_F(DataParallelTest, TheTutorialsBatchSizes) {
  auto model = std::make_shared<Model>(5, 2);
  model->to("cpu:0");
  nn::DataParallel<Model> net(model, cpu_devices(2));
  for (int64_t rows : {30, 30, 30, 10}) net(randn({rows, 5}));
  EXPECT_EQ(model->seen->count("[15, 5]@cpu:0"), 3u);
  EXPECT_EQ(model->seen->count("[15, 5]@cpu:1"), 3u);
  EXPECT_EQ(model->seen->count("[5, 5]@cpu:0"), 1u);
  EXPECT_EQ(model->seen->count("[5, 5]@cpu:1"), 1u);
}

TEST_F(DataParallelTest, NoDevicePathCallsTheModule) {
  // No CUDA device and no device_ids: DataParallel is a plain call (no split, output untouched).
  auto model = std::make_shared<Model>(5, 2);
  nn::DataParallel<Model> net(model);
  EXPECT_TRUE(net->device_ids().empty());
  Tensor x = randn({30, 5});
  Tensor y = net(x);
  EXPECT_EQ(*model->seen, (std::multiset<std::string>{"[30, 5]@cpu"}));
  EXPECT_TRUE(equal(y, model->fc(x)));
}

TEST_F(DataParallelTest, DeviceListsAreChecked) {
  auto model = std::make_shared<Model>(5, 2);
  EXPECT_THROW(nn::DataParallel<Model>(model, std::vector<Device>{}), ValueError);
  EXPECT_THROW(nn::DataParallel<Model>(model, std::vector<Device>{Device::cpu()}), ValueError);
  EXPECT_THROW(nn::DataParallel<Model>(model, std::vector<Device>{Device("cpu:0"), Device("cpu:0")}), ValueError);
  EXPECT_THROW(nn::DataParallel<Model>(model, std::vector<Device>{Device("cpu:0"), Device("cpu:99")}), DeviceError);
  EXPECT_THROW(nn::DataParallel<Model>(model, std::vector<Device>{Device("cpu:0"), Device("cuda:15")}), DeviceError);
  EXPECT_THROW(nn::DataParallel<Model>(std::shared_ptr<Model>(), cpu_devices(2)), ValueError);
  EXPECT_THROW(nn::DataParallel<Model>(model, DataParallelOptions(cpu_devices(2)).chunk_sizes({1, 2, 3})), ValueError);
}

TEST_F(DataParallelTest, LocationCheckHasPyTorchsMessage) {
  auto model = std::make_shared<Model>(5, 2);  // on the host, not on cpu:0
  nn::DataParallel<Model> net(model, cpu_devices(2));
  try {
    net(randn({4, 5}));
    FAIL();
  } catch (const DeviceError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("module must have its parameters and buffers on device cpu:0 (device_ids[0]) but found one of them on device: cpu", 0), 0u)
        << msg;
    EXPECT_NE(msg.find("'fc.weight'"), std::string::npos) << msg;
  }
  // Every forward checks: moving one parameter away after a good step is caught too.
  model->to("cpu:0");
  net(randn({4, 5}));
  model->fc->bias.set_data(model->fc->bias.detach().to("cpu:1"));
  EXPECT_THROW(net(randn({4, 5})), DeviceError);
}

TEST_F(DataParallelTest, SingleDeviceMovesTheModuleCallsItDirectlyAndHonoursOutputDevice) {
  auto model = std::make_shared<Model>(5, 2);
  nn::DataParallel<Model> net(model, std::vector<Device>{Device("cpu:1")}, Device::cpu());
  EXPECT_EQ(model->fc->weight.device(), Device("cpu:1"));  // moved at construction, as PyTorch
  Tensor y = net(randn({30, 5}));
  EXPECT_EQ(*model->seen, (std::multiset<std::string>{"[30, 5]@cpu:1"}));
  EXPECT_EQ(y.device(), Device::cpu());
  EXPECT_EQ(net->replica_builds(), 0);  // the original module ran: no replicas
  y.sum().backward();
  EXPECT_EQ(model->fc->weight.grad().device(), Device("cpu:1"));
}

TEST_F(DataParallelTest, ZeroArgumentForwardRunsOnceOnTheFirstDevice) {
  struct NoArgs : nn::Module {
    Tensor w;
    std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
    NoArgs() { w = register_parameter("w", ones({3})); }
    Tensor forward() {
      ++*calls;
      return w * 2;
    }
  };
  auto m = std::make_shared<NoArgs>();
  m->to("cpu:0");
  nn::DataParallel<NoArgs> net(m, cpu_devices(3));
  Tensor y = net();
  EXPECT_EQ(m->calls->load(), 1);
  EXPECT_TRUE(equal(y.cpu(), full({3}, 2.0f)));
  y.sum().backward();
  EXPECT_TRUE(equal(m->w.grad().cpu(), full({3}, 2.0f)));
}

TEST_F(DataParallelTest, BatchesSmallerThanTheDeviceCountAndEmptyBatches) {
  manual_seed(4);
  auto model = std::make_shared<Model>(5, 2);
  auto reference = nn::clone(model);
  model->to("cpu:0");
  nn::DataParallel<Model> net(model, cpu_devices(4));
  for (int64_t rows : {1, 3, 5}) {
    model->seen->clear();
    Tensor x = randn({rows, 5});
    Tensor y = net(x);
    EXPECT_EQ(model->seen->size(), static_cast<size_t>(chunk_sizes(rows, 4).size())) << rows;  // before the reference (it shares `seen`)
    EXPECT_TRUE(allclose(y.cpu(), reference->forward(x), 1e-6, 1e-6)) << rows;
  }
  // An empty batch runs every replica on an empty chunk, and backward works.
  model->zero_grad();
  Tensor y = net(zeros({0, 5}));
  EXPECT_EQ(y.sizes(), Shape({0, 2}));
  y.sum().backward();
  EXPECT_TRUE(equal(model->fc->weight.grad().cpu(), zeros({2, 5})));
}

TEST_F(DataParallelTest, AnyDimAndAnyOutputDevice) {
  struct Transposed : nn::Module {
    nn::Linear fc{nullptr};
    Transposed() { fc = register_module("fc", nn::Linear(3, 4)); }
    Tensor forward(const Tensor& x) { return fc(x.t()).t(); }  // features x batch
  };
  manual_seed(5);
  auto model = std::make_shared<Transposed>();
  auto reference = nn::clone(model);
  model->to("cpu:0");
  for (int64_t dim : {1, -1}) {
    nn::DataParallel<Transposed> net(model, DataParallelOptions(cpu_devices(3)).dim(dim).output_device("cpu:2"));
    Tensor x = randn({3, 7});
    Tensor y = net(x);
    EXPECT_EQ(y.device(), Device("cpu:2"));
    EXPECT_EQ(y.sizes(), Shape({4, 7}));
    EXPECT_TRUE(allclose(y.cpu(), reference->forward(x), 1e-6, 1e-6));
  }
  nn::DataParallel<Transposed> host_out(model, DataParallelOptions(cpu_devices(2)).dim(1).output_device(Device::cpu()));
  EXPECT_EQ(host_out(randn({3, 4})).device(), Device::cpu());
}

TEST_F(DataParallelTest, ScalarOutputsAreGatheredIntoAVectorWithAWarning) {
  struct MeanLoss : nn::Module {
    nn::Linear fc{nullptr};
    MeanLoss() { fc = register_module("fc", nn::Linear(2, 1)); }
    Tensor forward(const Tensor& x) { return fc(x).mean(); }
  };
  auto m = std::make_shared<MeanLoss>();
  m->to("cpu:0");
  nn::DataParallel<MeanLoss> net(m, cpu_devices(4));
  WarningCapture capture;
  Tensor y = net(randn({10, 2}));  // 3,3,3,1 rows: four replicas
  EXPECT_EQ(y.sizes(), Shape({4}));
  EXPECT_EQ(capture.messages().size(), 1u);
  y = net(randn({5, 2}));  // 2,2,1: three replicas
  EXPECT_EQ(y.sizes(), Shape({3}));
}

TEST_F(DataParallelTest, GradModeReachesTheReplicas) {
  struct ModeProbe : nn::Module {
    nn::Linear fc{nullptr};
    ModeProbe() { fc = register_module("fc", nn::Linear(2, 2)); }
    std::pair<Tensor, bool> forward(const Tensor& x) { return {fc(x), GradMode::is_enabled()}; }
  };
  auto m = std::make_shared<ModeProbe>();
  m->to("cpu:0");
  nn::DataParallel<ModeProbe> net(m, cpu_devices(2));
  auto with_grad = net(randn({4, 2}));
  EXPECT_TRUE(with_grad.second);
  EXPECT_TRUE(with_grad.first.requires_grad());
  NoGradGuard no_grad;
  auto without = net(randn({4, 2}));
  EXPECT_FALSE(without.second);
  EXPECT_FALSE(without.first.requires_grad());
}

TEST_F(DataParallelTest, ReplicaExceptionsNameTheReplicaAndTheNextStepWorks) {
  struct Flaky : nn::Module {
    nn::Linear fc{nullptr};
    std::shared_ptr<bool> fail = std::make_shared<bool>(true);
    Flaky() { fc = register_module("fc", nn::Linear(2, 2)); }
    Tensor forward(const Tensor& x) {
      if (*fail && x.device() != Device("cpu:0")) throw ShapeError("bad shape on " + x.device().str());
      return fc(x);
    }
  };
  auto m = std::make_shared<Flaky>();
  m->to("cpu:0");
  nn::DataParallel<Flaky> net(m, cpu_devices(3));
  try {
    net(randn({6, 2}));
    FAIL();
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Caught dp::ShapeError in replica 1 on device cpu:1 (replica 1 of 3 got rows 2..3 of a batch of 6 split along dim 0; "
                       "1 other replica(s) failed too"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("bad shape on cpu:1"), std::string::npos) << msg;
  }
  *m->fail = false;
  Tensor y = net(randn({6, 2}));
  y.sum().backward();
  EXPECT_TRUE(m->fc->weight.grad().defined());
}

TEST_F(DataParallelTest, BatchNormRunningStatisticsPersistFromReplicaZero) {
  manual_seed(6);
  auto bn = nn::BatchNorm1d(3);
  auto reference = nn::clone(bn.ptr());
  bn->to("cpu:0");
  nn::DataParallel<nn::BatchNorm1dImpl> net(bn, cpu_devices(2));
  Tensor x = randn({8, 3}) * 3 + 1;
  net(x);
  // PyTorch's semantics: the running statistics are replica 0's update, from its chunk alone.
  reference->forward(x.narrow(0, 0, 4));
  EXPECT_TRUE(allclose(bn->running_mean.cpu(), reference->running_mean, 1e-6, 1e-7));
  EXPECT_TRUE(allclose(bn->running_var.cpu(), reference->running_var, 1e-6, 1e-7));
  EXPECT_EQ(bn->num_batches_tracked.cpu().item<int64_t>(), 1);
}

TEST_F(DataParallelTest, ReplicasAreKeptBetweenStepsAndRebuiltWhenAsked) {
  auto model = std::make_shared<Model>(5, 2);
  model->to("cpu:0");
  nn::DataParallel<Model> net(model, cpu_devices(2));
  for (int i = 0; i < 5; ++i) net(randn({4, 5})).sum().backward();
  EXPECT_EQ(net->replica_builds(), 2);
  net->invalidate_replicas();
  net(randn({4, 5}));
  EXPECT_EQ(net->replica_builds(), 4);
  nn::DataParallel<Model> rebuilding(model, DataParallelOptions(cpu_devices(2)).keep_replicas(false));
  for (int i = 0; i < 3; ++i) rebuilding(randn({4, 5}));
  EXPECT_EQ(rebuilding->replica_builds(), 6);
}

TEST_F(DataParallelTest, ParametersUpdatedBetweenStepsReachEveryReplica) {
  manual_seed(7);
  auto model = std::make_shared<Model>(5, 2);
  auto reference = nn::clone(model);
  model->to("cpu:0");
  nn::DataParallel<Model> net(model, cpu_devices(3));
  Tensor x = randn({9, 5});
  net(x);
  {
    NoGradGuard no_grad;
    model->fc->weight.mul_(2.0);
    reference->fc->weight.mul_(2.0);
  }
  EXPECT_TRUE(allclose(net(x).cpu(), reference->forward(x), 1e-6, 1e-6));
}

TEST_F(DataParallelTest, TwoForwardsBeforeOneBackward) {
  // Siamese use: the wrapped model is called twice, then one backward. A buffer that the forward
  // saves for backward must not be overwritten by the second call's replica refresh.
  struct Masked : nn::Module {
    nn::Linear fc{nullptr};
    Tensor mask;
    Masked() {
      fc = register_module("fc", nn::Linear(3, 3));
      mask = register_buffer("mask", tensor<float>({1, 0, 2}));
    }
    Tensor forward(const Tensor& x) { return fc(x) * mask; }  // mul saves the mask
  };
  manual_seed(12);
  auto m = std::make_shared<Masked>();
  auto reference = nn::clone(m);
  m->to("cpu:0");
  nn::DataParallel<Masked> net(m, cpu_devices(3));
  Tensor a = randn({6, 3}), b = randn({6, 3});
  Tensor loss = net(a).pow(2).sum() + net(b).pow(2).sum();
  ASSERT_NO_THROW(loss.backward());
  (reference->forward(a).pow(2).sum() + reference->forward(b).pow(2).sum()).backward();
  EXPECT_TRUE(allclose(m->fc->weight.grad().cpu(), reference->fc->weight.grad(), 1e-5, 1e-6));
  // A buffer changed between steps still reaches every replica.
  {
    NoGradGuard no_grad;
    m->mask.fill_(3.0);
    reference->mask.fill_(3.0);
  }
  EXPECT_TRUE(allclose(net(a).cpu(), reference->forward(a), 1e-5, 1e-6));
}

int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

TEST_F(DataParallelTest, ManyStepsLeakNeitherMemoryNorThreads) {
  auto model = std::make_shared<Model>(5, 2);
  model->to("cpu:0");
  nn::DataParallel<Model> net(model, cpu_devices(4));
  auto step = [&](int64_t rows) {
    for (auto& p : model->parameters()) p.set_grad(Tensor());
    net(randn({rows, 5})).pow(2).sum().backward();
  };
  for (int i = 0; i < 5; ++i) step(30);  // warm up: replicas built, workers started
  std::vector<int64_t> before;
  for (int d = 0; d < 4; ++d) before.push_back(memory_stats(Device::cpu(d)).allocated);
  const int threads = thread_count();
  for (int i = 0; i < 300; ++i) step(i % 7 == 0 ? 3 : 30);  // some steps use fewer devices
  for (int d = 0; d < 4; ++d) EXPECT_EQ(memory_stats(Device::cpu(d)).allocated, before[static_cast<size_t>(d)]) << "cpu:" << d;
  EXPECT_EQ(thread_count(), threads);
  EXPECT_EQ(net->replica_builds(), 4);
}

TEST_F(DataParallelTest, SplitPoliciesAndExplicitChunkSizes) {
  auto model = std::make_shared<Model>(5, 2);
  model->to("cpu:0");
  nn::DataParallel<Model> balanced(model, DataParallelOptions(cpu_devices(4)).split(SplitPolicy::Balanced));
  balanced(randn({6, 5}));
  EXPECT_EQ(*model->seen, (std::multiset<std::string>{"[2, 5]@cpu:0", "[2, 5]@cpu:1", "[1, 5]@cpu:2", "[1, 5]@cpu:3"}));
  model->seen->clear();
  nn::DataParallel<Model> sized(model, DataParallelOptions(cpu_devices(2)).chunk_sizes({5, 1}));
  Tensor y = sized(randn({6, 5}));
  EXPECT_EQ(*model->seen, (std::multiset<std::string>{"[5, 5]@cpu:0", "[1, 5]@cpu:1"}));
  EXPECT_EQ(y.sizes(), Shape({6, 2}));
  EXPECT_THROW(sized(randn({7, 5})), ShapeError);  // sizes must sum to the batch
}

// Several inputs, a struct argument, a nested output.
struct Pair {
  Tensor a, b;
  DP_FIELDS(a, b)
};
struct MultiIn : nn::Module {
  nn::Linear fc{nullptr};
  MultiIn() { fc = register_module("fc", nn::Linear(2, 2)); }
  std::tuple<Tensor, std::map<std::string, Tensor>> forward(const Tensor& x, const Pair& p, double scale) {
    Tensor h = fc(x + p.a) * scale;
    return {h, {{"b", p.b * 2}, {"h2", h * h}}};
  }
};

TEST_F(DataParallelTest, StructuredInputsAndOutputs) {
  manual_seed(8);
  auto m = std::make_shared<MultiIn>();
  auto reference = nn::clone(m);
  m->to("cpu:0");
  nn::DataParallel<MultiIn> net(m, cpu_devices(3));
  Tensor x = randn({7, 2});
  Pair p{randn({7, 2}), randn({7})};
  auto [h, extras] = net(x, p, 0.5);
  auto [h_ref, extras_ref] = reference->forward(x, p, 0.5);
  EXPECT_TRUE(allclose(h.cpu(), h_ref, 1e-6, 1e-6));
  EXPECT_TRUE(allclose(extras.at("b").cpu(), extras_ref.at("b")));
  EXPECT_TRUE(allclose(extras.at("h2").cpu(), extras_ref.at("h2"), 1e-5, 1e-6));
}

TEST_F(DataParallelTest, StateDictIsTheWrappedModulesAndPrefixedCheckpointsLoad) {
  auto model = std::make_shared<Model>(5, 2);
  model->to("cpu:0");
  nn::DataParallel<Model> net(model, cpu_devices(2));
  EXPECT_EQ(net->state_dict().keys(), model->state_dict().keys());
  EXPECT_EQ(net->named_parameters().keys(), (std::vector<std::string>{"fc.weight", "fc.bias"}));
  // PyTorch's spelling ("module.fc.weight") loads too.
  nn::TensorDict prefixed;
  prefixed.insert("module.fc.weight", full({2, 5}, 3.0f));
  prefixed.insert("module.fc.bias", full({2}, 4.0f));
  net->load_state_dict(prefixed);
  EXPECT_TRUE(equal(model->fc->weight.cpu(), full({2, 5}, 3.0f)));
  EXPECT_EQ(model->fc->weight.device(), Device("cpu:0"));
  std::ostringstream os;
  os << *net;
  EXPECT_EQ(os.str(), "DataParallel(\n  (module): Model(\n    (fc): Linear(in_features=5, out_features=2, bias=True)\n  )\n)");
}

// PyTorch's tutorial model that wraps only its middle block.
struct PartlyParallel : nn::Module {
  nn::Linear block1{nullptr}, block3{nullptr};
  nn::DataParallel<nn::LinearImpl> block2{nullptr};
  explicit PartlyParallel(const std::vector<Device>& devices) {
    block1 = register_module("block1", nn::Linear(10, 20));
    auto inner = nn::Linear(20, 20);
    inner->to(devices[0]);
    block2 = register_module("block2", nn::DataParallel<nn::LinearImpl>(inner, devices));
    block3 = register_module("block3", nn::Linear(20, 20));
  }
  Tensor forward(const Tensor& x) { return block3(block2(block1(x))); }
};

TEST_F(DataParallelTest, AWrappedBlockInsideAModel) {
  manual_seed(9);
  auto model = std::make_shared<PartlyParallel>(cpu_devices(2));
  model->to("cpu:0");
  EXPECT_EQ(model->state_dict().keys(),
            (std::vector<std::string>{"block1.weight", "block1.bias", "block2.weight", "block2.bias", "block3.weight", "block3.bias"}));
  // A plain copy for reference (same weights, no DataParallel).
  auto plain = nn::Sequential(nn::Linear(10, 20), nn::Linear(20, 20), nn::Linear(20, 20));
  plain->load_state_dict([&] {
    nn::TensorDict s;
    auto src = model->state_dict();
    for (int i = 0; i < 3; ++i) {
      s.insert(std::to_string(i) + ".weight", src["block" + std::to_string(i + 1) + ".weight"].cpu());
      s.insert(std::to_string(i) + ".bias", src["block" + std::to_string(i + 1) + ".bias"].cpu());
    }
    return s;
  }());
  Tensor x = randn({8, 10});
  Tensor y = model->forward(x.to("cpu:0"));
  Tensor y_ref = plain->forward(x);
  EXPECT_TRUE(allclose(y.cpu(), y_ref, 1e-5, 1e-6));
  y.sum().backward();
  y_ref.sum().backward();
  EXPECT_TRUE(allclose(model->block2->module()->weight.grad().cpu(), (*plain)[1]->parameters()[0].grad(), 1e-5, 1e-6));
  // PyTorch's key for the wrapped block loads as well.
  nn::TensorDict pytorch_keys = model->state_dict();
  nn::TensorDict renamed;
  for (const auto& kv : pytorch_keys) {
    std::string k = kv.key();
    if (k.rfind("block2.", 0) == 0) k = "block2.module." + k.substr(7);
    renamed.insert(k, kv.value().cpu());
  }
  EXPECT_NO_THROW(model->load_state_dict(renamed));
  // The whole model (DataParallel child included) can be deep-copied.
  auto copy = nn::clone(model);
  EXPECT_TRUE(allclose(copy->forward(x.to("cpu:0")).cpu(), y.cpu(), 1e-6, 1e-6));
}

TEST_F(DataParallelTest, CheckpointOfAWrappedModelHasTheBareKeys) {
  auto model = std::make_shared<Model>(5, 2);
  model->to("cpu:0");
  nn::DataParallel<Model> net(model, cpu_devices(2));
  const std::string path = ::testing::TempDir() + "/dp_wrapped.safetensors";
  save(net, path);
  auto bare = std::make_shared<Model>(5, 2);
  load(bare, path);
  EXPECT_TRUE(equal(bare->fc->weight, model->fc->weight.cpu()));
}

TEST_F(DataParallelTest, ImbalanceWarningFollowsPyTorch) {
  const std::vector<Device> gpus{Device::cuda(0), Device::cuda(1), Device::cuda(2)};
  // Memory first: GPU 1 has under 75% of GPU 2's memory.
  auto w = imbalance_warning(gpus, {{80, 100}, {50, 132}, {81, 100}});
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(
      *w,
      "\n    There is an imbalance between your GPUs. You may want to exclude GPU 1 which\n    has less than 75% of the memory or cores of GPU "
      "2. You can do so by setting\n    the device_ids argument to DataParallel, or by setting the CUDA_VISIBLE_DEVICES\n    environment variable.");
  // Balanced memory: multiprocessors are compared (ties go to the first).
  w = imbalance_warning(gpus, {{80, 132}, {80, 66}, {80, 132}});
  ASSERT_TRUE(w.has_value());
  EXPECT_NE(w->find("exclude GPU 1 which"), std::string::npos);
  EXPECT_NE(w->find("cores of GPU 0."), std::string::npos);
  EXPECT_FALSE(imbalance_warning(gpus, {{80, 132}, {61, 100}, {80, 132}}).has_value());
  EXPECT_FALSE(imbalance_warning({Device::cuda(0)}, {{1, 1}}).has_value());
  // check_balance reads the installed property table (the CUDA backend's, or a fake one here).
  auto previous = set_device_properties_provider([](Device d) -> std::optional<DeviceProperties> {
    return DeviceProperties{d.index == 1 ? 16 : 80, 132};
  });
  WarningCapture capture;
  check_balance({Device::cuda(0), Device::cuda(1)});
  EXPECT_EQ(capture.messages().size(), 1u);
  check_balance({Device("cpu:0"), Device("cpu:1")});  // CPU devices: no check
  EXPECT_EQ(capture.messages().size(), 1u);
  set_device_properties_provider(previous);
}

TEST_F(DataParallelTest, FunctionalDataParallel) {
  manual_seed(10);
  auto model = std::make_shared<Model>(5, 2);
  auto reference = nn::clone(model);
  model->to("cpu:0");
  Tensor x = randn({12, 5});
  Tensor y = data_parallel(model, x, cpu_devices(3), Device::cpu());
  EXPECT_EQ(y.device(), Device::cpu());
  EXPECT_TRUE(allclose(y, reference->forward(x), 1e-6, 1e-6));
  y.sum().backward();
  reference->forward(x).sum().backward();
  EXPECT_TRUE(allclose(model->fc->weight.grad().cpu(), reference->fc->weight.grad(), 1e-5, 1e-6));
  EXPECT_THROW(data_parallel(model, x), ValueError);  // no CUDA device and none given
  // No automatic move for one device: the location check applies.
  auto host_model = std::make_shared<Model>(5, 2);
  EXPECT_THROW(data_parallel(host_model, x, std::vector<Device>{Device("cpu:1")}), DeviceError);
}

}  // namespace
}  // namespace dp::parallel
