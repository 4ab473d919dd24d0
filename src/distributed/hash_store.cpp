// HashStore: the in-process store (ranks as threads). A map under one mutex; waiters sleep on a
// condition variable that every write notifies.
#include <condition_variable>
#include <map>
#include <mutex>
#include "dp/distributed/store.h"
#include "distributed/store_common.h"

namespace dp::distributed {

struct HashStore::State {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, Bytes> data;

  bool has_all(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!data.count(k)) return false;
    return true;
  }
  // Under mu: waits until every key exists or throws StoreTimeout naming the missing ones.
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
    if (!cv.wait_for(lock, timeout, [&] { return has_all(keys); })) {
      std::vector<std::string> missing;
      for (const auto& k : keys)
        if (!data.count(k)) missing.push_back(k);
      throw_store_timeout("HashStore", missing, timeout);
    }
  }
};

HashStore::HashStore(std::chrono::milliseconds timeout) : Store(timeout), state_(std::make_unique<State>()) {}
HashStore::~HashStore() = default;

void HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->data[key] = value;
  }
  state_->cv.notify_all();
}

Bytes HashStore::get(const std::string& key) {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->wait_locked(lock, {key}, timeout());
  return state_->data[key];
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t sum;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->data.find(key);
    sum = (it == state_->data.end() ? 0 : parse_counter(key, it->second)) + delta;
    state_->data[key] = counter_bytes(sum);
  }
  state_->cv.notify_all();
  return sum;
}

Bytes HashStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Bytes now;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->data.find(key);
    if (it == state_->data.end()) {
      if (!expected.empty()) return expected;  // c10d: an absent key with a non-empty expectation is left absent
      state_->data[key] = desired;
      now = desired;
    } else if (it->second == expected) {
      it->second = desired;
      now = desired;
    } else {
      return it->second;
    }
  }
  state_->cv.notify_all();
  return now;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->has_all(keys);
}

void HashStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->wait_locked(lock, keys, timeout);
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->data.erase(key) > 0;
}

int64_t HashStore::num_keys() {
  std::lock_guard<std::mutex> lock(state_->mu);
  return static_cast<int64_t>(state_->data.size());
}

}  // namespace dp::distributed
