#include "nodes.h"

#include <unistd.h>
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include "dp/distributed/errors.h"
#include "signals.h"

namespace dp::run {
namespace {

using dp::distributed::Bytes;
using dp::distributed::StoreError;
using dp::distributed::TCPStore;
using dp::distributed::TCPStoreOptions;
using std::chrono::milliseconds;

// Every store request of an agent: an answer within this, or the store counts as lost.
constexpr milliseconds kRequestTimeout{5000};
constexpr milliseconds kPoll{100};
constexpr int kHeartbeatEvery = 5;  // polls (0.5 s)
constexpr milliseconds kSilentAfterFailure{5000};

std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }
Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

std::string list(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out;
}

void check_interrupt(const char* what) {
  if (stop_signal_count() > 0) throw Interrupted(what);
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::optional<RemoteFailure> parse_failure(const std::string& value) {
  const nlohmann::json j = nlohmann::json::parse(value, nullptr, false);
  if (!j.is_object() || !j.contains("node") || !j["node"].is_number_integer() || !j.contains("line") || !j["line"].is_string()) return std::nullopt;
  return RemoteFailure{j["node"].get<int>(), j["line"].get<std::string>(), j.value("consequence", false)};
}

std::string failure_json(const RemoteFailure& f) { return nlohmann::json{{"node", f.node}, {"line", f.line}, {"consequence", f.consequence}}.dump(); }

}  // namespace

NodeCoordinator::NodeCoordinator(const std::string& host, int port, int node_rank, int nnodes, Clock::time_point deadline)
    : where_(host + ":" + std::to_string(port)), node_rank_(node_rank), nnodes_(nnodes) {
  // Connect in short tries, so Ctrl-C is obeyed while node 0 is not up yet.
  auto connect = [&]() -> std::unique_ptr<TCPStore> {
    for (;;) {
      check_interrupt("interrupted while connecting to the store");
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      TCPStoreOptions o;
      o.timeout = std::clamp(left, milliseconds(1), milliseconds(1000));
      try {
        auto store = std::make_unique<TCPStore>(host, static_cast<uint16_t>(port), o);
        store->set_timeout(kRequestTimeout);
        return store;
      } catch (const StoreError& e) {
        if (Clock::now() >= deadline)
          throw StartError("node " + std::to_string(node_rank) + " could not reach the store at " + where_ +
                           " (node 0's dp-run hosts it; start it, check --master-addr/--master-port and the network): " + e.what());
      }
    }
  };
  main_ = connect();
  watch_ = connect();
}

NodeCoordinator::~NodeCoordinator() { stop_watch(); }

void NodeCoordinator::poll_sleep() { wait_for_signal_or(static_cast<int>(kPoll.count())); }

JobConfig NodeCoordinator::agree_config(const JobConfig& mine, Clock::time_point deadline) {
  const std::string k = key("config");
  try {
    if (node_rank_ == 0) {
      nlohmann::json j{{"run_id", mine.run_id}, {"nnodes", mine.nnodes}, {"max_restarts", mine.max_restarts}};
      main_->set(k, j.dump());
      return mine;
    }
    while (!main_->check({k})) {
      check_interrupt("interrupted while waiting for node 0");
      if (Clock::now() >= deadline)
        throw StartError("node 0's dp-run did not publish the job at " + where_ + " in time (is a node 0 running with the same --master-port?)");
      poll_sleep();
    }
    const nlohmann::json j = nlohmann::json::parse(text(main_->get(k)), nullptr, false);
    if (!j.is_object() || !j.contains("run_id") || !j.contains("nnodes") || !j.contains("max_restarts"))
      throw StartError("the store at " + where_ + " holds no dp-run job (is it another program's port?)");
    JobConfig c{j["run_id"].get<std::string>(), j["nnodes"].get<int>(), j["max_restarts"].get<int>()};
    if (c.nnodes != mine.nnodes)
      throw StartError("node " + std::to_string(node_rank_) + " was started with --nnodes " + std::to_string(mine.nnodes) +
                       ", node 0 with --nnodes " + std::to_string(c.nnodes));
    return c;
  } catch (const StoreError& e) {
    throw StartError(std::string("the store at ") + where_ + " failed while the nodes met: " + e.what());
  }
}

Layout NodeCoordinator::join(int attempt, int nproc_local, Clock::time_point deadline) {
  attempt_ = attempt;
  try {
    const std::string me = "node" + std::to_string(node_rank_);
    if (main_->add(akey("claim/" + me), 1) > 1) {
      std::string other = main_->check({akey(me)}) ? text(main_->get(akey(me))) : std::string("(not yet joined)");
      throw StartError("node rank " + std::to_string(node_rank_) + " is taken: another dp-run joined the job as node " + std::to_string(node_rank_) +
                       " " + other);
    }
    nlohmann::json j{{"nproc", nproc_local}, {"host", hostname()}, {"pid", static_cast<int64_t>(::getpid())}};
    main_->set(akey(me), j.dump());
    std::vector<std::string> keys;
    for (int n = 0; n < nnodes_; ++n) keys.push_back(akey("node" + std::to_string(n)));
    while (!main_->check(keys)) {
      check_interrupt("interrupted while waiting for the other nodes");
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
      const nlohmann::json v = nlohmann::json::parse(text(main_->get(keys[static_cast<size_t>(n)])), nullptr, false);
      if (!v.is_object() || !v.contains("nproc") || !v["nproc"].is_number_integer())
        throw StartError("node " + std::to_string(n) + " joined with a malformed entry in the store at " + where_);
      const int nproc = v["nproc"].get<int>();
      if (n < node_rank_) layout.base_rank += nproc;
      layout.world_size += nproc;
      layout.nproc.push_back(nproc);
      layout.hosts.push_back(v.contains("host") && v["host"].is_string() ? v["host"].get<std::string>() : "?");
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
    if (!pending_failure_ && !first_) pending_failure_ = RemoteFailure{node_rank_, line, consequence};
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

std::optional<RemoteFailure> NodeCoordinator::first_failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_;
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
        first = parse_failure(text(watch_->compare_set(failed_key, Bytes(), bytes(failure_json(*to_report)))));
      } else if (!know_first && watch_->check({failed_key})) {
        first = parse_failure(text(watch_->get(failed_key)));
      }
      if (first) {
        std::lock_guard<std::mutex> lock(mu_);
        first_ = first;
        if (first->node != node_rank_) remote_ = first;
      }
      if (tick % kHeartbeatEvery == 0) watch_->add(heartbeat_key, 1);
    } catch (const StoreError& e) {
      std::lock_guard<std::mutex> lock(mu_);
      lost_ = e.what();
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
  try {
    if (pending_failure_ && !first_)  // the watcher had no time to write it
      first_ = parse_failure(text(main_->compare_set(akey("failed"), Bytes(), bytes(failure_json(*pending_failure_)))));
    if (own_first) main_->set(akey("failure/node" + std::to_string(node_rank_)), failure_json(*own_first));
    main_->set(akey("done/node" + std::to_string(node_rank_)), nlohmann::json{{"ok", ok}}.dump());
    // Per node: done (and how), or its heartbeat's last value and when it last moved.
    std::map<int, std::optional<bool>> done;
    std::map<int, std::pair<int64_t, Clock::time_point>> beat;
    for (int n = 0; n < nnodes_; ++n) {
      done[n] = std::nullopt;
      beat[n] = {-1, Clock::now()};
    }
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
        const int64_t hb = main_->check({hk}) ? main_->add(hk, 0) : -1;
        if (hb != beat[n].first) beat[n] = {hb, Clock::now()};
      }
      if (all) break;
      if (!first_ && main_->check({akey("failed")})) first_ = parse_failure(text(main_->get(akey("failed"))));
      const auto now = Clock::now();
      const bool failure_known = !ok || first_.has_value();
      bool give_up = failure_known && now - started >= failure_wait;
      // A node that stopped beating is gone; after a failure, sooner (its watcher beats every
      // 0.5 s while it stops its workers, so 5 s of silence means it cannot reach the store).
      const auto silent = failure_known ? std::min(node_timeout, kSilentAfterFailure) : node_timeout;
      for (int n = 0; n < nnodes_; ++n)
        if (!done[n] && now - beat[n].second >= silent) give_up = true;
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
    if (!first_ || first_->consequence) {
      for (int n = 0; n < nnodes_; ++n) {
        const std::string fk = akey("failure/node" + std::to_string(n));
        if (!done[n] || !main_->check({fk})) continue;
        auto f = parse_failure(text(main_->get(fk)));
        if (f && (!first_ || (first_->consequence && !f->consequence))) first_ = f;
      }
    }
  } catch (const StoreError& e) {
    end.store_lost = e.what();
  }
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
