#include "nodes.h"

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <map>
#include <string_view>
#include <nlohmann/json.hpp>
#include "dp/distributed/errors.h"
#include "exit_codes.h"
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

// Concatenation by appends (GCC 12's -Wrestrict misfires on some chains of operator+).
std::string cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out.append(p);
  return out;
}

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
  return nlohmann::json{{"node", f.node}, {"line", f.line}, {"consequence", f.consequence}, {"timed_out", f.timed_out}, {"membership", f.membership}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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
  if (j.contains("membership") && j["membership"].is_boolean()) f.membership = j["membership"].get<bool>();
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
                       {"timeout_given", mine.timeout_given},
                       {"nnodes_min", mine.nnodes_min},
                       {"node_timeout_ms", mine.node_timeout_ms},
                       {"last_call_ms", mine.last_call_ms}};
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
    c.nnodes_min = j.contains("nnodes_min") ? static_cast<int>(int_field(j, "nnodes_min", 0, 4096, k, where_)) : 0;
    c.node_timeout_ms = j.contains("node_timeout_ms") ? int_field(j, "node_timeout_ms", 0, int64_t{10'000'000'000}, k, where_) : 0;
    c.last_call_ms = j.contains("last_call_ms") ? int_field(j, "last_call_ms", 0, int64_t{10'000'000'000}, k, where_) : 0;
    auto nodes_text = [](const JobConfig& x) {
      return x.elastic() ? std::to_string(x.nnodes_min) + ":" + std::to_string(x.nnodes) : std::to_string(x.nnodes);
    };
    const std::string me = node_rank_ >= 0 ? "node " + std::to_string(node_rank_)
                                           : "a joining node (host " + printable_text(hostname()) + ", pid " + std::to_string(::getpid()) + ")";
    std::string differs;
    if (c.elastic() != mine.elastic() || (c.elastic() && c.nnodes_min != mine.nnodes_min)) {
      differs = me + " was started with --nnodes " + nodes_text(mine) + ", node 0 with --nnodes " + nodes_text(c) +
                ": every node must be given the same --nnodes";
    } else if (c.nnodes != mine.nnodes) {
      differs = me + " was started with --nnodes " + nodes_text(mine) + ", node 0 with --nnodes " + nodes_text(c) +
                ": every node must be given the same --nnodes";
    } else if (c.timeout_ms != mine.timeout_ms) {
      differs = me + " was started with " + timeout_text(mine.timeout_ms, mine.timeout_given) + ", node 0 with " +
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

std::string NodeCoordinator::hb_key(int node) const {
  if (!elastic_) return key("hb/node" + std::to_string(node));
  return key("hb/id" + std::to_string(node == node_rank_ || ids_.empty() ? id_ : ids_[static_cast<size_t>(node)]));
}

milliseconds NodeCoordinator::silent_limit() const { return node_timeout_.count() > 0 ? node_timeout_ : job_timeout_ + kSilenceMargin; }

// This node's heartbeat, at most every kPoll * kHeartbeatEvery (the watcher's, or the main thread's
// while it joins and finishes: never both at once).
void NodeCoordinator::beat(TCPStore& store) {
  const auto now = Clock::now();
  if (now - last_beat_ < kPoll * kHeartbeatEvery) return;
  last_beat_ = now;
  store.set(elastic_ ? key("hb/id" + std::to_string(id_)) : key("hb/node" + std::to_string(node_rank_)), std::to_string(++heartbeat_));
}

void NodeCoordinator::enter_elastic(const JobConfig& config) {
  elastic_ = true;
  min_ = config.nnodes_min;
  max_nodes_ = config.nnodes;
  nnodes_ = config.nnodes;
  if (config.node_timeout_ms > 0) node_timeout_ = milliseconds(config.node_timeout_ms);
  last_call_ = milliseconds(config.last_call_ms);
  try {
    // Node 0 is id 0; every other dp-run takes the next number: the order of coming is the order of node numbers.
    id_ = node_rank_ == 0 ? 0 : static_cast<int>(main_->add(key("ids"), 1));
  } catch (const StoreError& e) {
    throw StartError(std::string("the store at ") + where_ + " failed while the nodes met: " + e.what());
  }
}

std::string NodeCoordinator::node0_identity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return node0_;
}

void NodeCoordinator::close_job(int status, const std::string& reason) {
  if (!elastic_ || node_rank_ != 0) return;
  try {
    main_->set(key("closed"), nlohmann::json{{"status", status}, {"reason", reason}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    // The store closes with this dp-run: give every node still waiting to join (this attempt's
    // newcomers, the next one's) a moment to read why, until each says it has left.
    const auto deadline = Clock::now() + milliseconds(2000);
    while (Clock::now() < deadline) {
      const int count = static_cast<int>(main_->add(key("ids"), 0));
      bool waiting = false;
      for (int id = 1; id <= count && !waiting; ++id) {
        if (main_->check({key(cat({"left/id", std::to_string(id)}))})) continue;
        const bool member = std::count(ids_.begin(), ids_.end(), id) > 0;
        for (int a = member ? attempt_ + 1 : attempt_; a <= attempt_ + 2 && !waiting; ++a)
          waiting = main_->check({key(cat({"r", std::to_string(a), "/want/id", std::to_string(id)}))});
      }
      if (!waiting) break;
      poll_sleep();
    }
  } catch (const StoreError&) {
  }
}

Layout NodeCoordinator::elastic_join(int attempt, int nproc_local, int restarts_used, const std::vector<int>& expect, Clock::time_point deadline) {
  auto rkey = [&](int a, const std::string& k) {
    std::string out = "r";
    out += std::to_string(a);
    out += '/';
    out += k;
    return key(out);
  };
  const std::string mine = nlohmann::json{{"nproc", nproc_local}, {"host", hostname()}, {"pid", static_cast<int64_t>(::getpid())}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  auto want_key = [&](int a, int id) { return rkey(a, "want/id" + std::to_string(id)); };
  // A want record another dp-run wrote: {nproc, host, pid}, checked.
  struct Want {
    int id;
    int nproc;
    std::string host;
    int64_t pid;
  };
  auto read_want = [&](const std::string& k, int id) {
    const nlohmann::json v = nlohmann::json::parse(text(main_->get(k)), nullptr, false);
    Want w{id, static_cast<int>(int_field(v, "nproc", 1, 1024, k, where_)), "?", int_field(v, "pid", 0, int64_t{1} << 40, k, where_)};
    if (v.contains("host") && v["host"].is_string()) w.host = printable_text(v["host"].get<std::string>(), 200);
    return w;
  };
  auto closed = [&]() -> std::optional<JobClosed> {
    const std::string ck = key("closed");
    if (!main_->check({ck})) return std::nullopt;
    const nlohmann::json j = nlohmann::json::parse(text(main_->get(ck)), nullptr, false);
    const int status = j.is_object() && j.contains("status") && j["status"].is_number_integer() ? j["status"].get<int>() : 1;
    const std::string why = j.is_object() && j.contains("reason") && j["reason"].is_string() ? j["reason"].get<std::string>() : "(no reason given)";
    return JobClosed(printable_text(why, kMaxRemoteLine), status < 0 || status > 255 ? 1 : status);
  };
  auto layout_of = [&](int a, const std::vector<Want>& members) {
    Layout l;
    l.attempt = a;
    l.restarts_used = restarts_used;
    for (size_t n = 0; n < members.size(); ++n) {
      if (members[n].id == id_) {
        l.node_rank = static_cast<int>(n);
        l.base_rank = l.world_size;
      }
      l.world_size += members[n].nproc;
      l.nproc.push_back(members[n].nproc);
      l.hosts.push_back(members[n].host);
      l.ids.push_back(members[n].id);
      l.pids.push_back(members[n].pid);
    }
    std::lock_guard<std::mutex> lock(mu_);
    attempt_ = a;
    nnodes_ = static_cast<int>(members.size());
    node_rank_ = l.node_rank;
    ids_ = l.ids;
    node0_ = "host " + members.front().host + ", pid " + std::to_string(members.front().pid);
    return l;
  };
  try {
    if (node_rank_ == 0 && id_ == 0) {
      main_->set(want_key(attempt, 0), mine);
      std::optional<Clock::time_point> min_reached;
      for (;;) {
        check_interrupt("interrupted while waiting for the other nodes");
        beat(*main_);
        const int count = static_cast<int>(main_->add(key("ids"), 0));
        std::vector<Want> wants;
        for (int id = 0; id <= count; ++id)
          if (const std::string k = want_key(attempt, id); main_->check({k})) wants.push_back(read_want(k, id));
        const int n = static_cast<int>(wants.size());
        const auto now = Clock::now();
        if (n >= min_ && !min_reached) min_reached = now;
        bool every_expected = attempt > 0 && !expect.empty();
        for (int id : expect) every_expected = every_expected && std::any_of(wants.begin(), wants.end(), [&](const Want& w) { return w.id == id; });
        if (n >= max_nodes_ || (min_reached && (every_expected || now - *min_reached >= last_call_))) {
          if (static_cast<int>(wants.size()) > max_nodes_) wants.resize(static_cast<size_t>(max_nodes_));  // the first MAX to come; the rest wait
          nlohmann::json ids = nlohmann::json::array(), nodes = nlohmann::json::array();
          for (const Want& w : wants) {
            ids.push_back(w.id);
            nodes.push_back({{"id", w.id}, {"nproc", w.nproc}, {"host", w.host}, {"pid", w.pid}});
          }
          main_->set(rkey(attempt, "members"), nlohmann::json{{"ids", ids}, {"nodes", nodes}, {"restarts_used", restarts_used}}.dump(
                                                   -1, ' ', false, nlohmann::json::error_handler_t::replace));
          return layout_of(attempt, wants);
        }
        if (now >= deadline) {
          std::string joined;
          for (const Want& w : wants) joined += (joined.empty() ? "" : "; ") + ("host " + w.host + ", pid " + std::to_string(w.pid));
          const std::string why = "elastic rendezvous failed: " + std::to_string(n) + " node" + (n == 1 ? "" : "s") + " (" + joined +
                                  ") joined attempt " + std::to_string(attempt) + " within the --rdzv-timeout, fewer than MIN " +
                                  std::to_string(min_) + " of --nnodes " + std::to_string(min_) + ":" + std::to_string(max_nodes_) + " (store " +
                                  where_ + ")";
          close_job(kExitCannotStart, why);
          throw StartError(why);
        }
        poll_sleep();
      }
    }
    // Another node: want this attempt, or the next one when this one's members are out without it.
    std::pair<std::string, Clock::time_point> node0_beat{std::string(), Clock::now()};
    for (int a = attempt;; ++a) {
      main_->set(want_key(a, id_), mine);
      const std::string mk = rkey(a, "members");
      for (;;) {
        check_interrupt("interrupted while waiting to join the job");
        check_mismatch();
        beat(*main_);
        if (main_->check({mk})) break;
        if (auto c = closed()) {
          main_->set(key(cat({"left/id", std::to_string(id_)})), "1");
          throw *c;
        }
        // Node 0 beats while it waits, runs and finishes: silent, it is gone (and the store with it, or soon).
        const std::string hk = key("hb/id0");
        std::string hb = main_->check({hk}) ? text(main_->get(hk)) : std::string();
        if (hb != node0_beat.first) {
          node0_beat = {std::move(hb), Clock::now()};
        } else if (Clock::now() - node0_beat.second >= silent_limit()) {
          throw StartError("node 0's dp-run (the store's host, " + where_ + ") stopped answering while this node waited to join attempt " +
                           std::to_string(a) + ": no heartbeat for " + seconds(silent_limit()) + " s");
        }
        poll_sleep();
      }
      const nlohmann::json j = nlohmann::json::parse(text(main_->get(mk)), nullptr, false);
      if (!j.is_object() || !j.contains("nodes") || !j["nodes"].is_array() || j["nodes"].empty())
        throw StartError("the store at " + where_ + " holds a malformed value for '" + mk + "'; is another program writing to this job's store?");
      std::vector<Want> members;
      bool in = false;
      for (const auto& v : j["nodes"]) {
        Want w{static_cast<int>(int_field(v, "id", 0, int64_t{1} << 30, mk, where_)), static_cast<int>(int_field(v, "nproc", 1, 1024, mk, where_)),
               "?", int_field(v, "pid", 0, int64_t{1} << 40, mk, where_)};
        if (v.contains("host") && v["host"].is_string()) w.host = printable_text(v["host"].get<std::string>(), 200);
        in = in || w.id == id_;
        members.push_back(std::move(w));
      }
      if (static_cast<int>(members.size()) > max_nodes_)
        throw StartError("the store at " + where_ + " holds more than MAX nodes in '" + mk + "'; is another program writing to this job's store?");
      if (!in) continue;  // admitted later (the job has MAX nodes, or this node came after the rendezvous)
      restarts_used = static_cast<int>(int_field(j, "restarts_used", 0, 1'000'000, mk, where_));
      return layout_of(a, members);
    }
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
  const milliseconds limit = silent_limit();
  for (int n = 1; n < nnodes_; ++n) {
    const std::string hk = hb_key(n);
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
      if (quiet < limit || std::count(silent_.begin(), silent_.end(), n)) continue;
      silent_.push_back(n);
      const std::string beyond = node_timeout_.count() > 0 ? "the --node-timeout of " + seconds(node_timeout_) + " s" : "the job's timeout";
      silent = RemoteFailure{n,
                             "its dp-run stopped answering: no heartbeat for " + seconds(quiet) + " s, longer than " + beyond +
                                 " (the network to node " + std::to_string(n) + " is cut, or its machine or dp-run is down)",
                             false, false};
      if (!first_ && !pending_failure_) pending_failure_ = silent;
      if (!remote_) remote_ = silent;
    }
  }
}

// Node 0's watcher, elastic: a dp-run waiting to join the next attempt while this one has fewer
// than MAX nodes is admitted by restarting the workers (a membership change, not a failure).
void NodeCoordinator::check_waiting(TCPStore& store, int tick) {
  if (!elastic_ || node_rank_ != 0 || tick % kHeartbeatEvery != 0 || nnodes_ >= max_nodes_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_ || pending_failure_) return;
  }
  const int count = static_cast<int>(store.add(key("ids"), 0));
  for (int id = 1; id <= count; ++id) {
    if (std::count(ids_.begin(), ids_.end(), id)) continue;
    const std::string k = key(cat({"r", std::to_string(attempt_ + 1), "/want/id", std::to_string(id)}));
    if (!store.check({k})) continue;
    const nlohmann::json v = nlohmann::json::parse(text(store.get(k)), nullptr, false);
    std::string who = "a dp-run";
    if (v.is_object() && v.contains("host") && v["host"].is_string() && v.contains("pid") && v["pid"].is_number_integer())
      who = "the dp-run on host " + printable_text(v["host"].get<std::string>(), 200) + ", pid " + std::to_string(v["pid"].get<int64_t>());
    std::lock_guard<std::mutex> lock(mu_);
    RemoteFailure f{node_rank_,
                    who + " is waiting to join (" + std::to_string(nnodes_) + " of at most " + std::to_string(max_nodes_) +
                        " nodes run): restarting the workers to admit it (a membership change, not counted against --max-restarts)",
                    false, false, true};
    pending_failure_ = f;
    if (!remote_) remote_ = f;
    return;
  }
}

void NodeCoordinator::watch_loop() {
  const std::string failed_key = akey("failed");
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
      beat(*watch_);
      check_heartbeats(*watch_, tick);
      check_waiting(*watch_, tick);
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
  const milliseconds silent_after = node_timeout_.count() > 0 ? node_timeout_ : std::max(node_timeout, job_timeout_ + kSilenceMargin);
  try {
    std::optional<RemoteFailure> pending, first;
    std::vector<std::pair<std::string, Clock::time_point>> beats;
    std::vector<int> already_silent;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending = pending_failure_;
      first = first_;
      beats = beats_;
      already_silent = silent_;
    }
    beats.resize(static_cast<size_t>(nnodes_), {std::string(), Clock::now()});
    if (pending && !first) {  // the watcher had no time to write it
      const std::string now = text(main_->compare_set(akey("failed"), Bytes(), bytes(failure_json(*pending))));
      first = parse_failure(now, nnodes_);
      if (!first) first = read_failure(*main_, akey("failed"));
    }
    if (own_first) main_->set(akey("failure/node" + std::to_string(node_rank_)), failure_json(*own_first));
    main_->set(akey("done/node" + std::to_string(node_rank_)), nlohmann::json{{"ok", ok}}.dump());
    // Per node: done (and how).
    std::map<int, std::optional<bool>> done;
    std::map<int, double> gone;  // elastic: nodes found silent, and for how long
    for (int n = 0; n < nnodes_; ++n) done[n] = std::nullopt;
    for (;;) {
      bool all = true;
      beat(*main_);
      for (int n = 0; n < nnodes_; ++n) {
        if (done[n] || gone.count(n)) continue;
        const std::string dk = akey("done/node" + std::to_string(n));
        if (main_->check({dk})) {
          const nlohmann::json j = nlohmann::json::parse(text(main_->get(dk)), nullptr, false);
          done[n] = j.is_object() && j.contains("ok") && j["ok"].is_boolean() && j["ok"].get<bool>();
          continue;
        }
        all = false;
        const std::string hk = hb_key(n);
        std::string hb = main_->check({hk}) ? text(main_->get(hk)) : std::string();
        auto& [last, since] = beats[static_cast<size_t>(n)];
        if (hb != last) {
          last = std::move(hb);
          since = Clock::now();
        }
      }
      if (all) {
        for (const auto& [n, quiet] : gone) {
          end.lost_nodes.push_back(n);
          end.lost_silent_s.push_back(quiet);
        }
        break;
      }
      if (!first) first = read_failure(*main_, akey("failed"));
      const auto now = Clock::now();
      const bool failure_known = !ok || first.has_value();
      bool give_up = failure_known && now - started >= failure_wait;
      for (int n = 0; n < nnodes_; ++n) {
        if (done[n] || gone.count(n)) continue;
        const auto quiet = now - beats[static_cast<size_t>(n)].second;
        if (quiet >= silent_after || std::count(already_silent.begin(), already_silent.end(), n)) {
          // Elastic: a silent node is lost, the others are still waited for; otherwise the job
          // ends, and no node is waited for any more.
          if (elastic_)
            gone[n] = std::chrono::duration<double>(quiet).count();
          else
            give_up = true;
        }
      }
      if (elastic_ && !give_up) {
        bool settled = true;
        for (int n = 0; n < nnodes_; ++n) settled = settled && (done[n] || gone.count(n));
        give_up = settled;
      }
      if (give_up) {
        for (int n = 0; n < nnodes_; ++n) {
          if (done[n]) continue;
          end.lost_nodes.push_back(n);
          end.lost_silent_s.push_back(gone.count(n) ? gone[n] : std::chrono::duration<double>(now - beats[static_cast<size_t>(n)].second).count());
        }
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
    if (node_rank_ < 0) return;  // elastic: never admitted
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
