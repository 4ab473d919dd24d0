#pragma once
// From gloo's exceptions to dp::distributed's typed errors. Gloo reports a lost peer as an
// IoException whose text holds the peer's socket address ("Connection closed by peer
// [127.0.0.1]:41235") and a stuck collective as "Timed out waiting 2000ms for recv operation";
// neither names a rank. These helpers add the ranks: addresses map to ranks through the table the
// rendezvous built, and a timeout asks the store who is behind.
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>
#include "distributed/progress_publisher.h"

namespace dp::distributed::detail {

// Which operation failed, for messages: "allreduce #42 (rank 0 of 2, group 'default')".
struct OpLabel {
  std::string group;
  int rank = 0;
  int size = 1;
  const char* operation = "";
  uint64_t sequence = 0;
  std::string position;  // where this rank's program noted it is ("step 41 (backward)"); may be empty
  std::string str() const;
};

// The socket addresses peers use towards this rank (as gloo prints them: "[127.0.0.1]:41235"),
// and whose they are.
class PeerAddressBook {
 public:
  void add(std::string address, int rank) { entries_.emplace_back(std::move(address), rank); }
  // The rank whose address occurs in `text` (a whole address: "[::1]:5" does not match in
  // "[::1]:50"), or -1; `address` receives the matched text.
  int find_in(const std::string& text, std::string* address = nullptr) const;
  size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<std::string, int>> entries_;
};

// gloo's message without its "[/path/file.cc:123] " source location.
std::string strip_gloo_location(const std::string& message);

// An address as gloo prints it, "[127.0.0.1]:1437", as people write it, "127.0.0.1:40197" (IPv6:
// "[::1]:40197"). Debian's gloo prints the port in network byte order (it formats sin_port without
// ntohs); this swaps it back. Text that is not such an address is returned unchanged.
std::string readable_address(const std::string& gloo_address);

// Turns the exception an operation failed with into the error its Work reports: PeerLostError
// (the peer's rank from `peers`), CollectiveTimeout (ranks behind from `progress`, called only for
// timeouts), or DistributedError for anything else; our own typed errors pass unchanged.
std::exception_ptr translate_operation_error(std::exception_ptr error, const OpLabel& label, const PeerAddressBook& peers,
                                             std::chrono::milliseconds waited, const std::function<ProgressReport()>& progress);

// The error every operation after `original` fails with: the same type (and typed fields), its
// message prefixed with "process group '<group>' (rank r of n) is unusable after an earlier error: ".
std::exception_ptr unusable_error(std::exception_ptr original, const std::string& group, int rank, int size);

}  // namespace dp::distributed::detail
