#include "options.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <CLI/CLI.hpp>
#include "exit_codes.h"

namespace dp::run {
namespace {

const char* kDescription =
    "dp-run: starts a data-parallel job's worker processes and watches them (PyTorch's torchrun, for dparallel).\n"
    "\n"
    "  dp-run --nproc-per-node N [options] -- PROGRAM ARGS...\n"
    "  dp-run --nproc-per-node N --nnodes M --node-rank K --master-addr HOST [--master-port PORT] -- PROGRAM ARGS...\n"
    "  dp-run --nproc-per-node N --nnodes MIN:MAX [--node-rank 0] --master-addr HOST --max-restarts R -- PROGRAM ARGS...\n"
    "\n"
    "Each worker gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,\n"
    "DP_STORE_HOSTED=1, DP_STORE_PREFIX, DP_RESTART_COUNT, DP_RUN_ID, DP_ERROR_FILE, and its share of the cores\n"
    "(DP_CPU_DEVICES, OPENBLAS_NUM_THREADS, OMP_NUM_THREADS: cores / N, unless set already). One node: dp-run\n"
    "hosts the store on a free port of 127.0.0.1. Several: node 0's dp-run hosts it on --master-port.\n"
    "When a worker fails, dp-run stops the others (SIGTERM, SIGKILL after --grace), prints one line per\n"
    "failed rank with the error the worker recorded, and exits 1 (or restarts them all: --max-restarts).\n"
    "\n"
    "The store is authenticated: every client proves it holds the job's token. One node: dp-run makes a token and\n"
    "gives it to its workers (DP_STORE_TOKEN, in their environment only). Several: give every node the same token,\n"
    "in a file of mode 0600 (--token-file; make one with: (umask 077; openssl rand -hex 32 > job.token)) or in\n"
    "DP_STORE_TOKEN. The store listens on --master-addr only (--store-bind to choose another address).\n"
    "\n"
    "Exit status: 0 every worker exited with 0; 1 a worker failed; 2 bad arguments; 3 could not start\n"
    "(the store's port is taken, the nodes did not meet, the program cannot run); 130/143/129 stopped by\n"
    "SIGINT/SIGTERM/SIGHUP (passed on to the workers first).\n"
    "\n"
    "Elastic (--nnodes MIN:MAX, MIN < MAX): the job starts once MIN nodes joined (and --last-call passed, or MAX\n"
    "joined); ranks follow the order of joining. A node lost (dead, silent for --node-timeout, or its workers\n"
    "failed) restarts the others with the new world size while MIN remain and --max-restarts allows; a node that\n"
    "comes while the job runs is admitted by a restart that does not count against --max-restarts. Node 0\n"
    "(--node-rank 0, on one node only; the others leave --node-rank out) hosts the store: its loss ends the job.";

[[noreturn]] void usage(const std::string& message) { throw CLI::ValidationError(message); }

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void check(const Options& o, const CLI::App& app) {
  if (o.command.empty()) usage("no program to run: give it after the options, e.g. dp-run --nproc-per-node 2 -- ./train --lr 0.1");
  if (o.nproc_per_node < 1 || o.nproc_per_node > 1024) usage("--nproc-per-node " + std::to_string(o.nproc_per_node) + " is not in [1, 1024]");
  if (o.nnodes < 1 || o.nnodes > 4096) usage("--nnodes " + std::to_string(o.nnodes) + " is not in [1, 4096]");
  if (o.elastic()) {
    if (!(std::isfinite(o.last_call_s) && o.last_call_s >= 0 && o.last_call_s <= 3600))
      usage("--last-call " + num(o.last_call_s) + " is not in [0, 3600] seconds");
  } else if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    usage("--node-rank " + std::to_string(o.node_rank) + " is not in [0, " + std::to_string(o.nnodes) + ") (--nnodes " + std::to_string(o.nnodes) +
          ")");
  if (o.multi_node() && o.master_addr.empty())
    usage("--nnodes " + std::to_string(o.nnodes) + " needs --master-addr: the address of node 0, whose dp-run hosts the store");
  if (o.node_timeout_s && !(std::isfinite(*o.node_timeout_s) && *o.node_timeout_s >= 0.1 && *o.node_timeout_s <= 1e6))
    usage("--node-timeout " + num(*o.node_timeout_s) + " is not a number of seconds in [0.1, 1e6]");
  if (o.master_port != -1 && (o.master_port < 1 || o.master_port > 65535))
    usage("--master-port " + std::to_string(o.master_port) + " is not a port in [1, 65535]");
  if (o.max_restarts < 0) usage("--max-restarts " + std::to_string(o.max_restarts) + " is negative");
  if (o.timeout_s && !(std::isfinite(*o.timeout_s) && *o.timeout_s >= 0.001 && *o.timeout_s <= 1e7))
    usage("--timeout " + num(*o.timeout_s) + " is not a number of seconds in [0.001, 1e7]");
  if (!(std::isfinite(o.grace_s) && o.grace_s >= 0 && o.grace_s <= 3600)) usage("--grace " + num(o.grace_s) + " is not in [0, 3600] seconds");
  if (!(std::isfinite(o.rdzv_timeout_s) && o.rdzv_timeout_s > 0 && o.rdzv_timeout_s <= 1e6))
    usage("--rdzv-timeout " + num(o.rdzv_timeout_s) + " is not a positive number of seconds");
  if (!o.run_id.empty() && !valid_run_id(o.run_id)) usage("--run-id '" + o.run_id + "' is not 1-64 characters of letters, digits, '.', '_' and '-'");
  if (!o.timeline.empty() && o.timeline.back() == '/') usage("--timeline '" + o.timeline + "' is a directory, not a file");
  if (o.token_file.empty() && o.multi_node()) {
    const char* env = std::getenv("DP_STORE_TOKEN");
    if (env == nullptr || *env == '\0')
      usage("--nnodes " + std::to_string(o.nnodes) +
            " needs the job's store token on every node: --token-file FILE (the same contents on every node, mode 0600; make one with "
            "(umask 077; openssl rand -hex 32 > job.token)) or DP_STORE_TOKEN in dp-run's environment");
  }
  (void)app;
}

// --nnodes N or MIN:MAX (torchrun's form): sets nnodes_min and nnodes, or says what is wrong.
void parse_nnodes(const std::string& text, Options& o) {
  auto count = [&](const std::string& part, const char* what) {
    const bool digits = !part.empty() && part.size() <= 9 && part.find_first_not_of("0123456789") == std::string::npos;
    if (!digits)
      usage("--nnodes '" + text + "': " + what + " '" + part + "' is not a number (give a node count N, or MIN:MAX for an elastic job, e.g. 2:4)");
    return std::stoi(part);
  };
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    o.nnodes = o.nnodes_min = count(text, "the node count");
    return;
  }
  o.nnodes_min = count(text.substr(0, colon), "MIN");
  o.nnodes = count(text.substr(colon + 1), "MAX");
  if (o.nnodes_min < 1) usage("--nnodes '" + text + "': MIN " + std::to_string(o.nnodes_min) + " is less than 1");
  if (o.nnodes_min > o.nnodes)
    usage("--nnodes '" + text + "': MIN " + std::to_string(o.nnodes_min) + " is greater than MAX " + std::to_string(o.nnodes) +
          " (MIN:MAX: the job starts with at least MIN nodes and admits up to MAX)");
  if (o.nnodes > 4096) usage("--nnodes '" + text + "': MAX " + std::to_string(o.nnodes) + " is not in [1, 4096]");
}

}  // namespace

namespace {

// "8M", "1G", "4096", "2.5" (seconds): a positive number with an optional binary suffix.
bool parse_amount(const std::string& text, bool seconds, double* out) {
  if (text.empty()) return false;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    return false;
  }
  std::string suffix = text.substr(used);
  double scale = 1;
  if (!seconds && !suffix.empty()) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0])));
    if (c == 'K')
      scale = 1024.0;
    else if (c == 'M')
      scale = 1024.0 * 1024;
    else if (c == 'G')
      scale = 1024.0 * 1024 * 1024;
    else
      return false;
    suffix = suffix.substr(1);
    if (suffix == "iB" || suffix == "B" || suffix == "i") suffix.clear();
  }
  if (!suffix.empty() || !std::isfinite(v) || v <= 0) return false;
  *out = v * scale;
  return *out <= 1e15;
}

}  // namespace

bool apply_store_limit(const std::string& spec, dp::distributed::TCPStoreServerOptions& limits, std::string* error) {
  const size_t eq = spec.find('=');
  const std::string name = spec.substr(0, eq);
  const std::string value = eq == std::string::npos ? std::string() : spec.substr(eq + 1);
  struct Limit {
    const char* name;
    size_t* field;
    size_t max;
  };
  const Limit sizes[] = {
      {"key-bytes", &limits.max_key_bytes, size_t{64} << 10},
      {"value-bytes", &limits.max_value_bytes, size_t{64} << 20},
      {"keys-per-request", &limits.max_keys_per_request, size_t{1} << 31},
      {"total-bytes", &limits.max_total_bytes, size_t{1} << 50},
      {"parked-keys", &limits.max_parked_keys, size_t{1} << 40},
      {"connections", &limits.max_connections, size_t{1} << 24},
      {"unauthenticated", &limits.max_unauthenticated, size_t{1} << 24},
  };
  const std::string known = "key-bytes, value-bytes, keys-per-request, total-bytes, parked-keys, connections, unauthenticated, handshake-timeout";
  double v = 0;
  if (name == "handshake-timeout") {
    if (!parse_amount(value, true, &v) || v < 0.001 || v > 3600) {
      *error = "--store-limit handshake-timeout=" + value + ": not a number of seconds in [0.001, 3600]";
      return false;
    }
    limits.handshake_timeout = std::chrono::milliseconds(static_cast<int64_t>(v * 1000));
    return true;
  }
  for (const Limit& l : sizes) {
    if (name != l.name) continue;
    if (!parse_amount(value, false, &v) || v < 1 || v > static_cast<double>(l.max)) {
      *error = "--store-limit " + name + "=" + value + ": not a number in [1, " + std::to_string(l.max) + "] (K, M, G: binary multiples)";
      return false;
    }
    *l.field = static_cast<size_t>(v);
    return true;
  }
  *error = "--store-limit '" + spec + "': not NAME=VALUE with NAME one of " + known;
  return false;
}

bool valid_run_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

ParseResult parse_args(int argc, char** argv) {
  CLI::App app(kDescription, "dp-run");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->column_width(30);
  // PROGRAM and its arguments: everything from the first positional on (or after "--") is theirs.
  app.prefix_command();
  Options o;
  app.add_option("--nproc-per-node", o.nproc_per_node, "worker processes on this node")->default_val(o.nproc_per_node);
  std::string nnodes_text = "1";
  app.add_option("--nnodes", nnodes_text, "nodes (machines) in the job, each running its own dp-run; MIN:MAX: elastic")->default_val("1");
  auto* node_rank_opt =
      app.add_option("--node-rank", o.node_rank, "this node's number in [0, nnodes); node 0 hosts the store (elastic: 0 or left out)")
          ->default_val(o.node_rank);
  app.add_option("--master-addr", o.master_addr, "node 0's address (one node: 127.0.0.1)");
  app.add_option("--master-port", o.master_port, "the store's port (one node: a free port; several: 29500)");
  app.add_option("--max-restarts", o.max_restarts, "restart every worker this many times after a failure")->default_val(o.max_restarts);
  app.add_option("--timeout", o.timeout_s, "collective and rendezvous timeout of the workers in seconds (DP_DIST_TIMEOUT)");
  app.add_option("--grace", o.grace_s, "seconds between SIGTERM and SIGKILL when stopping workers")->default_val(o.grace_s);
  app.add_option("--rdzv-timeout", o.rdzv_timeout_s, "seconds the nodes wait for each other before each attempt")->default_val(o.rdzv_timeout_s);
  app.add_option("--last-call", o.last_call_s, "elastic: seconds node 0 waits for more nodes once MIN joined")->default_val(o.last_call_s);
  app.add_option("--node-timeout", o.node_timeout_s, "seconds a node's heartbeat may stand still before it is lost (default: --timeout + 2, >= 15)");
  app.add_option("--run-id", o.run_id, "the job's name in the store and in DP_RUN_ID (default: generated; node 0's wins)");
  app.add_option("--timeline", o.timeline, "write a Chrome trace of every rank of this node to this file at the end");
  app.add_option("--token-file", o.token_file, "the job's store token, in a file of mode 0600 (several nodes: the same on every node)");
  app.add_option("--store-bind", o.store_bind, "the address the store listens on (default: --master-addr; 0.0.0.0 = every interface)");
  std::vector<std::string> limit_specs;
  app.add_option("--store-limit", limit_specs,
                 "a limit of the store: NAME=VALUE, NAME one of key-bytes, value-bytes, keys-per-request, total-bytes, parked-keys, "
                 "connections, unauthenticated, handshake-timeout (seconds)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("-q,--quiet", o.quiet, "print only failures");

  ParseResult result;
  try {
    app.parse(argc, argv);
    o.command = app.remaining();
    if (!o.command.empty() && o.command.front() == "--") {
      o.command.erase(o.command.begin());
    } else if (!o.command.empty() && o.command.front().size() > 1 && o.command.front()[0] == '-') {
      // Not ours, and not after "--": a mistyped option rather than a program named "-x".
      usage("unknown option " + o.command.front() + " (the program and its arguments go after \"--\")");
    }
    parse_nnodes(nnodes_text, o);
    if (o.elastic()) {
      // Node ranks are assigned at the rendezvous, in the order the nodes join: only node 0, the
      // store's host, is named (it must exist before the others can join).
      if (node_rank_opt->count() > 0 && o.node_rank != 0)
        usage("--node-rank " + std::to_string(o.node_rank) + " with --nnodes " + nnodes_text +
              " (elastic): node ranks are assigned at the rendezvous, in the order the nodes join; give --node-rank 0 to the one node "
              "that hosts the store and leave --node-rank out on the others");
      if (node_rank_opt->count() == 0) o.node_rank = -1;
    }
    if (o.multi_node() && o.master_port == -1) o.master_port = 29500;
    for (const std::string& spec : limit_specs) {
      std::string error;
      if (!apply_store_limit(spec, o.store_limits, &error)) usage(error);
    }
    check(o, app);
  } catch (const CLI::Success& e) {  // --help
    result.exit_code = app.exit(e);
    return result;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "dp-run: error: %s\nRun 'dp-run --help' to see the options.\n", e.what());
    result.exit_code = kExitBadArguments;
    return result;
  }
  result.options = std::move(o);
  return result;
}

}  // namespace dp::run
