// dp-run against strangers, careless operators and a flaky network (docs/distributed.md,
// "Security"): a two-node job finishes while a stranger connects, reads, writes, floods and parks
// waits (all refused: no token); the store and the workers listen on the given address only
// (/proc/net/tcp*); nodes started with different --nnodes or --timeout are told at once; SIGHUP stops
// the job as SIGTERM does; another node's junk text is printed escaped; and, as two machines in
// network namespaces (root), a 10 s cut of the link is ridden out by a job with a 60 s timeout.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <atomic>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>
#include "dp/distributed/store.h"
#include "support/two_hosts.h"
#include "tools/test_dp_run_util.h"

namespace {

using namespace dp_run_test;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kRun{60000};

std::vector<std::string> node_options(int node, int nnodes, int port, std::vector<std::string> more = {}) {
  std::vector<std::string> o{
      "--nnodes",           std::to_string(nnodes), "--node-rank", std::to_string(node), "--master-addr", "127.0.0.1", "--master-port",
      std::to_string(port), "--nproc-per-node",     "1",           "--token-file",       token_file()};
  o.insert(o.end(), more.begin(), more.end());
  return o;
}

// A raw connection to 127.0.0.1:port that sends bytes and never reads (nor authenticates).
class Stranger {
 public:
  explicit Stranger(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~Stranger() {
    if (fd_ >= 0) ::close(fd_);
  }
  void send(const std::string& bytes) {
    if (fd_ >= 0) [[maybe_unused]]
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }

 private:
  int fd_ = -1;
};

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}
std::string field(const std::string& b) { return le32(static_cast<uint32_t>(b.size())) + b; }
std::string frame(uint8_t type, const std::string& body) {
  return std::string(1, static_cast<char>(type)) + le32(static_cast<uint32_t>(body.size())) + body;
}

// The attack, and more, while a two-node job runs: a stranger without the token reads,
// writes (a heartbeat key to a non-number, a forged failure), parks waits, floods connections; a
// client with another job's token is refused. The job ends as if nobody had come.
TEST(DpRunSecurity, AStrangerCannotReadWriteOrStopATwoNodeJob) {
  DP_RUN_REQUIRE_BINARY();
  const int port = free_port();
  const std::vector<std::string> worker{"--steps", "60", "--step-ms", "40"};
  auto n0 = start_dp_run(job(node_options(0, 2, port, {"--timeout", "20"}), worker));
  // The stranger starts before node 1 does: node 1's dp-run and both workers connect under attack.
  std::atomic<bool> stop{false};
  std::atomic<int> connections{0};
  std::thread attacker([&] {
    std::vector<std::unique_ptr<Stranger>> held;
    while (!stop) {
      // Requests without the handshake (each closes its connection at once).
      for (const std::string& request :
           {frame(2, field("dp-run/x/hb/node1") + field("not a number")),
            frame(5, field("dp-run/x/a0/failed") + field("") + field("{\"node\":1,\"line\":\"\\u001b[2Jforged\"}")),
            frame(3, field("dp-run/config") + std::string(8, '\x10')), frame(7, le32(1) + field("never") + std::string(8, '\x7f'))}) {
        Stranger s(port);
        s.send(request);
        ++connections;
      }
      // Connections held open, never authenticating (a flood).
      for (int i = 0; i < 20 && held.size() < 400; ++i) {
        held.push_back(std::make_unique<Stranger>(port));
        ++connections;
      }
      // Another job's token.
      try {
        dp::distributed::TCPStoreOptions o;
        o.timeout = milliseconds(500);
        o.token = "another-jobs-token-0123456789abcdef";
        dp::distributed::TCPStore wrong("127.0.0.1", static_cast<uint16_t>(port), o);
        wrong.set("dp-run/planted", "1");
      } catch (const std::exception&) {
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
  auto n1 = start_dp_run(job(node_options(1, 2, port, {"--timeout", "20"}), worker));
  const auto s0 = n0->wait_exit(kRun), s1 = n1->wait_exit(kRun);
  stop = true;
  attacker.join();
  ASSERT_TRUE(s0.has_value() && s1.has_value()) << n0->output() << n1->output();
  EXPECT_EQ(*s0, 0) << n0->output();
  EXPECT_EQ(*s1, 0) << n1->output();
  EXPECT_TRUE(contains(n0->output(), "dp-run: all 2 workers on 2 nodes exited with status 0")) << n0->output();
  std::printf("[ measured ] the job finished while a stranger made %d connections\n", connections.load());
  // Node 0's dp-run logged the refusals, once per reason for the address, without the token.
  const std::string out = n0->output();
  EXPECT_TRUE(contains(out, "dp-run: store: refused a client from 127.0.0.1: it sent a 'set' request before authenticating")) << out;
  EXPECT_TRUE(contains(out, "dp-run: store: refused a client from 127.0.0.1: wrong token")) << out;
  EXPECT_EQ(lines_starting(out, "dp-run: store: refused a client from 127.0.0.1: wrong token").size(), 1u) << out;
  EXPECT_FALSE(contains(out + n1->output(), "dp-run-test-token")) << "the token was printed";
}

// Socket inodes of a process's descriptors.
std::set<std::string> socket_inodes(pid_t pid) {
  std::set<std::string> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      char target[256] = {};
      if (::readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1) > 0 && std::strncmp(target, "socket:[", 8) == 0)
        out.insert(std::string(target + 8, std::strchr(target, ']')));
    }
    ::closedir(d);
  }
  return out;
}

// The TCP sockets the processes own, from /proc/<pid>/net/tcp and tcp6 (the processes' network
// namespace): each one's state ("0A" is LISTEN, "01" ESTABLISHED) and local address
// ("127.0.0.1:41235", "[::]:29500").
struct Socket {
  std::string state, local;
};
std::vector<Socket> sockets(const std::vector<pid_t>& pids) {
  std::set<std::string> inodes;
  for (pid_t p : pids)
    for (const auto& i : socket_inodes(p)) inodes.insert(i);
  std::vector<Socket> out;
  for (const char* table : {"tcp", "tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pids.front()) + "/net/" + table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (!inodes.count(inode)) continue;
      const std::string hex = local.substr(0, local.find(':'));
      const int port = std::stoi(local.substr(local.find(':') + 1), nullptr, 16);
      char text[INET6_ADDRSTRLEN] = {};
      if (hex.size() == 8) {
        in_addr a{};
        a.s_addr = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));  // the kernel prints the address as a host-order word
        ::inet_ntop(AF_INET, &a, text, sizeof text);
        out.push_back({state, std::string(text) + ":" + std::to_string(port)});
      } else {
        in6_addr a{};
        for (int w = 0; w < 4; ++w) {
          const uint32_t word = static_cast<uint32_t>(std::stoul(hex.substr(static_cast<size_t>(8 * w), 8), nullptr, 16));
          std::memcpy(reinterpret_cast<char*>(&a) + 4 * w, &word, 4);
        }
        ::inet_ntop(AF_INET6, &a, text, sizeof text);
        out.push_back({state, "[" + std::string(text) + "]:" + std::to_string(port)});
      }
    }
  }
  return out;
}

// Every TCP socket of the processes (the store's listener, the store's clients, Gloo's pairs) is on
// `address`; at least one listens (the store).
void expect_all_on(const std::vector<pid_t>& pids, const std::string& address) {
  const std::vector<Socket> all = sockets(pids);
  int listening = 0;
  for (const Socket& s : all) {
    EXPECT_EQ(s.local.rfind(address + ":", 0), 0u) << s.local << " (state " << s.state << ")";
    if (s.state == "0A") ++listening;
  }
  EXPECT_GE(listening, 1);
  EXPECT_GE(all.size(), 4u);  // at least the store, dp-run's clients and the workers' connections
  std::printf("[ measured ] %zu sockets of the job's processes, %d listening, all on %s\n", all.size(), listening, address.c_str());
}

// The pids of a process's children.
std::vector<pid_t> children(pid_t parent) {
  std::vector<pid_t> out;
  std::ifstream in("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) + "/children");
  for (pid_t p; in >> p;) out.push_back(p);
  return out;
}

// One node on loopback: dp-run's store, its clients and every worker's Gloo connections are on
// 127.0.0.1, nothing on a wildcard address.
TEST(DpRunSecurity, TheStoreAndTheWorkersListenOnTheGivenAddressOnly) {
  DP_RUN_REQUIRE_BINARY();
  auto run = start_dp_run(job({"--nproc-per-node", "2", "--timeout", "20"}, {"--steps", "100000", "--step-ms", "20"}));
  ASSERT_TRUE(run->wait_for_line("STEP 2 ", kRun)) << run->output();
  std::vector<pid_t> pids{run->pid()};
  for (pid_t c : children(run->pid())) pids.push_back(c);
  ASSERT_EQ(pids.size(), 3u) << run->output();
  expect_all_on(pids, "127.0.0.1");
  run->signal(SIGTERM);
  EXPECT_EQ(run->wait_exit(kRun), 143) << run->output();
}

TEST(DpRunSecurity, NodesGivenDifferentNnodesOrTimeoutsAreToldAtOnce) {
  DP_RUN_REQUIRE_BINARY();
  const int port = free_port();
  auto n0 = start_dp_run(node_options(0, 2, port, {"--", "/bin/sleep", "30"}));
  auto n1 = start_dp_run(node_options(1, 3, port, {"--", "/bin/sleep", "30"}));
  ASSERT_EQ(n1->wait_exit(kRun), 3) << n1->output();
  const int64_t refused_at = mono_ms();
  const std::string why = "node 1 was started with --nnodes 3, node 0 with --nnodes 2: every node must be given the same --nnodes";
  EXPECT_TRUE(contains(n1->output(), "dp-run: " + why)) << n1->output();
  // Node 0 says it too, at once (it waited for node 1 until --rdzv-timeout, 300 s, before).
  ASSERT_EQ(n0->wait_exit(milliseconds(10000)), 3) << n0->output();
  EXPECT_LT(mono_ms() - refused_at, 2000);
  EXPECT_TRUE(contains(n0->output(), "dp-run: " + why)) << n0->output();

  const int port2 = free_port();
  auto t0 = start_dp_run(node_options(0, 2, port2, {"--timeout", "20", "--", "/bin/sleep", "30"}));
  auto t1 = start_dp_run(node_options(1, 2, port2, {"--", "/bin/sleep", "30"}));
  ASSERT_EQ(t1->wait_exit(kRun), 3) << t1->output();
  ASSERT_EQ(t0->wait_exit(milliseconds(10000)), 3) << t0->output();
  for (auto* n : {t0.get(), t1.get()})
    EXPECT_TRUE(
        contains(n->output(), "node 1 was started with no --timeout (60 s), node 0 with --timeout 20: every node must be given the same --timeout"))
        << n->output();
}

// SIGHUP (the operator's terminal or SSH session closed) stops the job as SIGTERM does: the workers
// get SIGTERM (they checkpoint and exit), and dp-run exits 129.
TEST(DpRunSecurity, HangupStopsTheJobAsTermDoes) {
  DP_RUN_REQUIRE_BINARY();
  auto run = start_dp_run(job({"--nproc-per-node", "2", "--timeout", "20"}, {"--steps", "100000", "--step-ms", "20", "--on-signal"}));
  ASSERT_FALSE(wait_ready(*run, 2, kRun).empty()) << run->output();
  run->signal(SIGHUP);
  EXPECT_EQ(run->wait_exit(kRun), 129) << run->output();
  EXPECT_TRUE(contains(run->output(), "dp-run: got SIGHUP: passing SIGTERM to the 2 running workers")) << run->output();
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(contains(run->output(), "STOPPED rank=" + std::to_string(r) + " signal=15")) << run->output();
}

// A worker on node 1 fails with an error whose text holds terminal escapes, a C1 control, a bell,
// a newline with a forged dp-run line, and bytes that are not UTF-8: every dp-run line that carries
// it (node 1's report, node 0's "node 1 failed", both summaries) has it escaped, on one line.
TEST(DpRunSecurity, JunkTextFromAnotherNodeIsPrintedEscaped) {
  DP_RUN_REQUIRE_BINARY();
  const int port = free_port();
  const std::vector<std::string> worker{"--steps", "100", "--fail-rank", "1", "--fail-at", "2", "--fail-how", "junk"};
  auto n0 = start_dp_run(job(node_options(0, 2, port, {"--timeout", "20"}), worker));
  auto n1 = start_dp_run(job(node_options(1, 2, port, {"--timeout", "20"}), worker));
  ASSERT_EQ(n0->wait_exit(kRun), 1) << n0->output() << n1->output();
  ASSERT_EQ(n1->wait_exit(kRun), 1) << n0->output() << n1->output();
  // (The worker's error file is JSON: its bytes that are not UTF-8 became U+FFFD there; dp-run's
  // report puts a message on one line, "\r" as a space and "\n" as " | ", before escaping.)
  const std::string escaped = "\\x1b[2J\\x1b[31mred\\x1b[0m \\xc2\\x9b6n bell\\x07  | dp-run: all 9 workers exited with status 0 (forged)";
  for (auto* n : {n0.get(), n1.get()}) {
    std::vector<std::string> mine = lines_starting(n->output(), "dp-run: ");
    int carrying = 0;
    for (const std::string& line : mine) {
      EXPECT_EQ(line.find_first_of("\x1b\r\a\x7f"), std::string::npos) << line;
      EXPECT_EQ(line.find("\xc2\x9b"), std::string::npos) << line;
      if (contains(line, escaped)) ++carrying;
    }
    // Node 1: its report and its summary; node 0: its summary (and "node 1 failed", unless its own
    // rank lost its peer first).
    EXPECT_GE(carrying, n == n1.get() ? 2 : 1) << n->output();
    EXPECT_EQ(lines_starting(n->output(), "dp-run: all 9 workers").size(), 0u) << n->output();
  }
  EXPECT_TRUE(contains(n0->output(), "first failure: rank 1 (node 1, local 0, pid ")) << n0->output();
}

// ---- two machines in network namespaces (root) -------------------------------------------

std::unique_ptr<WorkerProcess> dp_run_on(const dp::test::TwoHosts& hosts, int node, int port, const std::vector<std::string>& options,
                                         const std::vector<std::string>& worker_args) {
  std::vector<std::string> args{
      "netns",          "exec",          hosts.ns(node),       kDpRun,         "--nnodes",  "2", "--node-rank", std::to_string(node), "--master-addr",
      hosts.address(0), "--master-port", std::to_string(port), "--token-file", token_file()};
  args.insert(args.end(), options.begin(), options.end());
  args.push_back("--");
  args.push_back(kWorker);
  args.insert(args.end(), worker_args.begin(), worker_args.end());
  for (const char* name :
       {"DP_CPU_DEVICES", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "DP_TIMELINE", "DP_DIST_TIMEOUT", "RANK", "WORLD_SIZE", "DP_STORE_TOKEN"})
    ::unsetenv(name);
  return std::make_unique<WorkerProcess>("/usr/sbin/ip", args, clean_env());
}

#define REQUIRE_TWO_HOSTS(hosts) \
  if (!(hosts).ok()) GTEST_SKIP() << (hosts).error()

// Node 0 in its own machine: the store and every worker's listener on --master-addr only (not on a
// wildcard, not on loopback); then a 10 s cut of the link, with the job's 60 s timeout, is ridden
// out: the agents reconnect, the workers' connections carry on, and the job ends with status 0.
TEST(DpRunTwoMachinesSecurity, ListenersOnTheMasterAddressOnlyAndATenSecondCutIsRiddenOut) {
  DP_RUN_REQUIRE_BINARY();
  dp::test::TwoHosts hosts("ds", 233, 0);
  REQUIRE_TWO_HOSTS(hosts);
  const int port = 29400 + ::getpid() % 500;
  const std::vector<std::string> options{"--nproc-per-node", "1", "--timeout", "60"};
  const std::vector<std::string> worker{"--steps", "400", "--step-ms", "20"};
  auto n0 = dp_run_on(hosts, 0, port, options, worker);
  auto n1 = dp_run_on(hosts, 1, port, options, worker);
  ASSERT_TRUE(n0->wait_for_line("STEP 3 ", kRun)) << n0->output() << n1->output();
  // `ip netns exec` execs dp-run: the pid is dp-run's.
  std::vector<pid_t> pids{n0->pid()};
  for (pid_t c : children(n0->pid())) pids.push_back(c);
  expect_all_on(pids, hosts.address(0));

  hosts.partition();
  const int64_t cut_at = mono_ms();
  std::this_thread::sleep_for(std::chrono::seconds(10));
  hosts.heal();
  const auto s0 = n0->wait_exit(milliseconds(90000)), s1 = n1->wait_exit(milliseconds(90000));
  ASSERT_TRUE(s0.has_value() && s1.has_value()) << n0->output() << n1->output();
  EXPECT_EQ(*s0, 0) << n0->output() << n1->output();
  EXPECT_EQ(*s1, 0) << n0->output() << n1->output();
  EXPECT_TRUE(contains(n0->output(), "dp-run: all 2 workers on 2 nodes exited with status 0")) << n0->output();
  std::printf("[ measured ] a 10 s cut ridden out: the job ended %lld ms after the cut began\n", static_cast<long long>(mono_ms() - cut_at));
}

}  // namespace
