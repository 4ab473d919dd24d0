#include "nodes.h"

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include "dp/distributed/errors.h"
#include "options.h"
#include "signals.h"

namespace dp::run {
namespace {

using dp::distributed::Bytes;
using dp::distributed::printable_text;
using dp::distributed::StoreError;
using dp::distributed::TCPStore;
using dp::distributed::TCPStoreOptions;
using std::chrono::milliseconds;

constexpr milliseconds kPoll{100};
constexpr int kHeartbeatEvery = 5;  // polls (0.5 s)
// Longer than this without a heartbeat, beyond the job's timeout, and a node is taken as gone.
constexpr milliseconds kSilenceMargin{2000};
// The longest text of another node that is printed (a failure line with a timeout's diagnosis).
constexpr size_t kMaxRemoteLine = 2000;

std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }
Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

std::string list(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out;
}

std::string seconds(milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

void check_interrupt(const char* what) {
  if (stop_signal_count() > 0) throw Interrupted(what);
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// This dp-run's identity in claims: its host, pid and a random id (two containers may share a pid).
const std::string& identity() {
  static const std::string id = [] {
    nlohmann::json j{{"host", hostname()}, {"pid", static_cast<int64_t>(::getpid())}, {"id", dp::distributed::generate_store_token().substr(0, 16)}};
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }();
  return id;
}

// "host H pid P" of an identity another dp-run wrote (printable), or what the value was.
std::string describe_identity(const std::string& value) {
  const nlohmann::json j = nlohmann::json::parse(value, nullptr, false);
  if (j.is_object() && j.contains("host") && j["host"].is_string() && j.contains("pid") && j["pid"].is_number_integer())
    return "on host " + printable_text(j["host"].get<std::string>()) + ", pid " + std::to_string(j["pid"].get<int64_t>());
  return "(a malformed claim: " + printable_text(value, 100) + ")";
}

std::string failure_json(const RemoteFailure& f) {
  return nlohmann::json{{"node", f.node}, {"line", f.line}, {"consequence", f.consequence}, {"timed_out", f.timed_out}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A failure record another node wrote; nullopt when the value is not one (then the caller names the key).
std::optional<RemoteFailure> parse_failure(const std::string& value, int nnodes) {
  const nlohmann::json j = nlohmann::json::parse(value, nullptr, false);
  if (!j.is_object() || !j.contains("node") || !j["node"].is_number_integer() || !j.contains("line") || !j["line"].is_string()) return std::nullopt;
  const int64_t node = j["node"].get<int64_t>();
  if (node < 0 || node >= nnodes) return std::nullopt;
  RemoteFailure f{static_cast<int>(node), printable_text(j["line"].get<std::string>(), kMaxRemoteLine), false, false};
  if (j.contains("consequence") && j["consequence"].is_boolean()) f.consequence = j["consequence"].get<bool>();
  if (j.contains("timed_out") && j["timed_out"].is_boolean()) f.timed_out = j["timed_out"].get<bool>();
  return f;
}

// An integer field of a JSON object another node wrote, in [lo, hi]; StartError naming the key otherwise.
int64_t int_field(const nlohmann::json& j, const char* field, int64_t lo, int64_t hi, const std::string& key, const std::string& where) {
  if (!j.is_object() || !j.contains(field) || !j[field].is_number_integer() || j[field].get<int64_t>() < lo || j[field].get<int64_t>() > hi)
    throw StartError("the store at " + where + " holds a malformed value for '" + key + "' (its \"" + field + "\" is not an integer in [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]); is another program writing to this job's store?");
  return j[field].get<int64_t>();
}

std::string timeout_text(int64_t ms, bool given) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(ms) / 1000.0);
  return given ? std::string("--timeout ") + buf : std::string("no --timeout (") + buf + " s)";
}

}  // namespace

NodeCoordinator::NodeCoordinator(const std::string& host, int port, const std::string& token, int node_rank, int nnodes, Clock::time_point deadline,
                                 milliseconds job_timeout)
    : where_(host + ":" + std::to_string(port)), node_rank_(node_rank), nnodes_(nnodes), job_timeout_(job_timeout) {
  // Connect in short tries, so Ctrl-C is obeyed while node 0 is not up yet.
  auto connect = [&]() -> std::unique_ptr<TCPStore> {
    for (;;) {
      check_interrupt("interrupted while connecting to the store");
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      TCPStoreOptions o;
      o.timeout = std::clamp(left, milliseconds(1), milliseconds(1000));
      o.token = token;
      // A network cut is ridden out for the workers' timeout and a little more: when it lasts
      // longer, the workers report their own timeouts first, then this node the lost store.
      o.retry_for = job_timeout + kSilenceMargin;
      try {
        auto store = std::make_unique<TCPStore>(host, static_cast<uint16_t>(port), o);
        // Each request waits this long for its answer, and the connection is made again and the
        // request sent again until the job's timeout has passed: a shorter cut is ridden out.
        store->set_timeout(std::clamp(job_timeout / 3, milliseconds(1000), milliseconds(5000)));
        return store;
      } catch (const StoreError& e) {
        const std::string why = e.what();
        // A store that refuses this node's token, or is not a store, will not change its mind.
        if (why.find("is not usable") != std::string::npos)
          throw StartError("node " + std::to_string(node_rank) + " cannot use the store at " + where_ + ": " + why);
        if (Clock::now() >= deadline)
          throw StartError("node " + std::to_string(node_rank) + " could not reach the store at " + where_ +
                           " (node 0's dp-run hosts it; start it, check --master-addr/--master-port and the network): " + why);
      }
    }
  };
  main_ = connect();
  watch_ = connect();
}

NodeCoordinator::~NodeCoordinator() { stop_watch(); }

void NodeCoordinator::poll_sleep() { wait_for_signal_or(static_cast<int>(kPoll.count())); }

void NodeCoordinator::check_mismatch() {
  const std::string k = "dp-run/mismatch";
  if (main_->check({k})) throw StartError(printable_text(text(main_->get(k)), kMaxRemoteLine));
}

JobConfig NodeCoordinator::agree_config(const JobConfig& mine, Clock::time_point deadline) {
  const std::string k = "dp-run/config";
  try {
    if (node_rank_ == 0) {
      nlohmann::json j{{"run_id", mine.run_id},
                       {"nnodes", mine.nnodes},
                       {"max_restarts", mine.max_restarts},
                       {"timeout_ms", mine.timeout_ms},
                       {"timeout_given", mine.timeout_given}};
      main_->set(k, j.dump());
      run_id_ = mine.run_id;
      return mine;
    }
    while (!main_->check({k})) {
      check_interrupt("interrupted while waiting for node 0");
      check_mismatch();
      if (Clock::now() >= deadline)
        throw StartError("node 0's dp-run did not publish the job at " + where_ + " in time (is a node 0 running with the same --master-port?)");
      poll_sleep();
    }
    const nlohmann::json j = nlohmann::json::parse(text(main_->get(k)), nullptr, false);
    if (!j.is_object() || !j.contains("run_id") || !j["run_id"].is_string() || !valid_run_id(j["run_id"].get<std::string>()))
      throw StartError("the store at " + where_ + " holds no dp-run job at '" + k + "' (is it another program's store?)");
    JobConfig c;
    c.run_id = j["run_id"].get<std::string>();
    c.nnodes = static_cast<int>(int_field(j, "nnodes", 1, 4096, k, where_));
    c.max_restarts = static_cast<int>(int_field(j, "max_restarts", 0, 1'000'000, k, where_));
    c.timeout_ms = int_field(j, "timeout_ms", 1, int64_t{10'000'000'000}, k, where_);
    c.timeout_given = j.contains("timeout_given") && j["timeout_given"].is_boolean() && j["timeout_given"].get<bool>();
    std::string differs;
    if (c.nnodes != mine.nnodes) {
      differs = "node " + std::to_string(node_rank_) + " was started with --nnodes " + std::to_string(mine.nnodes) + ", node 0 with --nnodes " +
                std::to_string(c.nnodes) + ": every node must be given the same --nnodes";
    } else if (c.timeout_ms != mine.timeout_ms) {
      differs = "node " + std::to_string(node_rank_) + " was started with " + timeout_text(mine.timeout_ms, mine.timeout_given) + ", node 0 with " +
                timeout_text(c.timeout_ms, c.timeout_given) + ": every node must be given the same --timeout (its workers' collective timeout)";
    }
    if (!differs.empty()) {
      // Every node waiting for the others learns it at once, instead of waiting for the rendezvous timeout.
      try {
        main_->compare_set("dp-run/mismatch", Bytes(), bytes(differs));
      } catch (const StoreError&) {
      }
      throw StartError(differs);
    }
    run_id_ = c.run_id;
    return c;
  } catch (const StoreError& e) {
    throw StartError(std::string("the store at ") + where_ + " failed while the nodes met: " + e.what());
  }
}

Layout NodeCoordinator::join(int attempt, int nproc_local, Clock::time_point deadline) {
  attempt_ = attempt;
  try {
    const std::string me = "node" + std::to_string(node_rank_);
    // A claim, not a count: sent again after a network blip it is still this dp-run's.
    const std::string held = text(main_->compare_set(akey("claim/" + me), Bytes(), bytes(identity())));
    if (held != identity())
      throw StartError("node rank " + std::to_string(node_rank_) + " is taken: another dp-run joined the job as node " + std::to_string(node_rank_) +
                       " " + describe_identity(held) + " (this one is on host " + printable_text(hostname()) + ", pid " + std::to_string(::getpid()) +
                       ")");
    nlohmann::json j{{"nproc", nproc_local}, {"host", hostname()}, {"pid", static_cast<int64_t>(::getpid())}};
    main_->set(akey(me), j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    std::vector<std::string> keys;
    for (int n = 0; n < nnodes_; ++n) keys.push_back(akey("node" + std::to_string(n)));
    while (!main_->check(keys)) {
      check_interrupt("interrupted while waiting for the other nodes");
      check_mismatch();
      if (Clock::now() >= deadline) {
        std::vector<int> missing;
        for (int n = 0; n < nnodes_; ++n)
          if (!main_->check({keys[static_cast<size_t>(n)]})) missing.push_back(n);
        throw StartError("node rendezvous failed: node" + std::string(missing.size() > 1 ? "s " : " ") + list(missing) +
                         " did not join within the --rdzv-timeout (store " + where_ + ", attempt " + std::to_string(attempt) + ")");
      }
      poll_sleep();
    }
    Layout layout;
    for (int n = 0; n < nnodes_; ++n) {
      const std::string& k = keys[static_cast<size_t>(n)];
      const nlohmann::json v = nlohmann::json::parse(text(main_->get(k)), nullptr, false);
      const int nproc = static_cast<int>(int_field(v, "nproc", 1, 1024, k, where_));
      if (n < node_rank_) layout.base_rank += nproc;
      layout.world_size += nproc;
      layout.nproc.push_back(nproc);
      layout.hosts.push_back(v.contains("host") && v["host"].is_string() ? printable_text(v["host"].get<std::string>()) : "?");
    }
    return layout;
  } catch (const StoreError& e) {
    throw StartError(std::string("the store at ") + where_ + " failed while the nodes met: " + e.what());
  }
}

void NodeCoordinator::start_watch(int attempt) {
  stop_watch();
  std::lock_guard<std::mutex> lock(mu_);
  attempt_ = attempt;
  stop_ = false;
  pending_failure_.reset();
  remote_.reset();
  first_.reset();
  silent_.clear();
  beats_.assign(static_cast<size_t>(nnodes_), {std::string(), Clock::now()});
  const SignalsBlocked blocked;  // the watcher inherits the mask: signals go to the main thread
  watcher_ = std::thread([this] { watch_loop(); });
}

void NodeCoordinator::stop_watch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

void NodeCoordinator::report_failure(const std::string& line, bool consequence) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool timed_out = line.find(": CollectiveTimeout: ") != std::string::npos || line.find(": StoreTimeout: ") != std::string::npos ||
                           line.find(": RendezvousError: ") != std::string::npos;
    if (!pending_failure_ && !first_) pending_failure_ = RemoteFailure{node_rank_, line, consequence, timed_out};
  }
  cv_.notify_all();
}

std::optional<RemoteFailure> NodeCoordinator::remote_failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return remote_;
}

std::optional<std::string> NodeCoordinator::store_lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

std::vector<int> NodeCoordinator::silent_nodes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return silent_;
}

std::optional<RemoteFailure> NodeCoordinator::first_failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_;
}

std::optional<RemoteFailure> NodeCoordinator::read_failure(TCPStore& store, const std::string& k) {
  if (!store.check({k})) return std::nullopt;
  const std::string value = text(store.get(k));
  if (auto f = parse_failure(value, nnodes_)) return f;
  // Only a client that holds the job's token can write here: still, junk is named, not trusted.
  return RemoteFailure{
      node_rank_,
      "the store key '" + k + "' holds a malformed failure record (" + std::to_string(value.size()) + " bytes: " + printable_text(value, 100) + ")",
      false, false};
}

// Node 0's watcher: a node whose heartbeat stands still longer than the job's timeout is gone (its
// machine, or the network to it); that is reported as this node's failure.
void NodeCoordinator::check_heartbeats(TCPStore& store, int tick) {
  if (node_rank_ != 0 || tick % kHeartbeatEvery != 0) return;
  const auto now = Clock::now();
  for (int n = 1; n < nnodes_; ++n) {
    const std::string hk = key("hb/node" + std::to_string(n));
    std::string value = store.check({hk}) ? text(store.get(hk)) : std::string();
    std::optional<RemoteFailure> silent;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& [last, since] = beats_[static_cast<size_t>(n)];
      if (value != last) {
        last = std::move(value);
        since = now;
        continue;
      }
      const auto quiet = std::chrono::duration_cast<milliseconds>(now - since);
      if (quiet < job_timeout_ + kSilenceMargin || std::count(silent_.begin(), silent_.end(), n)) continue;
      silent_.push_back(n);
      silent = RemoteFailure{n,
                             "its dp-run stopped answering: no heartbeat for " + seconds(quiet) +
                                 " s, longer than the job's timeout (the network to node " + std::to_string(n) + " is cut, or its machine is down)",
                             false, false};
      if (!first_ && !pending_failure_) pending_failure_ = silent;
      if (!remote_) remote_ = silent;
    }
  }
}

void NodeCoordinator::watch_loop() {
  const std::string failed_key = akey("failed");
  const std::string heartbeat_key = key("hb/node" + std::to_string(node_rank_));
  for (int tick = 0;; ++tick) {
    std::optional<RemoteFailure> to_report;
    bool know_first = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, kPoll, [&] { return stop_ || (pending_failure_ && !first_); });
      if (stop_) return;
      know_first = first_.has_value();
      if (pending_failure_ && !first_) to_report = pending_failure_;
    }
    try {
      std::optional<RemoteFailure> first;
      if (to_report) {
        // The first failure of the job: ours, unless another node's is in the key already.
        const std::string now = text(watch_->compare_set(failed_key, Bytes(), bytes(failure_json(*to_report))));
        first = parse_failure(now, nnodes_);
        if (!first) first = read_failure(*watch_, failed_key);
      } else if (!know_first) {
        first = read_failure(*watch_, failed_key);
      }
      if (first) {
        std::lock_guard<std::mutex> lock(mu_);
        first_ = first;
        if (first->node != node_rank_ && !remote_) remote_ = first;
      }
      if (tick % kHeartbeatEvery == 0) watch_->set(heartbeat_key, std::to_string(++heartbeat_));
      check_heartbeats(*watch_, tick);
    } catch (const StoreError& e) {
      // The client rode out what it could (the job's timeout): the store is gone for this node.
      std::lock_guard<std::mutex> lock(mu_);
      lost_ = printable_text(e.what(), kMaxRemoteLine);
      return;
    } catch (const std::exception& e) {
      // Anything else (a value this code cannot take, out of memory): this node's failure, named.
      std::lock_guard<std::mutex> lock(mu_);
      lost_ = "the node watcher failed: " + printable_text(e.what(), kMaxRemoteLine);
      return;
    }
  }
}

AttemptEnd NodeCoordinator::finish_attempt(bool ok, const std::optional<RemoteFailure>& own_first, milliseconds failure_wait,
                                           milliseconds node_timeout) {
  stop_watch();
  AttemptEnd end;
  if (auto lost = store_lost()) {
    end.store_lost = lost;
    return end;
  }
  const auto started = Clock::now();
  // A node stands still too long when its heartbeat does not move for the longer of node_timeout
  // and the job's timeout (a cut shorter than that is ridden out), measured from the last beat the
  // watcher saw.
  const milliseconds silent_after = std::max(node_timeout, job_timeout_ + kSilenceMargin);
  try {
    std::optional<RemoteFailure> pending, first;
    std::vector<std::pair<std::string, Clock::time_point>> beat;
    std::vector<int> already_silent;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending = pending_failure_;
      first = first_;
      beat = beats_;
      already_silent = silent_;
    }
    beat.resize(static_cast<size_t>(nnodes_), {std::string(), Clock::now()});
    if (pending && !first) {  // the watcher had no time to write it
      const std::string now = text(main_->compare_set(akey("failed"), Bytes(), bytes(failure_json(*pending))));
      first = parse_failure(now, nnodes_);
      if (!first) first = read_failure(*main_, akey("failed"));
    }
    if (own_first) main_->set(akey("failure/node" + std::to_string(node_rank_)), failure_json(*own_first));
    main_->set(akey("done/node" + std::to_string(node_rank_)), nlohmann::json{{"ok", ok}}.dump());
    // Per node: done (and how).
    std::map<int, std::optional<bool>> done;
    for (int n = 0; n < nnodes_; ++n) done[n] = std::nullopt;
    for (;;) {
      bool all = true;
      for (int n = 0; n < nnodes_; ++n) {
        if (done[n]) continue;
        const std::string dk = akey("done/node" + std::to_string(n));
        if (main_->check({dk})) {
          const nlohmann::json j = nlohmann::json::parse(text(main_->get(dk)), nullptr, false);
          done[n] = j.is_object() && j.contains("ok") && j["ok"].is_boolean() && j["ok"].get<bool>();
          continue;
        }
        all = false;
        const std::string hk = key("hb/node" + std::to_string(n));
        std::string hb = main_->check({hk}) ? text(main_->get(hk)) : std::string();
        auto& [last, since] = beat[static_cast<size_t>(n)];
        if (hb != last) {
          last = std::move(hb);
          since = Clock::now();
        }
      }
      if (all) break;
      if (!first) first = read_failure(*main_, akey("failed"));
      const auto now = Clock::now();
      const bool failure_known = !ok || first.has_value();
      bool give_up = failure_known && now - started >= failure_wait;
      for (int n = 0; n < nnodes_; ++n)
        if (!done[n] && (now - beat[static_cast<size_t>(n)].second >= silent_after || std::count(already_silent.begin(), already_silent.end(), n)))
          give_up = true;
      if (give_up) {
        for (int n = 0; n < nnodes_; ++n)
          if (!done[n]) end.lost_nodes.push_back(n);
        break;
      }
      check_interrupt("interrupted while waiting for the other nodes to finish");
      poll_sleep();
    }
    for (int n = 0; n < nnodes_; ++n)
      if (done[n] && !*done[n]) end.failed_nodes.push_back(n);
    // The first failure: the failure key's, unless it is a consequence and a node had a cause.
    if (!first || first->consequence) {
      for (int n = 0; n < nnodes_; ++n) {
        const std::string fk = akey("failure/node" + std::to_string(n));
        if (!done[n] || !main_->check({fk})) continue;
        auto f = parse_failure(text(main_->get(fk)), nnodes_);
        if (f && (!first || (first->consequence && !f->consequence))) first = f;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    first_ = first;
  } catch (const StoreError& e) {
    end.store_lost = printable_text(e.what(), kMaxRemoteLine);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (first_ && first_->node != node_rank_) remote_ = first_;
  return end;
}

void NodeCoordinator::farewell(milliseconds wait) {
  try {
    if (node_rank_ != 0) {
      main_->set(akey("bye/node" + std::to_string(node_rank_)), "1");
      return;
    }
    std::vector<std::string> keys;
    for (int n = 1; n < nnodes_; ++n) keys.push_back(akey("bye/node" + std::to_string(n)));
    const auto deadline = Clock::now() + wait;
    while (!keys.empty() && !main_->check(keys) && Clock::now() < deadline) poll_sleep();
  } catch (const StoreError&) {
    // Leaving anyway.
  }
}

}  // namespace dp::run
