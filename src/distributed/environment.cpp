// read_environment: the rank, world size and master address a launcher exported (init.h). The
// launchers' variable sets are tried in a fixed order - torchrun's names (which dp-run uses too),
// Open MPI's, Slurm's - and the first one present wins; a variable that is malformed, or missing
// from a set that is present, is a ValueError naming it.
#include <charconv>
#include <cstdlib>
#include "dp/core/errors.h"
#include "dp/distributed/init.h"

namespace dp::distributed {
namespace {

// The names one launcher uses for each field.
struct Launcher {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
};

constexpr Launcher kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

class Reader {
 public:
  explicit Reader(const std::function<const char*(const char*)>& getenv) : getenv_(getenv) {}

  // The value, or nullopt when unset or empty (an empty variable is as good as none).
  std::optional<std::string> text(const char* name) const {
    const char* v = getenv_(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  }

  // A decimal integer in [min, max]. `leading_only` accepts a number followed by anything (Slurm's
  // per-node counts: "4(x2)", "4,2").
  std::optional<int64_t> integer(const char* name, int64_t min, int64_t max, bool leading_only = false) const {
    const std::optional<std::string> v = text(name);
    if (!v) return std::nullopt;
    int64_t n = 0;
    const char* end = v->data() + v->size();
    auto [p, ec] = std::from_chars(v->data(), end, n);
    DP_CHECK(ec == std::errc() && (p == end || leading_only) && n >= min && n <= max, ValueError, name, "='", *v, "' is not an integer in [", min,
             ", ", max, "]");
    return n;
  }

  bool flag(const char* name) const {
    const std::optional<std::string> v = text(name);
    if (!v || *v == "0") return false;
    DP_CHECK(*v == "1", ValueError, name, "='", *v, "' is not 0 or 1");
    return true;
  }

 private:
  const std::function<const char*(const char*)>& getenv_;
};

constexpr int64_t kMaxRanks = 1 << 24;

}  // namespace

std::optional<Environment> read_environment(const std::function<const char*(const char*)>& getenv) {
  const Reader env(getenv);
  for (const Launcher& l : kLaunchers) {
    if (!env.text(l.rank) && !env.text(l.world_size)) continue;
    Environment e;
    e.source = l.source;
    const auto rank = env.integer(l.rank, 0, kMaxRanks - 1);
    const auto world = env.integer(l.world_size, 1, kMaxRanks);
    DP_CHECK(rank.has_value(), ValueError, l.rank, " is not set (", l.world_size, " is: ", l.source, " sets both)");
    DP_CHECK(world.has_value(), ValueError, l.world_size, " is not set (", l.rank, " is: ", l.source, " sets both)");
    DP_CHECK(*rank < *world, ValueError, l.rank, "=", *rank, " is not below ", l.world_size, "=", *world);
    e.rank = static_cast<int>(*rank);
    e.world_size = static_cast<int>(*world);
    // Without the local variables (RANK and WORLD_SIZE exported by hand) the job is taken to run
    // on one machine: local = global.
    const bool slurm = std::string(l.source) == "srun";
    std::optional<int64_t> local_world = env.integer(l.local_world_size, 1, kMaxRanks, slurm);
    if (!local_world && slurm) local_world = env.integer("SLURM_TASKS_PER_NODE", 1, kMaxRanks, true);
    const auto local_rank = env.integer(l.local_rank, 0, kMaxRanks - 1);
    e.local_rank = static_cast<int>(local_rank.value_or(e.rank));
    e.local_world_size = static_cast<int>(local_world.value_or(e.world_size));
    DP_CHECK(e.local_rank < e.local_world_size, ValueError, l.local_rank, "=", e.local_rank, " is not below ",
             local_world ? l.local_world_size : l.world_size, "=", e.local_world_size);

    if (auto addr = env.text("MASTER_ADDR")) {
      e.master_addr = *addr;
    } else if (slurm) {
      if (auto launch_node = env.text("SLURM_LAUNCH_NODE_IPADDR")) e.master_addr = *launch_node;
    }
    e.master_port = static_cast<uint16_t>(env.integer("MASTER_PORT", 1, 65535).value_or(0));
    e.store_hosted = env.flag("DP_STORE_HOSTED");
    return e;
  }
  return std::nullopt;
}

std::optional<Environment> read_environment() {
  return read_environment([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace dp::distributed
