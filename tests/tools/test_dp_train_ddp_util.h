#pragma once
// Helpers of the tests of dp-train across processes: run dp-train as one process per rank with
// the environment a launcher gives (dp::test::WorkerJob: a TCPStore server in the test, RANK,
// WORLD_SIZE, MASTER_ADDR, ..., one CPU device and one BLAS thread per process), or under dp-run
// (DP_RUN_BIN, when tools/CMakeLists.txt wires it); read the outputs while waiting (so a chatty
// rank never blocks on a full pipe), with bounded waits; compare weight files.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <vector>
#include "distributed/workers/worker_job.h"
#include "dp/dp.h"
#include "dp/nn/serialize.h"
#include "tools/test_dp_train_util.h"

namespace dp_train_ddp_test {

using namespace dp_train_test;
using std::chrono::milliseconds;
using std::chrono::seconds;

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Reads every process's output until all have exited or `limit` passed (then the stragglers are
// left to their owner's destructor, which kills and reaps them). Returns each exit status (128 +
// signal when killed), -1 for a process still running at the deadline.
template <typename Processes>
std::vector<int> wait_all(Processes&& ps, size_t count, milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<std::optional<int>> status(count);
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < count; ++i) {
      if (status[i]) continue;
      while (ps(i).read_line(milliseconds(5))) {
      }
      status[i] = ps(i).wait_exit(milliseconds(0));
      all = all && status[i].has_value();
    }
    if (all || std::chrono::steady_clock::now() >= deadline) break;
  }
  std::vector<int> out;
  for (const auto& s : status) out.push_back(s.value_or(-1));
  return out;
}

// dp-train as `args.size()` processes (args[r]: rank r's arguments), run to the end.
struct Ranks {
  std::vector<int> status;
  std::vector<std::string> output;  // stdout and stderr of each rank
  std::string all() const {
    std::string s;
    for (size_t r = 0; r < output.size(); ++r)
      s += "--- rank " + std::to_string(r) + " (exit status " + std::to_string(status[r]) + "):\n" +
           (output[r].size() > 4000 ? "..." + output[r].substr(output[r].size() - 4000) : output[r]);
    return s;
  }
};

inline Ranks run_ranks(const std::vector<std::vector<std::string>>& args, const std::vector<std::string>& extra_env = {},
                       milliseconds limit = milliseconds(120000)) {
  dp::test::WorkerJob job(kBinary, args, /*DP_DIST_TIMEOUT=*/30, extra_env);
  Ranks r;
  r.status = wait_all([&](size_t i) -> dp::test::WorkerProcess& { return job[static_cast<int>(i)]; }, args.size(), limit);
  for (int i = 0; i < job.size(); ++i) r.output.push_back(job[i].output());
  return r;
}

// The same arguments on every one of `world` ranks.
inline Ranks run_world(int world, const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {},
                       milliseconds limit = milliseconds(120000)) {
  return run_ranks(std::vector<std::vector<std::string>>(static_cast<size_t>(world), args), extra_env, limit);
}

// The JSON lines of a log that is being written: a last line still partial is left out.
inline std::vector<nlohmann::json> read_jsonl_so_far(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const std::exception&) {
      break;
    }
  }
  return out;
}

inline int64_t last_step(const std::vector<nlohmann::json>& log) {
  int64_t step = 0;
  for (const auto& r : log)
    if (r.at("event") == "step") step = r.at("step").get<int64_t>();
  return step;
}

inline std::vector<double> step_losses(const std::string& log) {
  std::vector<double> out;
  for (const auto& r : events(read_jsonl(log), "step")) out.push_back(r.at("loss").get<double>());
  return out;
}

// The largest |a - b| over every weight of two safetensors state dicts with the same keys.
inline double max_abs_diff(const std::string& a, const std::string& b) {
  auto ta = dp::load(a), tb = dp::load(b);
  EXPECT_EQ(ta.keys(), tb.keys());
  double worst = 0;
  for (const auto& item : ta) {
    if (!tb.contains(item.key())) continue;
    auto x = item.value().to_vector<float>(), y = tb[item.key()].to_vector<float>();
    EXPECT_EQ(x.size(), y.size()) << item.key();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(x[i] - y[i])));
  }
  return worst;
}

// The state dict's tensors, equal bit for bit (the files' metadata aside).
inline bool same_weights(const std::string& a, const std::string& b) {
  auto ta = dp::load(a), tb = dp::load(b);
  if (ta.keys() != tb.keys()) return false;
  for (const auto& item : ta)
    if (!dp::equal(item.value(), tb[item.key()])) return false;
  return true;
}

// The position a dp-train checkpoint stands at (its global step).
inline int64_t checkpoint_step(const std::string& dir) {
  dp::SafetensorsFile f = dp::load_file(dir + "/checkpoint.safetensors");
  return nlohmann::json::parse(f.metadata.at("dp_train")).at("position").at("global_step").get<int64_t>();
}

inline void copy_dir(const std::string& from, const std::string& to) {
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
}

}  // namespace dp_train_ddp_test
