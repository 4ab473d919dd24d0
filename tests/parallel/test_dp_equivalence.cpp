// DataParallel against the single-device run: outputs, gradients and parameters after several
// optimizer steps, for an MLP, a CNN, an Embedding model, an LSTM and a model built of parameter
// containers (ParameterList, ParameterDict, ModuleDict), on 1-4 CPU devices, with
// batches that split evenly, unevenly and into fewer chunks than devices.
#include <gtest/gtest.h>
#include <algorithm>
#include <functional>
#include "dp/dp.h"
#include "support/test_models.h"
#include "dp/nn/nn.h"
#include "dp/optim/optim.h"
#include "dp/parallel/parallel.h"

namespace dp::parallel {
namespace {

using dp::test::Cnn;
using dp::test::ContainerModel;
using dp::test::EmbeddingModel;
using dp::test::Mlp;

struct LstmModel : nn::Module {
  nn::LSTM lstm{nullptr};
  nn::Linear fc{nullptr};
  LstmModel() {
    lstm = register_module("lstm", nn::LSTM(nn::LSTMOptions(3, 5).num_layers(2).bidirectional(true).batch_first(true)));
    fc = register_module("fc", nn::Linear(10, 4));
  }
  Tensor forward(const Tensor& x) {
    Tensor out = std::get<0>(lstm->forward(x));
    return fc(out.select(1, -1));
  }
};

enum class Opt { Sgd, Adam };
constexpr double kAdamLr = 0.01;

struct Case {
  const char* name;
  std::function<nn::ModulePtr()> make;
  std::function<Tensor(int64_t rows)> input;
};

template <typename M>
Case make_case(const char* name, std::function<Tensor(int64_t)> input) {
  return {name,
          [] {
            auto m = std::make_shared<M>();
            m->template remember_type<M>();
            return nn::ModulePtr(m);
          },
          std::move(input)};
}

std::vector<Case> cases() {
  return {
      make_case<Mlp>("mlp",
                     [](int64_t b) {
                       return randn({b, 8});
                     }),
      make_case<Cnn>("cnn",
                     [](int64_t b) {
                       return randn({b, 1, 8, 8});
                     }),
      make_case<EmbeddingModel>("embedding",
                                [](int64_t b) {
                                  return randint(0, 50, {b, 3});
                                }),
      make_case<LstmModel>("lstm",
                           [](int64_t b) {
                             return randn({b, 4, 3});
                           }),
      make_case<ContainerModel>("containers",
                                [](int64_t b) {
                                  return randn({b, 8});
                                }),
  };
}

template <typename M>
Tensor forward_as(const nn::ModulePtr& m, const Tensor& x) {
  return static_cast<M&>(*m).forward(x);
}

// Runs `steps` optimizer steps on a plain copy (host) and under DataParallel (cpu:0 .. cpu:n-1),
// comparing outputs, gradients and parameters after every step.
template <typename M>
void check(const Case& c, int devices, int64_t rows, Opt opt, int steps, DType dtype, double rtol, double atol) {
  SCOPED_TRACE(std::string(c.name) + " on " + std::to_string(devices) + " devices, batch " + std::to_string(rows) +
               (opt == Opt::Sgd ? ", SGD" : ", Adam") + ", " + dtype_name(dtype));
  manual_seed(42);
  auto original = std::static_pointer_cast<M>(c.make());
  original->to(dtype);
  auto reference = nn::clone(original);
  original->to("cpu:0");
  std::vector<Device> ids;
  for (int i = 0; i < devices; ++i) ids.push_back(Device::cpu(i));
  nn::DataParallel<M> net(original, ids, Device::cpu());
  auto make_opt = [&](std::vector<Tensor> params) -> std::unique_ptr<optim::Optimizer> {
    if (opt == Opt::Sgd) return std::make_unique<optim::SGD>(params, optim::SGDOptions(0.05).momentum(0.9));
    return std::make_unique<optim::Adam>(params, optim::AdamOptions(kAdamLr));
  };
  auto opt_dp = make_opt(original->parameters());
  auto opt_ref = make_opt(reference->parameters());
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    Tensor x = c.input(rows);
    if (is_floating_point(x.dtype())) x = x.to(dtype);
    Tensor target = randint(0, 4, {rows});
    opt_dp->zero_grad();
    opt_ref->zero_grad();
    Tensor y = net(x);
    Tensor y_ref = reference->forward(x);
    ASSERT_EQ(y.sizes(), y_ref.sizes());
    ASSERT_TRUE(allclose(y, y_ref, rtol, atol)) << "outputs differ";
    Tensor loss = cross_entropy(y, target);
    Tensor loss_ref = cross_entropy(y_ref, target);
    loss.backward();
    loss_ref.backward();
    auto p_dp = original->named_parameters();
    auto p_ref = reference->named_parameters();
    for (size_t i = 0; i < p_dp.size(); ++i) {
      const Tensor& g = p_dp[i].value().grad();
      ASSERT_TRUE(g.defined()) << p_dp[i].key();
      EXPECT_EQ(g.device(), Device("cpu:0")) << p_dp[i].key();
      EXPECT_TRUE(allclose(g.cpu(), p_ref[i].value().grad(), rtol, atol)) << "gradient of " << p_dp[i].key() << " differs";
    }
    opt_dp->step();
    opt_ref->step();
    // Adam divides by sqrt(v) + eps: where |g| is a few eps, a gradient difference well inside
    // the tolerance above grows by lr * eps / (|g| + eps)^2 (on AVX2 hardware a 1.6% difference of
    // a 4.7e-7 gradient moved one CNN weight by 3.3e-6). The gradients are held to atol; the
    // parameters after Adam get lr * 1e-3 of room, far below one step (lr) of disagreement.
    const double param_atol = opt == Opt::Adam ? std::max(atol, kAdamLr * 1e-3) : atol;
    for (size_t i = 0; i < p_dp.size(); ++i)
      ASSERT_TRUE(allclose(p_dp[i].value().cpu(), p_ref[i].value(), rtol, param_atol)) << "parameter " << p_dp[i].key() << " differs";
  }
  EXPECT_LE(net->replica_builds(), devices);  // built once per device, refreshed every step
}

class Equivalence : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() { set_cpu_device_count(4); }
};

template <typename M>
void run_all(const Case& c, int devices) {
  // Even (8), uneven (10: chunks 5,5 / 4,4,2 / 3,3,3,1), fewer rows than devices (3).
  for (int64_t rows : {8, 10, 3}) {
    check<M>(c, devices, rows, Opt::Sgd, 3, kFloat32, 1e-5, 1e-6);
    check<M>(c, devices, rows, Opt::Adam, 3, kFloat32, 1e-5, 1e-6);
  }
  // float64: equal up to the order of one addition per parameter.
  check<M>(c, devices, 10, Opt::Sgd, 2, kFloat64, 1e-12, 1e-13);
}

TEST_P(Equivalence, Mlp) { run_all<Mlp>(cases()[0], GetParam()); }
TEST_P(Equivalence, Cnn) { run_all<Cnn>(cases()[1], GetParam()); }
TEST_P(Equivalence, Embedding) { run_all<EmbeddingModel>(cases()[2], GetParam()); }
TEST_P(Equivalence, Lstm) { run_all<LstmModel>(cases()[3], GetParam()); }
TEST_P(Equivalence, Containers) { run_all<ContainerModel>(cases()[4], GetParam()); }

INSTANTIATE_TEST_SUITE_P(Devices, Equivalence, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "devices"; });

}  // namespace
}  // namespace dp::parallel
