// Typed, rank-naming errors from gloo's exceptions (gloo_errors.h).
#include "distributed/gloo_errors.h"
#include <algorithm>
#include <cctype>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include "distributed/shm_allreduce.h"
#include "dp/distributed/errors.h"

namespace dp::distributed::detail {
namespace {

bool is_timeout_text(const std::string& text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::exception_ptr timeout_error(const std::string& gloo_text, const OpLabel& label, std::chrono::milliseconds waited,
                                 const std::function<ProgressReport()>& progress) {
  const ProgressReport report = progress ? progress() : ProgressReport{false, "no progress reader", {}};
  std::vector<int> behind;
  std::vector<std::string> diverged;  // same collective number, another operation
  std::vector<std::string> where;
  if (report.complete) {
    for (const RankProgress& p : report.ranks) {
      if (p.rank == label.rank) continue;
      if (!p.known || p.operation == "-" || p.sequence < label.sequence) {  // "-": noted a step, no collective yet
        behind.push_back(p.rank);
      } else if (p.sequence == label.sequence && p.operation != label.operation) {
        diverged.push_back(
            dp::detail::str("rank ", p.rank, " issued ", p.operation, " as collective #", p.sequence, ", this rank ", label.operation));
      }
    }
    // Where every other rank is (step and phase, last collective): the ranks behind first, then
    // the others in rank order. At most kListed, then how many more, so a large group's message
    // stays readable and still names the ranks behind. (This rank's own position ends the message.)
    std::vector<const RankProgress*> order;
    for (const RankProgress& p : report.ranks)
      if (p.rank != label.rank && std::find(behind.begin(), behind.end(), p.rank) != behind.end()) order.push_back(&p);
    for (const RankProgress& p : report.ranks)
      if (p.rank != label.rank && std::find(behind.begin(), behind.end(), p.rank) == behind.end()) order.push_back(&p);
    constexpr size_t kListed = 8;
    for (size_t i = 0; i < order.size() && i < kListed; ++i) where.push_back(describe_progress(*order[i]));
    if (order.size() > kListed)
      where.push_back(dp::detail::str("and ", order.size() - kListed, " more rank", order.size() - kListed == 1 ? "" : "s"));
  }
  std::string msg = label.str() + " timed out: ";
  if (!report.complete) {
    msg += "the other ranks' progress could not be read (" + report.error + ")";
  } else if (behind.empty() && diverged.empty()) {
    msg += "no rank is behind by the progress they published";
  } else {
    std::vector<std::string> parts;
    if (!behind.empty())
      parts.push_back((behind.size() == 1 ? "rank " : "ranks ") + join_ranks(behind) + (behind.size() == 1 ? " is" : " are") + " behind");
    if (!diverged.empty()) {
      std::string d;
      for (const auto& x : diverged) d += (d.empty() ? "" : "; ") + x;
      parts.push_back(d + " (the ranks issued different collectives; DP_DISTRIBUTED_DEBUG=1 checks every call)");
    }
    for (size_t i = 0; i < parts.size(); ++i) msg += (i ? "; " : "") + parts[i];
  }
  for (const auto& w : where) msg += "; " + w;
  msg += dp::detail::str("; this rank", label.position.empty() ? std::string() : " (at " + label.position + ")", " waited ", waited.count(),
                         " ms in ", label.operation, " #", label.sequence, " (gloo: ", strip_gloo_location(gloo_text), ")");
  return std::make_exception_ptr(CollectiveTimeout(msg, label.operation, label.sequence, waited, behind));
}

std::exception_ptr io_error(const std::string& text, const OpLabel& label, const PeerAddressBook& peers, std::chrono::milliseconds waited,
                            const std::function<ProgressReport()>& progress) {
  if (is_timeout_text(text)) return timeout_error(text, label, waited, progress);
  std::string address;
  const int peer = peers.find_in(text, &address);
  std::string reason = strip_gloo_location(text);
  std::string who = "lost a peer (rank unknown)";
  if (peer >= 0) {
    // The address moves into "lost rank 1 (127.0.0.1:40197)"; what is left is gloo's reason.
    who = dp::detail::str("lost rank ", peer, " (", readable_address(address), ")");
    if (const size_t at = reason.find(address); at != std::string::npos) reason.erase(at, address.size());
    for (size_t at; (at = reason.find(" :")) != std::string::npos;) reason.erase(at, 1);
    while (!reason.empty() && reason.back() == ' ') reason.pop_back();
  }
  return std::make_exception_ptr(PeerLostError(dp::detail::str(label.str(), ": ", who, ": ", reason), peer, label.operation, label.sequence));
}

}  // namespace

std::string OpLabel::str() const { return dp::detail::str(operation, " #", sequence, " (rank ", rank, " of ", size, ", group '", group, "')"); }

int PeerAddressBook::find_in(const std::string& text, std::string* address) const {
  for (const auto& [addr, rank] : entries_) {
    if (addr.empty()) continue;
    for (size_t pos = text.find(addr); pos != std::string::npos; pos = text.find(addr, pos + 1)) {
      const size_t end = pos + addr.size();
      if (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) continue;  // a longer port
      if (address != nullptr) *address = addr;
      return rank;
    }
  }
  return -1;
}

std::string strip_gloo_location(const std::string& message) {
  if (message.empty() || message[0] != '[') return message;
  const size_t close = message.find("] ");
  return close == std::string::npos ? message : message.substr(close + 2);
}

std::string readable_address(const std::string& gloo_address) {
  const size_t close = gloo_address.rfind("]:");
  if (gloo_address.empty() || gloo_address[0] != '[' || close == std::string::npos) return gloo_address;
  const std::string host = gloo_address.substr(1, close - 1);
  size_t end = close + 2;
  while (end < gloo_address.size() && std::isdigit(static_cast<unsigned char>(gloo_address[end]))) ++end;
  if (end == close + 2 || end - close - 2 > 5) return gloo_address;
  const unsigned long raw = std::stoul(gloo_address.substr(close + 2, end - close - 2));
  if (raw > 0xffff) return gloo_address;
  const unsigned port = ((raw & 0xff) << 8) | (raw >> 8);
  const bool v6 = host.find(':') != std::string::npos;
  return dp::detail::str(v6 ? "[" : "", host, v6 ? "]:" : ":", port);
}

std::exception_ptr translate_operation_error(std::exception_ptr error, const OpLabel& label, const PeerAddressBook& peers,
                                             std::chrono::milliseconds waited, const std::function<ProgressReport()>& progress) {
  try {
    std::rethrow_exception(error);
  } catch (const DistributedError&) {
    return error;  // already ours (CollectiveMismatch from the debug check, ...)
  } catch (const ShmPeerLost& e) {
    return std::make_exception_ptr(
        PeerLostError(dp::detail::str(label.str(), ": lost rank ", e.rank(), " (", e.what()), e.rank(), label.operation, label.sequence));
  } catch (const gloo::IoException& e) {
    return io_error(e.what(), label, peers, waited, progress);
  } catch (const gloo::Exception& e) {
    if (is_timeout_text(e.what())) return timeout_error(e.what(), label, waited, progress);
    return std::make_exception_ptr(DistributedError(label.str() + ": gloo error: " + strip_gloo_location(e.what())));
  } catch (const gloo::EnforceNotMet& e) {
    return std::make_exception_ptr(DistributedError(label.str() + ": gloo check failed: " + e.what()));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(DistributedError(label.str() + ": " + e.what()));
  } catch (...) {
    return std::make_exception_ptr(DistributedError(label.str() + ": unknown exception"));
  }
}

std::exception_ptr unusable_error(std::exception_ptr original, const std::string& group, int rank, int size) {
  const std::string p = dp::detail::str("process group '", group, "' (rank ", rank, " of ", size, ") is unusable after an earlier error: ");
  try {
    std::rethrow_exception(original);
  } catch (const PeerLostError& e) {
    return std::make_exception_ptr(PeerLostError(p + e.what(), e.peer_rank(), e.operation(), e.sequence()));
  } catch (const CollectiveTimeout& e) {
    return std::make_exception_ptr(CollectiveTimeout(p + e.what(), e.operation(), e.sequence(), e.waited(), e.ranks_behind()));
  } catch (const CollectiveMismatch& e) {
    return std::make_exception_ptr(CollectiveMismatch(p + e.what(), e.rank()));
  } catch (const RendezvousError& e) {
    return std::make_exception_ptr(RendezvousError(p + e.what(), e.missing_ranks()));
  } catch (const StoreTimeout& e) {
    return std::make_exception_ptr(StoreTimeout(p + e.what(), e.keys()));
  } catch (const StoreError& e) {
    return std::make_exception_ptr(StoreError(p + e.what()));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(DistributedError(p + e.what()));
  } catch (...) {
    return std::make_exception_ptr(DistributedError(p + "unknown exception"));
  }
}

}  // namespace dp::distributed::detail
