// GlooStore: gloo's rendezvous store interface over ours (gloo_store.h).
#include "distributed/gloo_store.h"
#include <algorithm>

namespace dp::distributed::detail {

GlooStore::GlooStore(std::shared_ptr<dp::distributed::Store> store, std::string key_prefix, std::chrono::milliseconds timeout)
    : store_(std::move(store)), prefix_(std::move(key_prefix)), timeout_(timeout) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) { store_->set(full_key(key), Bytes(data.begin(), data.end())); }

// gloo's get() has no timeout of its own: wait with ours first, so a missing key is a StoreTimeout
// after `timeout` whatever the underlying store's own timeout is.
std::vector<char> GlooStore::get(const std::string& key) {
  store_->wait({full_key(key)}, timeout_);
  const Bytes value = store_->get(full_key(key));
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(full_key(k));
  // gloo passes its context timeout; zero means "none" there, which we do not have: ours bounds it.
  store_->wait(full, timeout.count() > 0 ? std::min(timeout, timeout_) : timeout_);
}

}  // namespace dp::distributed::detail
