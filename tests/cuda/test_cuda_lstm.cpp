// The fused LSTM layer on CUDA (cuda/lstm.cpp, cuda/lstm.cu) against the CPU's: forward (output,
// h_n, c_n) and every gradient (input, h0, c0, both weights, both biases), float32 (< 1e-5
// relative) and float64, with and without bias, both directions, partial use of the outputs (the
// kernels that skip missing gradients), non-contiguous inputs, lstm_cell, the nn::LSTM module
// (2 layers, bidirectional) moved to the GPU, the create_graph backward (the dp-op composite on the
// device), and the errors for unsupported dtypes and mixed devices. Every test needs a GPU and
// skips, saying why, without one.
//
// The composite backward and the module's bidirectional concatenation also use the CUDA
// reductions and cat; the fused op itself needs only the matrix products and its own kernels.
#include <gtest/gtest.h>
#include <array>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>
#include "dp/dp.h"
#include "dp/autograd/autograd.h"
#include "dp/nn/modules/rnn.h"
#include "dp/ops/rnn.h"
#include "support/cuda.h"
#include "support/cuda_compare.h"
#if DP_HAVE_CUDA
#include "dp/cuda/matmul.h"
#endif

namespace dp {
namespace {

#if DP_HAVE_CUDA

using test::expect_close;
using test::kGpu;
using test::Tf32Guard;

double tol_for(DType dt) { return dt == kFloat64 ? 1e-12 : 1e-5; }

// Uniform magnitudes in [0.1 * scale, scale) with random signs (no zeros).
Tensor sample(IntArrayRef sizes, uint64_t seed, double scale, DType dt) {
  Generator g(seed);
  Tensor mag = dp::mul(dp::add(dp::mul(rand(sizes, TensorOptions().dtype(kFloat64), &g), 0.9), 0.1), scale);
  Tensor neg = dp::lt(rand(sizes, TensorOptions().dtype(kFloat64), &g), 0.5);
  return dp::where(neg, dp::neg(mag), mag).to(dt);
}

void poison_gpu_cache() {
  for (int64_t n : {int64_t{64}, int64_t{1} << 12, int64_t{1} << 16, int64_t{1} << 20}) (void)dp::full({n}, NAN, TensorOptions().device(kGpu));
}

struct Sizes {
  int64_t T, B, I, H;
};

// x, h0, c0, w_ih, w_hh, b_ih, b_hh on the CPU (biases undefined without bias).
std::vector<Tensor> make_args(const Sizes& s, bool bias, DType dt, uint64_t seed) {
  std::vector<Tensor> v = {sample({s.T, s.B, s.I}, seed, 1.0, dt),
                           sample({s.B, s.H}, seed + 1, 0.8, dt),
                           sample({s.B, s.H}, seed + 2, 0.8, dt),
                           sample({4 * s.H, s.I}, seed + 3, 0.5, dt),
                           sample({4 * s.H, s.H}, seed + 4, 0.5, dt),
                           Tensor(),
                           Tensor()};
  if (bias) {
    v[5] = sample({4 * s.H}, seed + 5, 0.5, dt);
    v[6] = sample({4 * s.H}, seed + 6, 0.5, dt);
  }
  return v;
}

std::vector<Tensor> leaves_on(const std::vector<Tensor>& args, Device d) {
  std::vector<Tensor> out;
  for (const Tensor& t : args) out.push_back(t.defined() ? t.detach().to(d).set_requires_grad(true) : Tensor());
  return out;
}

std::tuple<Tensor, Tensor, Tensor> run_layer(const std::vector<Tensor>& v, bool reverse) {
  return dp::lstm_layer(v[0], v[1], v[2], v[3], v[4], v[5], v[6], reverse);
}

const char* kNames[7] = {"input", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"};

// Forward on both devices, then backward from the outputs selected by `use` (out, h_n, c_n) with
// the same random gradients; compares the outputs and all gradients.
void check_layer(const std::string& what, const Sizes& s, bool bias, bool reverse, DType dt, std::array<bool, 3> use = {true, true, true},
                 bool create_graph = false) {
  const std::vector<Tensor> args = make_args(s, bias, dt, 7 * s.T + s.H);
  const std::vector<Tensor> cpu = leaves_on(args, Device::cpu()), gpu = leaves_on(args, kGpu);
  const auto [oc, hc, cc] = run_layer(cpu, reverse);
  poison_gpu_cache();
  const auto [og, hg, cg] = run_layer(gpu, reverse);
  const double tol = tol_for(dt);
  expect_close(og, oc, tol, what + " output");
  expect_close(hg, hc, tol, what + " h_n");
  expect_close(cg, cc, tol, what + " c_n");

  std::vector<Tensor> roots_c, roots_g, grads_c, grads_g;
  const Tensor outs_c[3] = {oc, hc, cc}, outs_g[3] = {og, hg, cg};
  for (int k = 0; k < 3; ++k) {
    if (!use[k]) continue;
    const Tensor g = sample(outs_c[k].sizes(), 100 + k, 1.0, dt);
    roots_c.push_back(outs_c[k]);
    roots_g.push_back(outs_g[k]);
    grads_c.push_back(g);
    grads_g.push_back(g.to(kGpu));
  }
  std::vector<Tensor> in_c, in_g;
  for (size_t i = 0; i < cpu.size(); ++i)
    if (cpu[i].defined()) {
      in_c.push_back(cpu[i]);
      in_g.push_back(gpu[i]);
    }
  const std::vector<Tensor> dc = autograd::grad(roots_c, in_c, grads_c, false, create_graph);
  poison_gpu_cache();
  const std::vector<Tensor> dg = autograd::grad(roots_g, in_g, grads_g, false, create_graph);
  for (size_t i = 0, j = 0; i < cpu.size(); ++i) {
    if (!cpu[i].defined()) continue;
    expect_close(dg[j], dc[j], tol, what + " gradient of " + kNames[i]);
    ++j;
  }
}

std::string describe(const Sizes& s, bool bias, bool reverse, DType dt) {
  return dp::detail::str("lstm_layer T", s.T, " B", s.B, " I", s.I, " H", s.H, bias ? " bias" : " no bias", reverse ? " reverse " : " ",
                         dtype_name(dt));
}

TEST(CudaLstm, LayerForwardAndBackwardMatchCpu) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  for (const Sizes& s : {Sizes{5, 3, 4, 6}, Sizes{1, 2, 3, 5}, Sizes{7, 16, 32, 64}})
    for (DType dt : {kFloat32, kFloat64})
      for (bool bias : {true, false})
        for (bool reverse : {false, true}) check_layer(describe(s, bias, reverse, dt), s, bias, reverse, dt);
}

TEST(CudaLstm, PartialUseOfTheOutputs) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  const Sizes s{4, 3, 5, 6};
  // Only the output (no h_n/c_n gradients), only h_n (no per-step output gradient), only c_n.
  check_layer("output only", s, true, false, kFloat32, {true, false, false});
  check_layer("h_n only", s, true, true, kFloat32, {false, true, false});
  check_layer("c_n only", s, false, false, kFloat32, {false, false, true});
}

TEST(CudaLstm, NonContiguousInputs) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  const int64_t T = 4, B = 3, I = 5, H = 6;
  // batch-first input transposed to [T, B, I], a weight that is a transposed view, h0 a column slice.
  const Tensor x = sample({B, T, I}, 1, 1.0, kFloat32).transpose(0, 1);
  const Tensor w_ih = sample({I, 4 * H}, 2, 0.5, kFloat32).t();
  const Tensor w_hh = sample({4 * H, H}, 3, 0.5, kFloat32);
  const Tensor h0 = sample({B, 2 * H}, 4, 0.8, kFloat32).narrow(1, H, H), c0 = sample({B, H}, 5, 0.8, kFloat32);
  const Tensor b_ih = sample({8 * H}, 6, 0.5, kFloat32).slice(0, 0, 8 * H, 2), b_hh = sample({4 * H}, 7, 0.5, kFloat32);
  const auto [oc, hc, cc] = dp::lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh);
  poison_gpu_cache();
  const auto [og, hg, cg] = dp::lstm_layer(x.to(kGpu), h0.to(kGpu), c0.to(kGpu), w_ih.to(kGpu), w_hh.to(kGpu), b_ih.to(kGpu), b_hh.to(kGpu));
  expect_close(og, oc, 1e-5, "output");
  expect_close(hg, hc, 1e-5, "h_n");
  expect_close(cg, cc, 1e-5, "c_n");
}

TEST(CudaLstm, CellMatchesCpu) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  const int64_t B = 4, I = 7, H = 5;
  const std::vector<Tensor> args = {sample({B, I}, 1, 1.0, kFloat32),     sample({B, H}, 2, 0.8, kFloat32),     sample({B, H}, 3, 0.8, kFloat32),
                                    sample({4 * H, I}, 4, 0.5, kFloat32), sample({4 * H, H}, 5, 0.5, kFloat32), sample({4 * H}, 6, 0.5, kFloat32),
                                    sample({4 * H}, 7, 0.5, kFloat32)};
  const std::vector<Tensor> cpu = leaves_on(args, Device::cpu()), gpu = leaves_on(args, kGpu);
  const auto [hc, cc] = dp::lstm_cell(cpu[0], cpu[1], cpu[2], cpu[3], cpu[4], cpu[5], cpu[6]);
  const auto [hg, cg] = dp::lstm_cell(gpu[0], gpu[1], gpu[2], gpu[3], gpu[4], gpu[5], gpu[6]);
  expect_close(hg, hc, 1e-5, "lstm_cell h'");
  expect_close(cg, cc, 1e-5, "lstm_cell c'");
  const Tensor gh = sample({B, H}, 8, 1.0, kFloat32), gc = sample({B, H}, 9, 1.0, kFloat32);
  autograd::backward({hc, cc}, {gh, gc});
  autograd::backward({hg, cg}, {gh.to(kGpu), gc.to(kGpu)});
  for (size_t i = 0; i < cpu.size(); ++i) expect_close(gpu[i].grad(), cpu[i].grad(), 1e-5, std::string("lstm_cell gradient of ") + kNames[i]);
}

TEST(CudaLstm, CreateGraphBackwardOnTheDevice) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  // create_graph runs the dp-op composite (differentiable gradients) on the device.
  check_layer("create_graph", Sizes{3, 2, 4, 5}, true, false, kFloat64, {true, true, true}, /*create_graph=*/true);
}

TEST(CudaLstm, ModuleOnTheGpuMatchesCpu) {
  DP_REQUIRE_GPU();
  Tf32Guard fp32(false);
  manual_seed(3);
  nn::LSTM lstm(nn::LSTMOptions(6, 8).num_layers(2).bidirectional(true));
  const Tensor x = sample({5, 3, 6}, 1, 1.0, kFloat32);
  const auto [yc, state_c] = lstm->forward(x);
  const Tensor gy = sample(yc.sizes(), 2, 1.0, kFloat32);
  yc.backward(gy);
  std::vector<Tensor> grads_c;
  for (const Tensor& p : lstm->parameters()) grads_c.push_back(p.grad().clone());
  lstm->zero_grad();
  lstm->to(kGpu);
  const auto [yg, state_g] = lstm->forward(x.to(kGpu));
  expect_close(yg, yc, 1e-5, "nn::LSTM output");
  expect_close(std::get<0>(state_g), std::get<0>(state_c), 1e-5, "nn::LSTM h_n");
  expect_close(std::get<1>(state_g), std::get<1>(state_c), 1e-5, "nn::LSTM c_n");
  yg.backward(gy.to(kGpu));
  const std::vector<Tensor> params = lstm->parameters();
  ASSERT_EQ(params.size(), grads_c.size());
  for (size_t i = 0; i < params.size(); ++i) expect_close(params[i].grad(), grads_c[i], 1e-5, "nn::LSTM parameter " + std::to_string(i));
}

TEST(CudaLstm, UnsupportedDtypeAndMixedDevicesAreErrors) {
  DP_REQUIRE_GPU();
  const Sizes s{2, 2, 3, 4};
  std::vector<Tensor> half;
  for (const Tensor& t : make_args(s, true, kFloat32, 1)) half.push_back(t.to(kGpu, kFloat16));
  EXPECT_THROW(run_layer(half, false), DTypeError);
  std::vector<Tensor> mixed;
  for (const Tensor& t : make_args(s, true, kFloat32, 1)) mixed.push_back(t.to(kGpu));
  mixed[1] = mixed[1].cpu();  // h0 on the host
  EXPECT_THROW(run_layer(mixed, false), DeviceError);
}

#else
TEST(CudaLstm, NeedsTheCudaBackend) { GTEST_SKIP() << "built without the CUDA backend (DP_HAVE_CUDA is off)"; }
#endif

}  // namespace
}  // namespace dp
