#pragma once
// GlooStore: gloo::rendezvous::Store over a dp::distributed::Store (c10d's GlooStore), so gloo's
// connectFullMesh exchanges its addresses through our stores (TCPStore, FileStore, HashStore).
// Errors are ours (StoreTimeout naming the keys) and pass through gloo unchanged; the group's
// rendezvous turns them into RendezvousError.
#include <chrono>
#include <memory>
#include <string>
#include <vector>
#include <gloo/rendezvous/store.h>
#include "dp/distributed/store.h"

namespace dp::distributed::detail {

class GlooStore : public gloo::rendezvous::Store {
 public:
  // Every key gloo uses becomes key_prefix + key in `store`; waits are bounded by `timeout`.
  GlooStore(std::shared_ptr<dp::distributed::Store> store, std::string key_prefix, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // The key in the underlying store that gloo's `key` is kept under.
  std::string full_key(const std::string& key) const { return prefix_ + key; }

 private:
  std::shared_ptr<dp::distributed::Store> store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace dp::distributed::detail
