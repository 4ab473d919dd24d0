#include "distributed/reducer_buckets.h"
#include <algorithm>
#include <map>
#include <utility>

namespace dp::distributed {

std::vector<BucketPlan> plan_buckets(const std::vector<Tensor>& params, double first_mb, double cap_mb) {
  DP_CHECK(first_mb > 0 && cap_mb > 0, ValueError, "DistributedDataParallel: bucket sizes must be positive, got first_bucket_mb ", first_mb,
           " and bucket_cap_mb ", cap_mb);
  const auto limit_bytes = [](double mb) { return static_cast<int64_t>(mb * 1024 * 1024); };
  struct Open {
    BucketPlan plan;
    size_t order;    // reverse-order position of its first parameter
    int closed = 0;  // buckets of this kind closed so far (the first uses first_mb)
  };
  std::map<std::pair<int, std::string>, Open> open;  // by (dtype, device)
  std::vector<std::pair<size_t, BucketPlan>> closed;
  size_t position = 0;
  for (size_t k = params.size(); k-- > 0; ++position) {
    const Tensor& p = params[k];
    auto key = std::make_pair(static_cast<int>(p.dtype()), p.device().str());
    auto it = open.find(key);
    if (it == open.end()) {
      it = open.emplace(key, Open{BucketPlan{p.dtype(), p.device(), {}, {}, 0}, position, 0}).first;
    }
    Open& o = it->second;
    if (o.plan.params.empty()) o.order = position;
    o.plan.params.push_back(k);
    o.plan.offsets.push_back(o.plan.numel);
    o.plan.numel += p.numel();
    const int64_t limit = limit_bytes(o.closed == 0 ? first_mb : cap_mb);
    if (o.plan.numel * static_cast<int64_t>(p.element_size()) >= limit) {
      closed.emplace_back(o.order, std::move(o.plan));
      o.plan = BucketPlan{p.dtype(), p.device(), {}, {}, 0};
      ++o.closed;
    }
  }
  for (auto& [key, o] : open)
    if (!o.plan.params.empty()) closed.emplace_back(o.order, std::move(o.plan));
  std::stable_sort(closed.begin(), closed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<BucketPlan> out;
  out.reserve(closed.size());
  for (auto& c : closed) out.push_back(std::move(c.second));
  return out;
}

}  // namespace dp::distributed
