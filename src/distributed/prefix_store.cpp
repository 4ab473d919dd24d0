// PrefixStore: a namespace ("<prefix>/key") in another store.
#include "dp/distributed/store.h"
#include "distributed/store_common.h"

namespace dp::distributed {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : Store(base ? base->timeout() : kDefaultTimeout), prefix_(std::move(prefix)), base_(std::move(base)) {
  DP_CHECK(base_ != nullptr, ValueError, "PrefixStore '", prefix_, "': the base store is null");
}

std::vector<std::string> PrefixStore::join(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(join(k));
  return out;
}

// A timeout names the keys as the caller wrote them (without the prefix).
void PrefixStore::wait_prefixed(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  try {
    base_->wait(join(keys), timeout);
  } catch (const StoreTimeout& e) {
    std::vector<std::string> missing;
    for (const std::string& k : e.keys()) missing.push_back(k.rfind(prefix_ + "/", 0) == 0 ? k.substr(prefix_.size() + 1) : k);
    throw_store_timeout(detail::str("PrefixStore '", prefix_, "'"), missing, timeout);
  }
}

// get() waits with this store's timeout, which may differ from the base's.
void PrefixStore::set(const std::string& key, const Bytes& value) { base_->set(join(key), value); }
Bytes PrefixStore::get(const std::string& key) {
  wait_prefixed({key}, timeout());
  return base_->get(join(key));
}
int64_t PrefixStore::add(const std::string& key, int64_t delta) { return base_->add(join(key), delta); }
Bytes PrefixStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return base_->compare_set(join(key), expected, desired);
}
bool PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(join(keys)); }
void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) { wait_prefixed(keys, timeout); }
bool PrefixStore::delete_key(const std::string& key) { return base_->delete_key(join(key)); }
int64_t PrefixStore::num_keys() { return base_->num_keys(); }

}  // namespace dp::distributed
