// monitored_barrier through the store (gloo_monitored_barrier.h).
#include "distributed/gloo_monitored_barrier.h"
#include <sstream>
#include <vector>
#include "dp/distributed/errors.h"

namespace dp::distributed::detail {
namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// The ranks whose key is absent right now; a store that fails to answer yields what was learnt.
std::vector<int> absent(Store& store, const std::string& base, int size) {
  std::vector<int> out;
  try {
    for (int r = 0; r < size; ++r)
      if (!store.check({base + std::to_string(r)})) out.push_back(r);
  } catch (...) {
  }
  return out;
}

}  // namespace

void store_monitored_barrier(Store& store, const std::string& who, int rank, int size, uint64_t n, std::chrono::milliseconds timeout,
                             bool wait_all_ranks) {
  const std::string base = "mb/" + std::to_string(n) + "/";
  const std::string release = base + "release";
  const std::string label = dp::detail::str(who, ": monitored_barrier #", n);
  store.set(base + std::to_string(rank), std::string("1"));

  if (rank != 0) {
    // Rank 0 decides within `timeout` of its own arrival: wait for that arrival, then for the
    // verdict a little longer than rank 0 can take (so the verdict, not a guess, is reported).
    const std::string zero = base + "0";
    try {
      store.wait({zero}, timeout);
      store.wait({release}, timeout + std::chrono::milliseconds(1000));
    } catch (const StoreTimeout&) {
      std::vector<int> missing = absent(store, base, size);
      const bool zero_missing = !missing.empty() && missing.front() == 0;
      throw RendezvousError(dp::detail::str(label, ": rank 0 ", zero_missing ? "did not arrive" : "did not release the barrier", " within ",
                                            timeout.count(), " ms", missing.empty() ? std::string() : "; not arrived: " + ranks_text(missing)),
                            missing.empty() ? std::vector<int>{0} : missing);
    }
    const std::string verdict = store.get_string(release);
    if (verdict == "ok") return;
    std::vector<int> missing;
    std::istringstream in(verdict.substr(verdict.find(' ') + 1));
    for (int r; in >> r;) missing.push_back(r);
    throw RendezvousError(dp::detail::str(label, ": ", ranks_text(missing), " did not arrive within ", timeout.count(), " ms (reported by rank 0)"),
                          missing);
  }

  std::vector<int> missing;
  if (wait_all_ranks) {
    std::vector<std::string> keys;
    for (int r = 1; r < size; ++r) keys.push_back(base + std::to_string(r));
    try {
      if (!keys.empty()) store.wait(keys, timeout);
    } catch (const StoreTimeout&) {
      missing = absent(store, base, size);
    }
  } else {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int r = 1; r < size; ++r) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() < 0) left = std::chrono::milliseconds(0);
      try {
        store.wait({base + std::to_string(r)}, left);
      } catch (const StoreTimeout&) {
        missing.push_back(r);
        break;
      }
    }
  }
  if (missing.empty()) {
    store.set(release, std::string("ok"));
    return;
  }
  std::string list;
  for (int r : missing) {
    list += ' ';
    list += std::to_string(r);
  }
  store.set(release, "missing" + list);  // the arrived ranks learn who is missing at once
  throw RendezvousError(dp::detail::str(label, ": ", ranks_text(missing), " did not arrive within ", timeout.count(), " ms",
                                        wait_all_ranks ? "" : " (the first rank missing; wait_all_ranks=true lists all)"),
                        missing);
}

}  // namespace dp::distributed::detail
