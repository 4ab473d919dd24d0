// A GPT training step on the CPU, dparallel against PyTorch 1.13 in the same run, with the step's
// GEMM floor measured on this machine in the same run.
//
// The model is dp::models::GPT (nanoGPT's GPT; include/dp/models/gpt.h). Configurations (--config):
//   gpt2   GPT-2 small: 12 layers, 12 heads, 768 channels, vocabulary 50257, tied head; batch 4 x
//          sequence 64 (256 tokens)
//   small  4 layers, 4 heads, 256 channels, vocabulary 4096; batch 4 x sequence 256 (quick runs)
// the same as bench/pytorch_gpt.py. A step is zero_grad(set_to_none), forward and loss (inside
// dp::AutocastGuard(CPU, bfloat16) in the bf16 mode), backward, clip_grad_norm_(1.0), AdamW step
// (lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on the matrices and embeddings, nanoGPT's groups),
// on one fixed random batch.
//
// Rows (--rows picks some; each in float32 and bf16 autocast, --modes):
//   ours   the model on the host, dp::set_num_threads(--threads, default all cores) for its GEMMs
//   ours1  the same model on the host with 1 thread (one core: the baseline of a data-parallel speedup)
//   dp2    nn::DataParallel on cpu:0, cpu:1 (one replica per device worker, one core each), the
//          loss on the replicas (forward_loss)
//   ddp2   nn::DistributedDataParallel on 2 processes (this program re-executed as `--worker`,
//          Gloo on loopback), each process pinned to one core with 1 GEMM thread, half the batch
//   torch1, torch2   PyTorch 1.13 (bench/pytorch_gpt.py --serve, one process per thread count,
//          torch.set_num_threads and OpenBLAS's pool at that count)
//
// Protocol: every row's model is built from the same seed and warmed up (--warmup steps); then
// --rounds rounds, each timing the GEMM sets (below) and then --steps / --rounds steps of every row,
// one row after the other (the order reversed every other round), so a change in machine load hits
// all rows alike. Steps are timed one by one: median [min - max] over all rounds.
//
// GEMM floor: the step's matrix products (per layer the q/k/v, attention-output and MLP Linears'
// forward X W^T, input gradient G W and weight gradient G^T X; the head once; attention's batched
// products) timed through dp::linear / dp::mm / dp::bmm in float32 and bfloat16, in three sets:
//   host-Nt  all tokens, N = --threads GEMM threads (the ours rows; 2 for torch2)
//   host-1t  all tokens, 1 thread (ours1, and PyTorch's 1-thread rows for reference)
//   pair-1t  half the tokens, 1 thread, two threads timing the same product at once (a replica on each
//            core: the dp2 and ddp2 rows)
// The floor is the sum over the step's products of their median times: what the step would take
// if it did nothing but its GEMMs at this machine's measured rates.
//
//   bench_gpt [--config gpt2|small] [--rows ours,ours1,dp2,ddp2,torch1,torch2] [--modes float32,bf16]
//             [--warmup 2] [--steps 6] [--rounds 2] [--threads N] [--gemm-calls 3] [--no-torch]
//             [--no-write] [--python /usr/bin/python3] [--root DIR]
//
// The run asks for SCHED_RR priority 5 (inherited by the children; --no-rt: not): the development
// machine's 2 cores are shared with builds, which would otherwise take time from the measured threads.
//
// Targets (issue 27): the GPT-2 small step >= 3x faster than PyTorch's best row; DataParallel on 2
// devices >= 1.8x our 1-device step; each step within 1.5x of its GEMM floor. Writes
// bench/results/gpt.json (small: gpt_small.json) and the table between the bench_gpt (bench_gpt_small)
// markers in docs/benchmarks.md.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <netinet/in.h>

#include <algorithm>
#include <barrier>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "dp/amp/autocast.h"
#include "dp/distributed/distributed.h"
#include "dp/dp.h"
#include "dp/models/gpt.h"
#include "dp/nn/utils/clip_grad.h"
#include "dp/optim/optim.h"
#include "dp/parallel/parallel.h"

extern char** environ;

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using namespace dp;

// ---- the configurations (bench/pytorch_gpt.py's CONFIGS) ----

struct Shape {
  std::string name;
  int64_t layers, heads, embd, vocab, block, batch, seq;
  int64_t tokens() const { return batch * seq; }
};

Shape shape_named(const std::string& name) {
  if (name == "gpt2") return {"gpt2", 12, 12, 768, 50257, 1024, 4, 64};
  DP_CHECK(name == "small", ValueError, "bench_gpt: unknown --config '", name, "' (gpt2, small)");
  return {"small", 4, 4, 256, 4096, 256, 4, 256};
}

models::GPTConfig gpt_config(const Shape& s) {
  return models::GPTConfig().vocab_size(s.vocab).block_size(s.block).n_layer(s.layers).n_head(s.heads).n_embd(s.embd).dropout(0.0);
}

// The step's matrix-product FLOPs: 6 n (12 L C^2 + V C) + 12 L B T^2 C (pytorch_gpt.py's gemm_flops).
double gemm_gflop(const Shape& s) {
  const double n = static_cast<double>(s.tokens()), c = static_cast<double>(s.embd), l = static_cast<double>(s.layers);
  return (6.0 * n * (12.0 * l * c * c + static_cast<double>(s.vocab) * c) + 12.0 * l * s.batch * static_cast<double>(s.seq * s.seq) * c) / 1e9;
}

// ---- one training step and its phases ----

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

struct Phases {
  double forward = 0, backward = 0, clip = 0, optimizer = 0;  // ms; forward includes zero_grad and the loss
};

struct StepResult {
  double ms = 0;
  Phases phases;
  Tensor loss;
};

// zero_grad, forward + loss (under bf16 autocast when asked), backward, clip, AdamW step.
StepResult timed_step(optim::Optimizer& opt, const std::vector<Tensor>& params, bool bf16, const std::function<Tensor()>& forward_loss) {
  StepResult r;
  const auto t0 = Clock::now();
  opt.zero_grad(true);
  {
    std::optional<AutocastGuard> autocast;
    if (bf16) autocast.emplace(DeviceType::CPU, kBFloat16);
    r.loss = forward_loss();
  }
  const auto t1 = Clock::now();
  r.loss.backward();
  const auto t2 = Clock::now();
  nn::utils::clip_grad_norm_(params, 1.0);
  const auto t3 = Clock::now();
  opt.step();
  const auto t4 = Clock::now();
  r.ms = ms_between(t0, t4);
  r.phases = {ms_between(t0, t1), ms_between(t1, t2), ms_between(t2, t3), ms_between(t3, t4)};
  return r;
}

std::shared_ptr<optim::AdamW> make_adamw(const nn::Module& model) {
  return std::make_shared<optim::AdamW>(models::weight_decay_groups(model, 0.1), optim::AdamWOptions(6e-4).betas({0.9, 0.95}));
}

// The fixed batch of the run: tokens and targets uniform in [0, V).
std::pair<Tensor, Tensor> make_batch(const Shape& s) {
  manual_seed(0);
  Tensor x = randint(0, s.vocab, {s.batch, s.seq});
  Tensor y = randint(0, s.vocab, {s.batch, s.seq});
  return {x, y};
}

models::GPT make_model(const Shape& s) {
  manual_seed(1);
  return models::GPT(gpt_config(s));
}

// ---- child processes: PyTorch servers and DDP ranks, one JSON line each way ----

std::vector<pid_t> g_children;

void on_fatal_signal(int sig) {
  for (pid_t pid : g_children) ::kill(pid, SIGKILL);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, std::string label) : label_(std::move(label)) {
    static const std::set<std::string> launcher = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e, key = kv.substr(0, kv.find('='));
      if (!launcher.count(key) && !env.count(key)) envs.push_back(kv);
    }
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> cargv, cenv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    int in[2], out[2];
    DP_CHECK(::pipe2(in, O_CLOEXEC) == 0, ValueError, "bench_gpt: pipe: ", std::strerror(errno));
    if (::pipe2(out, O_CLOEXEC) != 0) {
      ::close(in[0]);
      ::close(in[1]);
      throw ValueError(std::string("bench_gpt: pipe: ") + std::strerror(errno));
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the benchmark
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::execve(cargv[0], cargv.data(), cenv.data());
      std::fprintf(stderr, "bench_gpt: cannot run %s: %s\n", cargv[0], std::strerror(errno));
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    if (pid_ < 0) {
      ::close(in[1]);
      ::close(out[0]);
      throw ValueError(std::string("bench_gpt: fork: ") + std::strerror(errno));
    }
    to_ = in[1];
    from_ = out[0];
    g_children.push_back(pid_);
  }
  ~Child() {
    if (to_ >= 0) {
      const std::string quit = "{\"cmd\": \"quit\"}\n";
      (void)!::write(to_, quit.data(), quit.size());
      ::close(to_);
    }
    if (from_ >= 0) ::close(from_);
    if (pid_ > 0) {
      ::waitpid(pid_, nullptr, 0);
      g_children.erase(std::remove(g_children.begin(), g_children.end(), pid_), g_children.end());
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  const std::string& label() const { return label_; }

  void send(const json& request) {
    const std::string line = request.dump() + "\n";
    DP_CHECK(::write(to_, line.data(), line.size()) == static_cast<ssize_t>(line.size()), ValueError, "bench_gpt: ", label_,
             " does not take requests (", std::strerror(errno), ")");
  }

  // The child's next JSON line (other lines go to stderr); an error answer or an exit throws.
  json receive(int timeout_s = 1800) {
    for (;;) {
      const auto nl = pending_.find('\n');
      if (nl != std::string::npos) {
        const std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        if (line.empty() || line[0] != '{') {
          std::cerr << label_ << ": " << line << "\n";
          continue;
        }
        json j = json::parse(line, nullptr, false);
        DP_CHECK(!j.is_discarded() && j.is_object(), ValueError, "bench_gpt: ", label_, " wrote a malformed line: ", line);
        DP_CHECK(!j.contains("error"), ValueError, "bench_gpt: ", label_, " failed: ", j["error"].dump());
        return j;
      }
      pollfd pfd{from_, POLLIN, 0};
      DP_CHECK(::poll(&pfd, 1, timeout_s * 1000) > 0, ValueError, "bench_gpt: ", label_, " said nothing for ", timeout_s, " s");
      char buf[65536];
      const ssize_t k = ::read(from_, buf, sizeof buf);
      DP_CHECK(k > 0, ValueError, "bench_gpt: ", label_, " exited (is ", label_ == "ddp" ? "the worker" : "torch", " runnable?)");
      pending_.append(buf, static_cast<size_t>(k));
    }
  }

  json call(const json& request) {
    send(request);
    return receive();
  }

 private:
  std::string label_;
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string pending_;
};

bool pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::sched_setaffinity(0, sizeof set, &set) == 0;
}

json phases_json(const std::vector<Phases>& p) {
  json f = json::array(), b = json::array(), c = json::array(), o = json::array();
  for (const Phases& x : p) {
    f.push_back(x.forward);
    b.push_back(x.backward);
    c.push_back(x.clip);
    o.push_back(x.optimizer);
  }
  return {{"forward_ms", f}, {"backward_ms", b}, {"clip_ms", c}, {"optimizer_ms", o}};
}

// ---- the DDP rank (bench_gpt --worker '<spec>') ----
//   <- {"cmd": "steps", "n": N, "mode": "float32"|"bf16", "timed": true}
//   -> {"times_ms": [...], "phases": {...}, "loss": L}
int worker_main(const std::string& spec_text) {
  try {
    const json spec = json::parse(spec_text);
    const Shape s = shape_named(spec.at("config"));
    set_num_threads(1);
    const int rank = std::stoi(std::getenv("RANK") ? std::getenv("RANK") : "0");
    pin_to_cpu(spec.at("cpus")[static_cast<size_t>(rank) % spec.at("cpus").size()].get<int>());
    distributed::ProcessGroupPtr group = distributed::init_process_group();
    const int world = group->size();
    DP_CHECK(s.batch % world == 0, ValueError, "bench_gpt worker: batch ", s.batch, " does not split over ", world, " ranks");
    auto [xg, yg] = make_batch(s);
    const int64_t rows = s.batch / world;
    Tensor x = xg.narrow(0, rank * rows, rows).contiguous(), y = yg.narrow(0, rank * rows, rows).contiguous();
    models::GPT model = make_model(s);
    nn::DistributedDataParallel ddp(model, group);
    auto opt = make_adamw(*model);
    const std::vector<Tensor> params = ddp->parameters();
    auto fl = [&] { return models::lm_loss(ddp(x), y); };
    std::cout << json({{"ready", true}, {"rank", rank}, {"world", world}}).dump() << "\n" << std::flush;
    for (std::string line; std::getline(std::cin, line);) {
      const json req = json::parse(line, nullptr, false);
      if (req.is_discarded() || req.value("cmd", "") == "quit") return 0;
      const bool bf16 = req.value("mode", "float32") == "bf16";
      std::vector<double> times;
      std::vector<Phases> phases;
      double loss = 0;
      for (int i = 0; i < req.value("n", 1); ++i) {
        StepResult r = timed_step(*opt, params, bf16, fl);
        times.push_back(r.ms);
        phases.push_back(r.phases);
        loss = r.loss.item<double>();
      }
      const bool timed = req.value("timed", true);
      std::cout << json({{"times_ms", timed ? json(times) : json::array()},
                         {"phases", phases_json(timed ? phases : std::vector<Phases>{})},
                         {"loss", loss}})
                       .dump()
                << "\n"
                << std::flush;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cout << json({{"error", e.what()}}).dump() << "\n" << std::flush;
    return 3;
  }
}

// ---- the GEMM floor ----

struct Gemm {
  std::string name;
  const char* op;  // linear, mm, mm_tn (A read transposed), bmm
  int64_t m, k, n, batch;
  int per_step;  // how many the step runs
  double gflop() const { return 2.0 * static_cast<double>(m) * k * n * batch / 1e9; }
};

// The products of one step over `tokens` tokens (rows of `batch` sequences).
std::vector<Gemm> step_gemms(const Shape& s, int64_t batch) {
  const int64_t t = batch * s.seq, c = s.embd, hs = s.embd / s.heads;
  const int l = static_cast<int>(s.layers);
  std::vector<Gemm> g;
  auto lin = [&](const std::string& name, int64_t in, int64_t out, int per) {
    g.push_back({name + " fwd", "linear", t, in, out, 1, per});
    g.push_back({name + " dX", "mm", t, out, in, 1, per});
    g.push_back({name + " dW", "mm_tn", out, t, in, 1, per});
  };
  lin("qkv", c, 3 * c, l);
  lin("attn.proj", c, c, l);
  lin("mlp.fc", c, 4 * c, l);
  lin("mlp.proj", 4 * c, c, l);
  lin("head", c, s.vocab, 1);
  // q k^T and att v per (sequence, head): 2 forward, 4 backward per layer, all T x hs x T in FLOPs.
  g.push_back({"attention", "bmm", s.seq, hs, s.seq, batch * s.heads, 6 * l});
  return g;
}

std::function<void()> make_gemm_call(const Gemm& g, DType dtype) {
  const std::string op = g.op;
  if (op == "linear") {
    Tensor x = randn({g.m, g.k}).to(dtype), w = randn({g.n, g.k}).to(dtype);
    return [x, w] { dp::linear(x, w); };
  }
  if (op == "mm") {
    Tensor a = randn({g.m, g.k}).to(dtype), b = randn({g.k, g.n}).to(dtype);
    return [a, b] { dp::mm(a, b); };
  }
  if (op == "mm_tn") {
    Tensor gr = randn({g.k, g.m}).to(dtype), x = randn({g.k, g.n}).to(dtype);
    return [gr, x] { dp::mm(gr.t(), x); };
  }
  Tensor a = randn({g.batch, g.m, g.k}).to(dtype), b = randn({g.batch, g.k, g.n}).to(dtype);
  return [a, b] { dp::bmm(a, b); };
}

struct GemmSet {
  std::string name, description;
  int threads;                                                           // dp::set_num_threads while timing
  int64_t batch;                                                         // sequences per product
  int concurrent;                                                        // threads timing the same product at once (one per core)
  std::map<std::string, std::map<std::string, std::vector<double>>> ms;  // mode -> product -> times
};

// Times every product of the set in both dtypes: one warm-up call, then `calls` timed calls (with
// `concurrent` > 1, as many threads each time their own operands at once, behind a barrier).
void time_gemm_set(GemmSet& set, const Shape& s, const std::vector<std::string>& modes, int calls, int host_threads) {
  set_num_threads(set.threads);
  for (const Gemm& g : step_gemms(s, set.batch)) {
    for (const std::string& mode : modes) {
      const DType dt = mode == "bf16" ? kBFloat16 : kFloat32;
      std::vector<std::vector<double>> times(static_cast<size_t>(set.concurrent));
      std::barrier sync(set.concurrent);
      auto body = [&](int i) {
        std::function<void()> call = make_gemm_call(g, dt);
        call();
        for (int c = 0; c < calls; ++c) {
          sync.arrive_and_wait();
          times[static_cast<size_t>(i)].push_back(bench::time_call<std::milli>(call));
        }
      };
      if (set.concurrent == 1) {
        body(0);
      } else {
        std::vector<std::thread> th;
        for (int i = 0; i < set.concurrent; ++i) th.emplace_back(body, i);
        for (auto& t : th) t.join();
      }
      for (auto& v : times) set.ms[mode][g.name].insert(set.ms[mode][g.name].end(), v.begin(), v.end());
    }
  }
  set_num_threads(host_threads);
}

// The floor of one set and mode: sum over the products of per_step x median ms.
double gemm_floor_ms(const GemmSet& set, const Shape& s, const std::string& mode) {
  auto it = set.ms.find(mode);
  if (it == set.ms.end()) return std::nan("");
  double total = 0;
  for (const Gemm& g : step_gemms(s, set.batch)) total += g.per_step * bench::stats(it->second.at(g.name)).median;
  return total;
}

// ---- the rows ----

struct Row {
  std::string name, mode, kind, description, gemm_set;
  std::function<StepResult()> step;  // in-process rows
  Child* child = nullptr;            // PyTorch or DDP rows
  json request;                      // the child's steps request (n filled in)
  std::vector<double> times_ms;
  std::vector<Phases> phases;
  double loss = std::nan("");
};

void run_row(Row& row, int n, bool timed) {
  if (n <= 0) return;
  if (row.child) {
    json req = row.request;
    req["n"] = n;
    req["timed"] = timed;
    json a = row.child->call(req);
    if (!timed) return;
    for (double t : a.at("times_ms")) row.times_ms.push_back(t);
    if (a.contains("phases")) {
      const json& p = a["phases"];
      for (size_t i = 0; i < p["forward_ms"].size(); ++i)
        row.phases.push_back(
            {p["forward_ms"][i].get<double>(), p["backward_ms"][i].get<double>(), p["clip_ms"][i].get<double>(), p["optimizer_ms"][i].get<double>()});
    }
    if (a.contains("loss")) row.loss = a["loss"].get<double>();
    return;
  }
  for (int i = 0; i < n; ++i) {
    StepResult r = row.step();
    row.loss = r.loss.item<double>();
    if (!timed) continue;
    row.times_ms.push_back(r.ms);
    row.phases.push_back(r.phases);
  }
}

struct Options {
  std::string config = "gpt2";
  std::vector<std::string> rows{"ours", "ours1", "dp2", "ddp2", "torch1", "torch2"};
  std::vector<std::string> modes{"float32", "bf16"};
  int warmup = 2, steps = 6, rounds = 2, threads = 0, gemm_calls = 3;
  bool torch = true, write = true, realtime = true;
  std::string python = "/usr/bin/python3";
  fs::path root = fs::path(DP_SOURCE_DIR);
};

Options parse(int argc, char** argv) {
  Options o;
  for (bench::Args args("bench_gpt", argc, argv); args.next();) {
    if (args.is("--config"))
      o.config = args.value();
    else if (args.is("--rows"))
      o.rows = bench::split_list(args.value());
    else if (args.is("--modes"))
      o.modes = bench::split_list(args.value());
    else if (args.is("--warmup"))
      o.warmup = std::stoi(args.value());
    else if (args.is("--steps"))
      o.steps = std::stoi(args.value());
    else if (args.is("--rounds"))
      o.rounds = std::stoi(args.value());
    else if (args.is("--threads"))
      o.threads = std::stoi(args.value());
    else if (args.is("--gemm-calls"))
      o.gemm_calls = std::stoi(args.value());
    else if (args.is("--no-torch"))
      o.torch = false;
    else if (args.is("--no-write"))
      o.write = false;
    else if (args.is("--no-rt"))
      o.realtime = false;
    else if (args.is("--python"))
      o.python = args.value();
    else if (args.is("--root"))
      o.root = args.value();
    else if (args.is_help()) {
      std::cout << "bench_gpt [--config gpt2|small] [--rows ours,ours1,dp2,ddp2,torch1,torch2] [--modes float32,bf16] [--warmup 2] [--steps 6]\n"
                   "          [--rounds 2] [--threads N] [--gemm-calls 3] [--no-torch] [--no-write] [--no-rt] [--python PATH] [--root DIR]\n"
                   "  Times a GPT training step (zero_grad, forward, loss, backward, clip, AdamW) of dparallel on the host, under\n"
                   "  DataParallel on 2 CPU devices and under DDP on 2 processes, and of PyTorch (bench/pytorch_gpt.py --serve) at 1\n"
                   "  and 2 threads, with the step's GEMM floor measured in the same run. Writes bench/results/gpt.json and the\n"
                   "  table in docs/benchmarks.md unless --no-write (--config small: gpt_small.json, its own table).\n"
                   "  Runs under SCHED_RR priority 5 when allowed (children inherit it; --no-rt: normal scheduling).\n";
      std::exit(0);
    } else
      args.unknown();
  }
  shape_named(o.config);
  DP_CHECK(o.warmup >= 0 && o.steps >= 1 && o.rounds >= 1 && o.gemm_calls >= 1, ValueError,
           "bench_gpt: --warmup must be >= 0, --steps, --rounds and --gemm-calls >= 1");
  for (const auto& r : o.rows)
    DP_CHECK(r == "ours" || r == "ours1" || r == "dp2" || r == "ddp2" || r == "torch1" || r == "torch2", ValueError, "bench_gpt: unknown row '", r,
             "' (ours, ours1, dp2, ddp2, torch1, torch2)");
  for (const auto& m : o.modes) DP_CHECK(m == "float32" || m == "bf16", ValueError, "bench_gpt: unknown mode '", m, "' (float32, bf16)");
  return o;
}

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

std::string mode_label(const std::string& mode) { return mode == "bf16" ? "bf16 autocast" : "float32"; }

// ---- the report ----

std::string markdown(const json& rep) {
  const json& m = rep["machine"];
  std::ostringstream s;
  const json& cfg = rep["config"];
  s << bench::measured_on(m) << "; 1-minute load average " << m["load_average_1min_at_start"].get<std::string>() << " at the start and "
    << rep["load_average_1min_at_end"].get<std::string>() << " at the end; PyTorch " << rep.value("pytorch_version", std::string("not run"))
    << "; oneDNN " << rep["onednn"].get<std::string>() << "; OPENBLAS_CORETYPE " << rep["openblas_coretype"].get<std::string>() << "; scheduling "
    << rep["scheduling"].get<std::string>() << ".\n"
    << "Model `" << cfg["name"].get<std::string>() << "`: " << cfg["layers"] << " layers, " << cfg["heads"] << " heads, " << cfg["embd"]
    << " channels, vocabulary " << cfg["vocab"] << ", tied head, " << rep["parameters"] << " parameters; batch " << cfg["batch"] << " x sequence "
    << cfg["seq"] << " = " << cfg["tokens"] << " tokens; " << bench::fmt(rep["gemm_gflop"].get<double>(), 1)
    << " GFLOP of matrix products per step. A step: zero_grad, forward, loss, backward, clip_grad_norm_(1.0), AdamW. Cells: median [min – max] ms "
       "over "
    << rep["steps"] << " timed steps per row in " << rep["rounds"] << " interleaved rounds after " << rep["warmup"]
    << " warm-up steps. GEMM rate: the step's GEMM FLOPs over the floor, the floor being the sum of the step's products' median times measured "
       "in the same run (set in brackets: host-Nt = all "
    << cfg["tokens"]
    << " tokens on N GEMM threads, pair-1t = half of them on 1 thread while the other core does the same: a replica's products).\n\n";
  s << "| row | mode | ms/step | tokens/s | GEMM GFLOP | GEMM rate GFLOP/s [set] | GEMM floor ms | step / floor | PyTorch best / this |\n"
       "|---|---|---|---|---|---|---|---|---|\n";
  for (const json& r : rep["rows"]) {
    s << "| " << r["description"].get<std::string>() << " | " << mode_label(r["mode"]) << " | "
      << bench::range_cell(r["median_ms"].get<double>(), r["min_ms"].get<double>(), r["max_ms"].get<double>()) << " | "
      << bench::fmt(r["tokens_per_s"].get<double>(), 0) << " | " << bench::fmt(rep["gemm_gflop"].get<double>(), 1) << " | ";
    if (r["floor_ms"].is_number())
      s << bench::fmt(r["gemm_rate_gflops"].get<double>(), 0) << " [" << r["gemm_set"].get<std::string>() << "] | "
        << bench::fmt(r["floor_ms"].get<double>(), 0) << " | " << bench::fmt(r["step_over_floor"].get<double>()) << " | ";
    else
      s << "– | – | – | ";
    s << (r.contains("speedup_vs_torch_best") ? bench::fmt(r["speedup_vs_torch_best"].get<double>()) : "–") << " |\n";
  }
  bool any_phases = false;
  for (const json& r : rep["rows"]) any_phases = any_phases || r.contains("phases_median_ms");
  if (any_phases) {
    s << "\nWhere our steps' time goes (median ms per phase; forward includes zero_grad and the loss; DDP: rank 0, backward includes the "
         "gradient allreduce):\n\n| row | mode | forward + loss | backward | clip | AdamW step |\n|---|---|---|---|---|---|\n";
    for (const json& r : rep["rows"]) {
      if (!r.contains("phases_median_ms")) continue;
      const json& p = r["phases_median_ms"];
      s << "| " << r["description"].get<std::string>() << " | " << mode_label(r["mode"]) << " | " << bench::fmt(p["forward"].get<double>(), 1)
        << " | " << bench::fmt(p["backward"].get<double>(), 1) << " | " << bench::fmt(p["clip"].get<double>(), 1) << " | "
        << bench::fmt(p["optimizer"].get<double>(), 1) << " |\n";
    }
  }
  if (!rep["targets"].empty()) {
    s << "\n| target | measured | met? |\n|---|---|---|\n";
    for (const json& t : rep["targets"])
      s << "| " << t["target"].get<std::string>() << " | " << t["measured"].get<std::string>() << " | " << (t["met"].get<bool>() ? "yes" : "**no**")
        << " |\n";
  }
  return s.str();
}

int run(const Options& o, char** argv) {
  const Shape s = shape_named(o.config);
  const int host_threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<int> cpus = allowed_cpus();
  json report = {{"machine", bench::machine_info(o.root)}};
  report["scheduling"] = "normal (SCHED_OTHER)";
  if (o.realtime) {
    // Other processes (builds at nice 10) then take no time from the measured threads; round-robin
    // rather than FIFO so that threads of equal priority on one core (a DDP rank's compute and Gloo
    // threads) still take turns.
    sched_param sp{};
    sp.sched_priority = 5;
    if (::sched_setscheduler(0, SCHED_RR, &sp) == 0) report["scheduling"] = "SCHED_RR priority 5";
  }
  report["onednn"] = backends::onednn::is_available() ? backends::onednn::implementation() : "not available";
  report["openblas_coretype"] = std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "(not set)";
  report["config"] = {{"name", s.name},   {"layers", s.layers}, {"heads", s.heads}, {"embd", s.embd},
                      {"vocab", s.vocab}, {"batch", s.batch},   {"seq", s.seq},     {"tokens", s.tokens()}};
  report["gemm_gflop"] = gemm_gflop(s);
  report["threads"] = host_threads;
  report["warmup"] = o.warmup;
  report["steps"] = o.steps;
  report["rounds"] = o.rounds;

  // Children first, before this process starts threads of its own.
  std::map<int, std::unique_ptr<Child>> torch;
  if (o.torch) {
    for (int t : {1, 2}) {
      if (!has(o.rows, "torch" + std::to_string(t))) continue;
      const std::string ts = std::to_string(t);
      torch[t] = std::make_unique<Child>(std::vector<std::string>{o.python, (o.root / "bench" / "pytorch_gpt.py").string(), "--serve"},
                                         std::map<std::string, std::string>{{"OPENBLAS_NUM_THREADS", ts}, {"OMP_NUM_THREADS", ts}},
                                         "PyTorch (" + ts + " thread" + (t > 1 ? "s" : "") + ")");
    }
  }
  std::vector<std::unique_ptr<Child>> ranks;
  if (has(o.rows, "ddp2")) {
    const std::string port = std::to_string(bench::free_port());
    // The store's token (rank 0 hosts the store): the environment, never the command line.
    const std::string token = distributed::generate_store_token();
    const json spec = {{"config", s.name}, {"cpus", cpus}};
    for (int r = 0; r < 2; ++r)
      ranks.push_back(std::make_unique<Child>(std::vector<std::string>{bench::self_exe(), "--worker", spec.dump()},
                                              std::map<std::string, std::string>{{"RANK", std::to_string(r)},
                                                                                 {"WORLD_SIZE", "2"},
                                                                                 {"LOCAL_RANK", std::to_string(r)},
                                                                                 {"MASTER_ADDR", "127.0.0.1"},
                                                                                 {"MASTER_PORT", port},
                                                                                 {"DP_STORE_TOKEN", token}},
                                              "ddp"));
  }
  for (auto& [t, child] : torch) {
    json a = child->call({{"cmd", "build"}, {"config", s.name}, {"threads", t}});
    report["pytorch_version"] = a["torch"];
  }
  for (auto& r : ranks) r->receive();

  set_num_threads(host_threads);
  auto [x, y] = make_batch(s);
  std::vector<std::unique_ptr<Row>> rows;
  models::GPT host_model{nullptr}, dp_model{nullptr};
  std::shared_ptr<optim::AdamW> host_opt, dp_opt;
  if (has(o.rows, "ours") || has(o.rows, "ours1")) {
    host_model = make_model(s);
    host_opt = make_adamw(*host_model);
    report["parameters"] = host_model->num_params(false);
    for (const int t : {host_threads, 1}) {
      const std::string name = t == 1 && host_threads > 1 ? "ours1" : "ours";
      if (!has(o.rows, name) || (t == 1 && host_threads == 1 && has(o.rows, "ours"))) continue;
      for (const auto& mode : o.modes) {
        auto row = std::make_unique<Row>();
        row->name = name;
        row->mode = mode;
        row->kind = "ours";
        row->description = "dparallel, host, " + std::to_string(t) + " GEMM thread" + (t > 1 ? "s" : "");
        row->gemm_set = "host-" + std::to_string(t) + "t";
        const std::vector<Tensor> params = host_model->parameters();
        row->step = [model = host_model, opt = host_opt, params, x, y, bf16 = mode == "bf16", t, host_threads] {
          set_num_threads(t);
          StepResult r = timed_step(*opt, params, bf16, [&] { return models::lm_loss(model(x), y); });
          set_num_threads(host_threads);
          return r;
        };
        rows.push_back(std::move(row));
      }
    }
  }
  if (has(o.rows, "dp2")) {
    if (cpu_device_count() < 2) set_cpu_device_count(2);
    const Device d0 = Device::cpu(0);
    dp_model = make_model(s);
    if (!report.contains("parameters")) report["parameters"] = dp_model->num_params(false);
    dp_model->to(d0);
    dp_opt = make_adamw(*dp_model);
    nn::DataParallel net(dp_model, std::vector<Device>{d0, Device::cpu(1)});
    const Tensor xd = x.to(d0), yd = y.to(d0);
    const std::vector<Tensor> params = net->parameters();
    for (const auto& mode : o.modes) {
      auto row = std::make_unique<Row>();
      row->name = "dp2";
      row->mode = mode;
      row->kind = "ours";
      row->description = "dparallel, DataParallel on cpu:0, cpu:1 (forward_loss)";
      row->gemm_set = "pair-1t";
      row->step = [net, opt = dp_opt, params, xd, yd, bf16 = mode == "bf16"]() mutable {
        return timed_step(*opt, params, bf16, [&] {
          return net->forward_loss([](const Tensor& logits, const Tensor& t) { return models::lm_loss(logits, t); }, yd, xd);
        });
      };
      rows.push_back(std::move(row));
    }
  }
  if (!ranks.empty()) {
    for (const auto& mode : o.modes) {
      auto row = std::make_unique<Row>();
      row->name = "ddp2";
      row->mode = mode;
      row->kind = "ours";
      row->description = "dparallel, DDP on 2 processes (1 core each, Gloo on loopback)";
      row->gemm_set = "pair-1t";
      row->child = ranks[0].get();
      row->request = {{"cmd", "steps"}, {"mode", mode}};
      rows.push_back(std::move(row));
    }
  }
  for (auto& [t, child] : torch) {
    for (const auto& mode : o.modes) {
      auto row = std::make_unique<Row>();
      row->name = "torch" + std::to_string(t);
      row->mode = mode;
      row->kind = "torch";
      row->description = "PyTorch 1.13, " + std::to_string(t) + " thread" + (t > 1 ? "s" : "");
      row->gemm_set = "host-" + std::to_string(t) + "t";
      row->child = child.get();
      row->request = {{"cmd", "steps"}, {"mode", mode}};
      rows.push_back(std::move(row));
    }
  }
  if (!report.contains("parameters")) report["parameters"] = make_model(s)->num_params(false);

  // A DDP row is both ranks: the request goes to both, the answers are rank 0's (they step in lockstep).
  auto step_row = [&](Row& row, int n, bool timed) {
    if (row.child && row.child->label() == "ddp") {
      json req = row.request;
      req["n"] = n;
      req["timed"] = timed;
      for (auto& r : ranks) r->send(req);
      json a0 = ranks[0]->receive();
      for (size_t i = 1; i < ranks.size(); ++i) ranks[i]->receive();
      if (!timed) return;
      for (double t : a0.at("times_ms")) row.times_ms.push_back(t);
      const json& p = a0["phases"];
      for (size_t i = 0; i < p["forward_ms"].size(); ++i)
        row.phases.push_back(
            {p["forward_ms"][i].get<double>(), p["backward_ms"][i].get<double>(), p["clip_ms"][i].get<double>(), p["optimizer_ms"][i].get<double>()});
      row.loss = a0["loss"].get<double>();
      return;
    }
    run_row(row, n, timed);
  };

  std::cerr << "bench_gpt: " << s.name << ", " << rows.size() << " rows; warming up\n";
  for (auto& row : rows) step_row(*row, o.warmup, false);

  std::vector<GemmSet> sets;
  sets.push_back({"host-" + std::to_string(host_threads) + "t", "all tokens, host GEMM threads", host_threads, s.batch, 1, {}});
  if (host_threads != 2 && has(o.rows, "torch2")) sets.push_back({"host-2t", "all tokens, 2 threads", 2, s.batch, 1, {}});
  if (host_threads != 1 && (has(o.rows, "torch1") || has(o.rows, "ours1"))) sets.push_back({"host-1t", "all tokens, 1 thread", 1, s.batch, 1, {}});
  if (has(o.rows, "dp2") || has(o.rows, "ddp2")) sets.push_back({"pair-1t", "128 tokens, 1 thread, both cores", 1, s.batch / 2, 2, {}});

  for (int round = 0; round < o.rounds; ++round) {
    const int n = o.steps / o.rounds + (round < o.steps % o.rounds ? 1 : 0);
    for (GemmSet& set : sets) time_gemm_set(set, s, o.modes, o.gemm_calls, host_threads);
    std::vector<Row*> order;
    for (auto& r : rows) order.push_back(r.get());
    if (round % 2 == 1) std::reverse(order.begin(), order.end());
    for (Row* row : order) {
      step_row(*row, n, true);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // spinning pool threads of the previous row settle
      std::cerr << "  round " << round << " " << row->name << " " << row->mode << ": last " << bench::fmt(row->times_ms.back(), 1) << " ms\n";
    }
  }
  report["load_average_1min_at_end"] = bench::load_average();

  // Results.
  std::map<std::string, double> floors;  // set|mode -> ms
  json sets_json = json::object();
  for (const GemmSet& set : sets) {
    json sj = {{"description", set.description}, {"threads", set.threads}, {"batch", set.batch}, {"concurrent", set.concurrent}};
    for (const auto& mode : o.modes) {
      floors[set.name + "|" + mode] = gemm_floor_ms(set, s, mode);
      json prods = json::array();
      for (const Gemm& g : step_gemms(s, set.batch)) {
        const double med = bench::stats(set.ms.at(mode).at(g.name)).median;
        prods.push_back({{"product", g.name},
                         {"op", g.op},
                         {"m", g.m},
                         {"k", g.k},
                         {"n", g.n},
                         {"batch", g.batch},
                         {"per_step", g.per_step},
                         {"median_ms", med},
                         {"gflops", g.gflop() / (med / 1e3)}});
      }
      sj[mode] = {{"floor_ms", floors[set.name + "|" + mode]}, {"products", prods}};
    }
    sets_json[set.name] = sj;
  }
  report["gemm_sets"] = sets_json;
  double torch_best = std::nan("");
  for (auto& row : rows)
    if (row->kind == "torch" && !row->times_ms.empty()) {
      const double med = bench::stats(row->times_ms).median;
      if (std::isnan(torch_best) || med < torch_best) torch_best = med;
    }
  report["rows"] = json::array();
  std::map<std::string, double> medians;
  for (auto& row : rows) {
    const bench::Stats st = bench::stats(row->times_ms);
    medians[row->name + "|" + row->mode] = st.median;
    json r = {{"row", row->name},
              {"mode", row->mode},
              {"description", row->description},
              {"median_ms", st.median},
              {"min_ms", st.min},
              {"max_ms", st.max},
              {"times_ms", row->times_ms},
              {"tokens_per_s", static_cast<double>(s.tokens()) / (st.median / 1e3)},
              {"loss", row->loss},
              {"gemm_set", row->gemm_set}};
    const auto f = floors.find(row->gemm_set + "|" + row->mode);
    if (f != floors.end() && !std::isnan(f->second)) {
      r["floor_ms"] = f->second;
      r["gemm_rate_gflops"] = gemm_gflop(s) / (f->second / 1e3);
      r["step_over_floor"] = st.median / f->second;
    } else {
      r["floor_ms"] = nullptr;
    }
    if (!std::isnan(torch_best)) r["speedup_vs_torch_best"] = torch_best / st.median;
    if (!row->phases.empty()) {
      std::vector<double> f1, b1, c1, o1;
      for (const Phases& p : row->phases) {
        f1.push_back(p.forward);
        b1.push_back(p.backward);
        c1.push_back(p.clip);
        o1.push_back(p.optimizer);
      }
      r["phases_median_ms"] = {{"forward", bench::stats(f1).median},
                               {"backward", bench::stats(b1).median},
                               {"clip", bench::stats(c1).median},
                               {"optimizer", bench::stats(o1).median}};
    }
    report["rows"].push_back(r);
  }
  report["torch_best_ms"] = std::isnan(torch_best) ? json(nullptr) : json(torch_best);

  // Targets.
  json targets = json::array();
  double ours_best = std::nan("");
  std::string ours_best_name;
  for (const json& r : report["rows"])
    if (r["row"] != "torch1" && r["row"] != "torch2" && (std::isnan(ours_best) || r["median_ms"].get<double>() < ours_best)) {
      ours_best = r["median_ms"].get<double>();
      ours_best_name = r["description"].get<std::string>() + ", " + mode_label(r["mode"]);
    }
  if (!std::isnan(torch_best) && !std::isnan(ours_best)) {
    const double q = torch_best / ours_best;
    targets.push_back({{"target", "our best step >= 3x faster than PyTorch's best row"},
                       {"measured", bench::fmt(q) + "x (" + ours_best_name + ": " + bench::fmt(ours_best, 0) + " ms; PyTorch " +
                                        bench::fmt(torch_best, 0) + " ms)"},
                       {"met", q >= 3.0}});
  }
  for (const auto& mode : o.modes) {
    auto a = medians.find("ours|" + mode), b = medians.find("dp2|" + mode);
    if (a == medians.end() || b == medians.end()) continue;
    const double q = a->second / b->second;
    targets.push_back({{"target", "DataParallel on 2 devices >= 1.8x our 1-device step, " + mode_label(mode)},
                       {"measured", bench::fmt(q) + "x (" + bench::fmt(a->second, 0) + " / " + bench::fmt(b->second, 0) + " ms)"},
                       {"met", q >= 1.8}});
  }
  for (const json& r : report["rows"]) {
    if (r["row"] == "torch1" || r["row"] == "torch2" || !r["floor_ms"].is_number()) continue;
    const double q = r["step_over_floor"].get<double>();
    targets.push_back({{"target", "within 1.5x of the GEMM floor: " + r["description"].get<std::string>() + ", " + mode_label(r["mode"])},
                       {"measured", bench::fmt(q) + "x (" + bench::fmt(r["median_ms"].get<double>(), 0) + " / " +
                                        bench::fmt(r["floor_ms"].get<double>(), 0) + " ms)"},
                       {"met", q <= 1.5}});
  }
  report["targets"] = targets;

  const std::string md = markdown(report);
  std::cout << md;
  if (o.write) {
    if (s.name == "gpt2")
      bench::write_results(o.root, "gpt.json", report, "bench_gpt", md);
    else
      bench::write_results(o.root, "gpt_" + s.name + ".json", report, "bench_gpt_" + s.name, md);
  }
  (void)argv;
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  dp::reexec_for_blas_kernels(argv);  // OpenBLAS's kernels for this CPU (the children inherit the setting)
  if (argc == 3 && std::string(argv[1]) == "--worker") return worker_main(argv[2]);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, on_fatal_signal);
  ::signal(SIGPIPE, SIG_IGN);  // a child that died is reported by the read that finds it gone
  const Options o = parse(argc, argv);
  return run(o, argv);
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpt: %s\n", e.what());
  return 2;
}
