#include "worker_env.h"

#include <sched.h>
#include <cstdio>
#include <map>
#include <set>

extern char** environ;

namespace dp::run {
namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

std::vector<std::string> worker_environment(const std::vector<std::string>& inherited, const AttemptEnv& a, const WorkerEnv& w) {
  // Ordered, so two workers' environments differ only in their own values (easy to diff).
  std::map<std::string, std::string> set = {
      {"RANK", std::to_string(w.rank)},
      {"WORLD_SIZE", std::to_string(a.world_size)},
      {"LOCAL_RANK", std::to_string(w.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(a.nproc_local)},
      {"GROUP_RANK", std::to_string(a.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(a.nnodes)},
      {"ROLE_RANK", std::to_string(w.rank)},
      {"ROLE_WORLD_SIZE", std::to_string(a.world_size)},
      {"MASTER_ADDR", a.master_addr},
      {"MASTER_PORT", std::to_string(a.master_port)},
      {"DP_STORE_HOSTED", "1"},
      {"DP_STORE_PREFIX", a.store_prefix},
      {"DP_RUN_ID", a.run_id},
      {"DP_RESTART_COUNT", std::to_string(a.restart_count)},
      {"DP_MAX_RESTARTS", std::to_string(a.max_restarts)},
      {"DP_ERROR_FILE", w.error_file},
      // torchrun's names for the same things: a PyTorch program (torch.distributed.elastic's
      // @record) writes its error where dp-run reads it.
      {"TORCHELASTIC_RUN_ID", a.run_id},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(a.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(a.max_restarts)},
      {"TORCHELASTIC_ERROR_FILE", w.error_file},
  };
  if (a.timeout_s) set["DP_DIST_TIMEOUT"] = number(*a.timeout_s);
  if (!a.store_token.empty()) set["DP_STORE_TOKEN"] = a.store_token;
  if (!w.timeline_file.empty()) set["DP_TIMELINE"] = w.timeline_file;
  // Leave out a timeline an outer environment asked for: every rank would write the same file.
  std::set<std::string> drop;
  if (w.timeline_file.empty()) drop.insert("DP_TIMELINE");
  // The workers use dp-run's store and its token, not another one an outer environment names.
  drop.insert("DP_STORE_TOKEN_FILE");
  drop.insert("DP_STORE_INSECURE");
  if (a.store_token.empty()) drop.insert("DP_STORE_TOKEN");
  const std::string share = std::to_string(a.cpu_share);
  for (const char* name : {"DP_CPU_DEVICES", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"})
    if (!env_value(inherited, name)) set[name] = share;

  std::vector<std::string> out;
  out.reserve(inherited.size() + set.size());
  for (const std::string& entry : inherited) {
    const std::string name = entry.substr(0, entry.find('='));
    if (!set.count(name) && !drop.count(name)) out.push_back(entry);
  }
  for (const auto& [name, value] : set) out.push_back(name + "=" + value);
  return out;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

std::optional<std::string> env_value(const std::vector<std::string>& entries, const std::string& name) {
  for (const std::string& entry : entries)
    if (entry.size() > name.size() && entry[name.size()] == '=' && entry.compare(0, name.size(), name) == 0) return entry.substr(name.size() + 1);
  return std::nullopt;
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return 1;
}

}  // namespace dp::run
