// Variable-length sequences under DataParallel: PyTorch's FAQ case ("my recurrent network doesn't
// work with data parallelism"), written the way the FAQ asks and without its extra code.
//
// A GRU tagger reads a batch of sequences of different lengths, padded to [T, B, 2] (time first, the
// RNN's default layout), packs them inside forward, and pads its output back to the input's length
// T with pad_packed_sequence(..., total_length = T): each replica sees only its own rows, whose
// longest sequence is shorter than T, and without total_length the replicas' outputs would have
// different lengths and could not be gathered. DataParallel splits the input along dim 1 and the
// lengths (a std::vector<int64_t>) along dim 0 (in_dims), gathers the output along dim 1, and
// computes the loss on the replicas per token (padded positions ignored), so the loss and the
// gradients are those of the whole batch.
//
// The task: for each step t of a sequence of +1/-1 values (and a constant channel), is the running
// sum so far positive? Printed: the training loss every 20 steps and the test accuracy at the end.
//
//   rnn_packed [--devices cpu:0,cpu:1] [--steps 200] [--batch 64] [--hidden 32] [--lr 1e-2] [--seed 0]
//              [--min-accuracy A] [--no-total-length (show the error the FAQ describes)]
//
// Exit status: 0; 1 below --min-accuracy; 2 an error (printed).
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "example_devices.h"

namespace {

using namespace dp;
namespace rnn = dp::nn::utils::rnn;

constexpr int64_t kMaxLen = 24, kIgnore = -100;

struct TaggerImpl : nn::Module {
  TaggerImpl(int64_t hidden, bool total_length) : total_length(total_length) {
    gru = register_module("gru", nn::GRU(nn::GRUOptions(2, hidden)));
    head = register_module("head", nn::Linear(hidden, 2));
  }
  // x [T, B, 2] padded, lengths[b] = the real length of sequence b -> logits [T, B, 2].
  Tensor forward(const Tensor& x, const std::vector<int64_t>& lengths) {
    rnn::PackedSequence packed = rnn::pack_padded_sequence(x, lengths, /*batch_first=*/false, /*enforce_sorted=*/false);
    auto [out, h_n] = gru->forward(packed);
    auto [padded, lens] = total_length ? rnn::pad_packed_sequence(out, false, 0.0, x.size(0)) : rnn::pad_packed_sequence(out);
    return head(padded);
  }
  nn::GRU gru{nullptr};
  nn::Linear head{nullptr};
  bool total_length;
};

// B sequences of lengths 1..kMaxLen: x [kMaxLen, B, 2] (a +1/-1 value, and 1), targets [kMaxLen, B]
// (1 when the running sum is positive; kIgnore past the sequence's end).
struct Batch {
  Tensor x, y;
  std::vector<int64_t> lengths;
};
Batch make_batch(int64_t B, Generator& gen) {
  Tensor lengths = randint(1, kMaxLen + 1, {B}, kInt64, &gen);
  Tensor steps = mul(sub(mul(randint(0, 2, {kMaxLen, B}, kInt64, &gen), 2), 1), 1.0);  // +1 / -1 as float
  Tensor alive = lt(arange(kMaxLen).unsqueeze(1), lengths.unsqueeze(0));               // [T, B]
  steps = mul(steps, alive.to(kFloat32));
  Tensor y = gt(cumsum(steps, 0), 0).to(kInt64);
  y = where(alive, y, full({kMaxLen, B}, static_cast<double>(kIgnore), kInt64));
  Tensor x = stack({steps, alive.to(kFloat32)}, 2);
  std::vector<int64_t> lens(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) lens[static_cast<size_t>(b)] = lengths[b].item<int64_t>();
  return {x, y, lens};
}

int run(int argc, char** argv) {
  std::string devices = "cpu:0,cpu:1";
  int64_t steps = 200, batch = 64, hidden = 32;
  double lr = 1e-2, min_accuracy = -1;
  uint64_t seed = 0;
  bool total_length = true;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--no-total-length") {
      total_length = false;
      continue;
    }
    DP_CHECK(i + 1 < argc, ValueError, "option ", k, " needs a value");
    const std::string v = argv[++i];
    if (k == "--devices")
      devices = v;
    else if (k == "--steps")
      steps = std::stoll(v);
    else if (k == "--batch")
      batch = std::stoll(v);
    else if (k == "--hidden")
      hidden = std::stoll(v);
    else if (k == "--lr")
      lr = std::stod(v);
    else if (k == "--seed")
      seed = std::stoull(v);
    else if (k == "--min-accuracy")
      min_accuracy = std::stod(v);
    else
      throw ValueError("unknown option " + k);
  }
  const std::vector<Device> ids = dp_examples::parse_devices(devices);
  manual_seed(seed);
  auto model = std::make_shared<TaggerImpl>(hidden, total_length);
  model->to(ids[0]);
  // x is split along dim 1 (time first), the lengths along dim 0; the output [T, B, 2] and the
  // targets [T, B] along dim 1.
  nn::DataParallel<TaggerImpl> net(model, parallel::DataParallelOptions(ids).dim(1).in_dims({1, 0}).target_dim(1));
  optim::Adam opt(model->parameters(), optim::AdamOptions(lr));
  auto per_token = [](const Tensor& logits, const Tensor& y) { return cross_entropy(logits.flatten(0, 1), y.flatten(), Tensor(), kIgnore); };
  Generator gen(seed + 1);
  if (!total_length) {
    // The FAQ's mistake: each replica pads to its own longest sequence, so the gathered outputs
    // differ in length along dim 0. DataParallel names the output and the fix (exit status 2).
    NoGradGuard no_grad;
    Batch b = make_batch(batch, gen);
    net(b.x.to(ids[0]), b.lengths);
  }
  for (int64_t step = 1; step <= steps; ++step) {
    Batch b = make_batch(batch, gen);
    opt.zero_grad();
    Tensor loss = net->forward_loss(per_token, b.y.to(ids[0]), b.x.to(ids[0]), b.lengths);
    loss.backward();
    opt.step();
    if (step % 20 == 0 || step == 1) std::printf("step %lld  loss %.4f\n", static_cast<long long>(step), loss.item<double>());
  }
  NoGradGuard no_grad;
  Generator test_gen(999);
  Batch t = make_batch(512, test_gen);
  Tensor pred = net(t.x.to(ids[0]), t.lengths).argmax(2).to(Device::cpu());
  Tensor real = ne(t.y, kIgnore);
  const double accuracy = sum(logical_and(eq(pred, t.y), real)).item<double>() / sum(real).item<double>();
  std::printf("test accuracy %.4f over %lld tokens\n", accuracy, static_cast<long long>(sum(real).item<double>()));
  return (min_accuracy >= 0 && accuracy < min_accuracy) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "rnn_packed: " << e.what() << "\n";
    return 2;
  }
}
