// A character-level GPT trained on a text file, then sampled: nanoGPT's recipe in C++ (a GPT-2-shaped
// decoder with tied output weights, AdamW with weight-decay groups, warm-up + cosine learning rate,
// gradient clipping), split over the CPU devices with DataParallel, or over processes with
// DistributedDataParallel when a launcher started it:
//
//   build/examples/gpt                                     # DataParallel on cpu:0,cpu:1
//   build/tools/dp-run --nproc-per-node 2 build/examples/gpt   # DDP, one process per rank
//
// Every rank draws the same random windows of the training text (one seed), and each takes its share
// of the rows, so the DDP run trains on the same global batches as the DataParallel one, and the loss
// of every step is the loss of the whole batch (forward_loss).
//
//   gpt [--data FILE (default: Debian's fortunes)] [--devices cpu:0,cpu:1] [--steps 300] [--batch 16]
//       [--block 64] [--layers 4] [--heads 4] [--embd 128] [--lr 3e-3] [--seed 0] [--eval-every 50]
//       [--sample 300] [--temperature 0.8] [--top-k 10] [--max-val-loss L] [--checkpoint]
// --checkpoint: activation checkpointing of every block (GPTConfig::checkpoint_activations). The
// peak bytes the devices' allocators held during the training steps are printed at the end.
//
// Prints "step N  loss L  lr R" lines, "val loss V" at every evaluation, and at the end a sample of
// generated text. Exit status: 0; 1 when the final validation loss is above --max-val-loss; 2 bad
// arguments or data; 3 a distributed error.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>
#include "dp/dp.h"
#include "example_devices.h"

namespace {

using namespace dp;

struct Args {
  std::string data = "/usr/share/games/fortunes/fortunes";
  std::string devices = "cpu:0,cpu:1";
  int64_t steps = 300, batch = 16, block = 64, layers = 4, heads = 4, embd = 128, eval_every = 50, sample = 300, top_k = 10;
  double lr = 3e-3, temperature = 0.8, max_val_loss = -1;
  uint64_t seed = 0;
  bool checkpoint = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--help") {
      std::cout << "gpt [--data FILE] [--devices LIST] [--steps N] [--batch B] [--block T] [--layers L] [--heads H] [--embd C]\n"
                   "    [--lr LR] [--seed S] [--eval-every N] [--sample N] [--temperature T] [--top-k K] [--max-val-loss L]\n"
                   "    [--checkpoint]\n";
      std::exit(0);
    }
    if (k == "--checkpoint") {
      a.checkpoint = true;
      continue;
    }
    DP_CHECK(i + 1 < argc, ValueError, "option ", k, " needs a value");
    const std::string v = argv[++i];
    if (k == "--data")
      a.data = v;
    else if (k == "--devices")
      a.devices = v;
    else if (k == "--steps")
      a.steps = std::stoll(v);
    else if (k == "--batch")
      a.batch = std::stoll(v);
    else if (k == "--block")
      a.block = std::stoll(v);
    else if (k == "--layers")
      a.layers = std::stoll(v);
    else if (k == "--heads")
      a.heads = std::stoll(v);
    else if (k == "--embd")
      a.embd = std::stoll(v);
    else if (k == "--eval-every")
      a.eval_every = std::stoll(v);
    else if (k == "--sample")
      a.sample = std::stoll(v);
    else if (k == "--top-k")
      a.top_k = std::stoll(v);
    else if (k == "--lr")
      a.lr = std::stod(v);
    else if (k == "--temperature")
      a.temperature = std::stod(v);
    else if (k == "--max-val-loss")
      a.max_val_loss = std::stod(v);
    else if (k == "--seed")
      a.seed = std::stoull(v);
    else
      throw ValueError("unknown option " + k + " (see --help)");
  }
  DP_CHECK(a.steps > 0 && a.batch > 0 && a.block > 0 && a.eval_every > 0 && a.sample >= 0, ValueError,
           "--steps, --batch, --block and --eval-every must be positive, --sample non-negative");
  return a;
}

// nanoGPT's get_batch: `rows` random windows of block + 1 tokens; data = the first block tokens,
// target = the last block.
std::pair<Tensor, Tensor> get_batch(const Tensor& tokens, int64_t rows, int64_t block, Generator& gen) {
  Tensor starts = randint(0, tokens.size(0) - block - 1, {rows}, kInt64, &gen);
  Tensor offsets = arange(block + 1).unsqueeze(0) + starts.unsqueeze(1);  // [rows, block + 1]
  Tensor windows = index_select(tokens, 0, offsets.flatten()).view({rows, block + 1});
  return {windows.narrow(1, 0, block).contiguous(), windows.narrow(1, 1, block).contiguous()};
}

// The mean loss over `batches` fixed windows of the validation text (no gradients).
double evaluate(const models::GPTImpl& model, const Tensor& val, int64_t block, Device device) {
  NoGradGuard no_grad;
  Generator gen(1234);  // the same windows at every evaluation
  double total = 0;
  const int batches = 4;
  for (int i = 0; i < batches; ++i) {
    auto [x, y] = get_batch(val, 16, block, gen);
    total += models::lm_loss(model.forward(x.to(device)), y.to(device)).item<double>();
  }
  return total / batches;
}

// Generated text for the terminal: newlines and tabs kept, other control characters escaped.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f)) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

int run(const Args& a) {
  const data::CharTokenizer tok = data::CharTokenizer::from_file(a.data);
  const Tensor tokens = tok.encode([&] {
    std::ifstream in(a.data, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }());
  const int64_t n = tokens.size(0), n_train = n * 9 / 10;
  DP_CHECK(n_train > a.block + 1 && n - n_train > a.block + 1, ValueError, a.data, ": ", n, " characters are too few for --block ", a.block);
  const Tensor train = tokens.narrow(0, 0, n_train), val = tokens.narrow(0, n_train, n - n_train);

  const std::optional<distributed::Environment> env = distributed::read_environment();
  const bool ddp = env && env->world_size > 1;
  manual_seed(a.seed);  // the same initial weights on every rank (DDP also broadcasts rank 0's)
  models::GPT model(models::GPTConfig()
                        .vocab_size(tok.vocab_size())
                        .block_size(a.block)
                        .n_layer(a.layers)
                        .n_head(a.heads)
                        .n_embd(a.embd)
                        .checkpoint_activations(a.checkpoint));

  distributed::ProcessGroupPtr group;
  std::vector<Device> devices;
  int rank = 0, world = 1;
  if (ddp) {
    group = distributed::init_process_group();
    rank = group->rank();
    world = group->size();
  } else {
    devices = dp_examples::parse_devices(a.devices);
    model->to(devices[0]);
  }
  const Device device = ddp ? Device::cpu() : devices[0];
  DP_CHECK(a.batch % world == 0, ValueError, "--batch ", a.batch, " must be a multiple of the world size ", world);
  if (rank == 0)
    std::printf("%s: %lld characters, vocabulary %lld; GPT %lld layers, %lld heads, %lld channels: %lld parameters; %s\n", a.data.c_str(),
                static_cast<long long>(n), static_cast<long long>(tok.vocab_size()), static_cast<long long>(a.layers),
                static_cast<long long>(a.heads), static_cast<long long>(a.embd), static_cast<long long>(model->num_params(false)),
                ddp ? ("DistributedDataParallel over " + std::to_string(world) + " processes").c_str() : ("DataParallel over " + a.devices).c_str());

  optim::AdamW opt(models::weight_decay_groups(*model, 0.1), optim::AdamWOptions(a.lr).betas({0.9, 0.95}));
  auto criterion = [](const Tensor& logits, const Tensor& y) { return models::lm_loss(logits, y); };
  std::optional<nn::DistributedDataParallel<models::GPTImpl>> ddp_model;
  std::optional<nn::DataParallel<models::GPTImpl>> dp_model;
  if (ddp)
    ddp_model.emplace(model, group);
  else
    dp_model.emplace(model, devices);

  Generator gen(a.seed + 1);  // the same batches on every rank
  const int64_t rows = a.batch / world;
  double val_loss = evaluate(*model, val, a.block, device);
  if (rank == 0) std::printf("step 0  val loss %.4f\n", val_loss);
  // Peak memory of the training steps: each device's allocator peak, summed over the devices.
  const std::vector<Device> mem_devices = ddp ? std::vector<Device>{Device::cpu()} : devices;
  int64_t resident = 0, train_peak = 0;
  for (Device d : mem_devices) {
    reset_peak_memory_stats(d);
    resident += memory_stats(d).allocated;
  }
  for (int64_t step = 1; step <= a.steps; ++step) {
    auto [x, y] = get_batch(train, a.batch, a.block, gen);
    x = x.narrow(0, rank * rows, rows).to(device);
    y = y.narrow(0, rank * rows, rows).to(device);
    const double lr = models::cosine_lr(step - 1, a.lr, a.lr / 10, a.steps / 10, a.steps);
    for (auto& g : opt.param_groups()) g.options().set_lr(lr);
    opt.zero_grad();
    Tensor loss = ddp ? (*ddp_model)->forward_loss(criterion, y, x) : (*dp_model)->forward_loss(criterion, y, x);
    loss.backward();
    nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    int64_t peak = 0;
    for (Device d : mem_devices) peak += memory_stats(d).peak_allocated;
    train_peak = std::max(train_peak, peak);
    if (rank == 0 && (step % 10 == 0 || step == 1))
      std::printf("step %lld  loss %.4f  lr %.2e\n", static_cast<long long>(step), loss.item<double>(), lr);
    if (step % a.eval_every == 0 || step == a.steps) {
      val_loss = evaluate(*model, val, a.block, device);
      if (rank == 0) std::printf("step %lld  val loss %.4f\n", static_cast<long long>(step), val_loss);
    }
  }
  if (rank == 0)
    std::printf("peak memory in training steps: %.2f MiB (%.2f MiB above the %.2f MiB held before them)%s\n", train_peak / 1048576.0,
                (train_peak - resident) / 1048576.0, resident / 1048576.0, a.checkpoint ? ", activation checkpointing" : "");
  if (rank == 0 && a.sample > 0) {
    model->eval();
    Generator sample_gen(a.seed + 2);
    Tensor prompt = tok.encode("\n").view({1, 1}).to(device);
    Tensor out = model->generate(prompt, a.sample, models::SampleOptions().temperature(a.temperature).top_k(a.top_k).generator(&sample_gen));
    std::printf("---- sample (temperature %.2f, top-k %lld) ----\n%s\n----\n", a.temperature, static_cast<long long>(a.top_k),
                printable(tok.decode(out.flatten().to(Device::cpu()))).c_str());
  }
  std::fflush(stdout);
  return (a.max_val_loss >= 0 && val_loss > a.max_val_loss) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  dp::reexec_for_blas_kernels(argv);
  try {
    return run(parse(argc, argv));
  } catch (const dp::distributed::DistributedError& e) {
    std::cerr << "gpt: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "gpt: " << e.what() << "\n";
    return 2;
  }
}
