#include "options.h"

#include <cmath>
#include <cstdio>
#include <CLI/CLI.hpp>
#include "exit_codes.h"

namespace dp::run {
namespace {

const char* kDescription =
    "dp-run: starts a data-parallel job's worker processes and watches them (PyTorch's torchrun, for dparallel).\n"
    "\n"
    "  dp-run --nproc-per-node N [options] -- PROGRAM ARGS...\n"
    "  dp-run --nproc-per-node N --nnodes M --node-rank K --master-addr HOST [--master-port PORT] -- PROGRAM ARGS...\n"
    "\n"
    "Each worker gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,\n"
    "DP_STORE_HOSTED=1, DP_STORE_PREFIX, DP_RESTART_COUNT, DP_RUN_ID, DP_ERROR_FILE, and its share of the cores\n"
    "(DP_CPU_DEVICES, OPENBLAS_NUM_THREADS, OMP_NUM_THREADS: cores / N, unless set already). One node: dp-run\n"
    "hosts the store on a free port of 127.0.0.1. Several: node 0's dp-run hosts it on --master-port.\n"
    "When a worker fails, dp-run stops the others (SIGTERM, SIGKILL after --grace), prints one line per\n"
    "failed rank with the error the worker recorded, and exits 1 (or restarts them all: --max-restarts).\n"
    "\n"
    "Exit status: 0 every worker exited with 0; 1 a worker failed; 2 bad arguments; 3 could not start\n"
    "(the store's port is taken, the nodes did not meet, the program cannot run); 130/143/129 stopped by\n"
    "SIGINT/SIGTERM/SIGHUP (passed on to the workers first).";

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
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    usage("--node-rank " + std::to_string(o.node_rank) + " is not in [0, " + std::to_string(o.nnodes) + ") (--nnodes " + std::to_string(o.nnodes) +
          ")");
  if (o.multi_node() && o.master_addr.empty())
    usage("--nnodes " + std::to_string(o.nnodes) + " needs --master-addr: the address of node 0, whose dp-run hosts the store");
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
  (void)app;
}

}  // namespace

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
  app.add_option("--nnodes", o.nnodes, "nodes (machines) in the job, each running its own dp-run")->default_val(o.nnodes);
  app.add_option("--node-rank", o.node_rank, "this node's number in [0, nnodes); node 0 hosts the store")->default_val(o.node_rank);
  app.add_option("--master-addr", o.master_addr, "node 0's address (one node: 127.0.0.1)");
  app.add_option("--master-port", o.master_port, "the store's port (one node: a free port; several: 29500)");
  app.add_option("--max-restarts", o.max_restarts, "restart every worker this many times after a failure")->default_val(o.max_restarts);
  app.add_option("--timeout", o.timeout_s, "collective and rendezvous timeout of the workers in seconds (DP_DIST_TIMEOUT)");
  app.add_option("--grace", o.grace_s, "seconds between SIGTERM and SIGKILL when stopping workers")->default_val(o.grace_s);
  app.add_option("--rdzv-timeout", o.rdzv_timeout_s, "seconds the nodes wait for each other before each attempt")->default_val(o.rdzv_timeout_s);
  app.add_option("--run-id", o.run_id, "the job's name in the store and in DP_RUN_ID (default: generated; node 0's wins)");
  app.add_option("--timeline", o.timeline, "write a Chrome trace of every rank of this node to this file at the end");
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
    if (o.multi_node() && o.master_port == -1) o.master_port = 29500;
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
