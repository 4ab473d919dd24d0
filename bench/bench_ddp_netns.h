#pragma once
// The shaped link of bench_ddp's *-shaped rows: two network namespaces ("hosts" A and B) joined by a
// veth pair, each end given an address (10.232.S.1 in A, 10.232.S.2 in B) and a token-bucket
// filter on its egress,
//
//   tc qdisc add dev <veth> root tbf rate <RATE> burst <BURST> latency <LATENCY>
//
// on both ends, so each direction carries at most RATE (full duplex, as an Ethernet link). BURST is
// 1 ms of the rate, at least 32 KiB (at 1 Gbit/s: 125 KB; the bucket must hold a GSO super-packet of
// 64 KiB or tbf splits it, and 1 ms keeps bursts short against the rate); LATENCY 50 ms bounds the
// queue at RATE x 50 ms + BURST (6.4 MB at 1 Gbit/s), more than TCP keeps in flight here (the
// default socket buffers), so the shaper delays packets instead of dropping them: `tc -s` after the
// run (kept in the report) shows the drops, which should be 0. netem is not available in this kernel,
// so there is no added latency: the link is a bandwidth limit with the veth's own sub-millisecond
// delay.
//
// Names are unique per orchestrator pid (namespaces bench_ddp_<pid>_a / _b, interfaces bdv<pid>a /
// bdv<pid>b), so concurrent runs do not collide; the link is removed by the destructor, by
// remove_now() from a signal handler (async-signal-safe: fork + execv of prepared argument
// vectors), and namespaces left by an orchestrator that no longer exists (killed with SIGKILL) are
// removed the next time one starts. Deleting a namespace takes its veth end, and so the pair, with
// it. Needs root and iproute2's ip and tc; when that fails the caller gets the reason and skips the
// rows.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace bench_ddp {

inline constexpr const char* kIp = "/usr/sbin/ip";
inline constexpr const char* kTc = "/usr/sbin/tc";

// A tc rate ("1gbit", "500mbit", "10gbit", "100kbit", "2.5gbit", "1000000bit") in bits per second;
// nullopt for anything else (tc's byte units, kbps etc., are not accepted: too easy to misread).
inline std::optional<double> parse_rate_bits(const std::string& rate) {
  std::smatch m;
  if (!std::regex_match(rate, m, std::regex(R"(([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit))"))) return std::nullopt;
  const double v = std::stod(m[1].str());
  const std::string u = m[3].str();
  const double scale = u == "bit" ? 1 : u == "kbit" ? 1e3 : u == "mbit" ? 1e6 : u == "gbit" ? 1e9 : 1e12;
  if (!(v > 0)) return std::nullopt;
  return v * scale;
}

// Runs argv (no shell) with stdout and stderr captured; the exit status (-1: it could not run).
inline int run_argv(const std::vector<std::string>& argv, std::string* output = nullptr) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return -1;
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(pipefd[0]);
    close(pipefd[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(pipefd[1], 1);
    dup2(pipefd[1], 2);
    close(pipefd[0]);
    close(pipefd[1]);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  close(pipefd[1]);
  std::string out;
  char buf[4096];
  for (ssize_t k; (k = read(pipefd[0], buf, sizeof buf)) != 0;) {
    if (k < 0) {
      if (errno == EINTR) continue;
      break;
    }
    out.append(buf, static_cast<size_t>(k));
  }
  close(pipefd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class ShapedLink {
 public:
  // Builds the link; ok() says whether it worked, reason() why not (then nothing is left behind).
  explicit ShapedLink(std::string rate) : rate_(std::move(rate)) {
    const auto bits = parse_rate_bits(rate_);
    if (!bits) {
      reason_ = "--shaped " + rate_ + ": not a rate tc understands here (e.g. 1gbit, 500mbit, 10gbit)";
      return;
    }
    rate_bits_ = *bits;
    burst_bytes_ = std::max<int64_t>(32 * 1024, static_cast<int64_t>(std::llround(rate_bits_ / 8 * 1e-3)));
    if (geteuid() != 0) {
      reason_ = "network namespaces and tc need root (running as uid " + std::to_string(geteuid()) + ")";
      return;
    }
    for (const char* tool : {kIp, kTc})
      if (access(tool, X_OK) != 0) {
        reason_ = std::string(tool) + " is not installed (iproute2)";
        return;
      }
    remove_stale();
    const std::string pid = std::to_string(getpid());
    ns_[0] = "bench_ddp_" + pid + "_a";
    ns_[1] = "bench_ddp_" + pid + "_b";
    veth_[0] = "bdv" + pid + "a";  // at most 15 characters (IFNAMSIZ)
    veth_[1] = "bdv" + pid + "b";
    const int subnet = 1 + static_cast<int>(getpid() % 250);
    addr_[0] = "10.232." + std::to_string(subnet) + ".1";
    addr_[1] = "10.232." + std::to_string(subnet) + ".2";
    prepare_removal();
    const std::string burst = std::to_string(burst_bytes_) + "b";  // tc: "b" = bytes
    const std::vector<std::vector<std::string>> setup = {
        {kIp, "netns", "add", ns_[0]},
        {kIp, "netns", "add", ns_[1]},
        {kIp, "-n", ns_[0], "link", "add", veth_[0], "type", "veth", "peer", "name", veth_[1], "netns", ns_[1]},
        {kIp, "-n", ns_[0], "addr", "add", addr_[0] + "/24", "dev", veth_[0]},
        {kIp, "-n", ns_[1], "addr", "add", addr_[1] + "/24", "dev", veth_[1]},
        {kIp, "-n", ns_[0], "link", "set", veth_[0], "up"},
        {kIp, "-n", ns_[1], "link", "set", veth_[1], "up"},
        {kIp, "-n", ns_[0], "link", "set", "lo", "up"},
        {kIp, "-n", ns_[1], "link", "set", "lo", "up"},
        {kTc, "-n", ns_[0], "qdisc", "add", "dev", veth_[0], "root", "tbf", "rate", rate_, "burst", burst, "latency", latency_},
        {kTc, "-n", ns_[1], "qdisc", "add", "dev", veth_[1], "root", "tbf", "rate", rate_, "burst", burst, "latency", latency_},
    };
    for (const auto& cmd : setup) {
      std::string out, line;
      for (const auto& a : cmd) line += (line.empty() ? "" : " ") + a;
      commands_.push_back(line);
      if (run_argv(cmd, &out) != 0) {
        reason_ = "`" + line + "` failed: " + (out.empty() ? "(no output)" : out);
        remove();
        return;
      }
    }
    std::string mtu;
    if (run_argv({kIp, "-n", ns_[0], "-o", "link", "show", veth_[0]}, &mtu) == 0) {
      std::smatch m;
      if (std::regex_search(mtu, m, std::regex(R"(mtu ([0-9]+))"))) mtu_ = std::stoi(m[1].str());
    }
    ok_ = true;
  }
  ~ShapedLink() { remove(); }
  ShapedLink(const ShapedLink&) = delete;
  ShapedLink& operator=(const ShapedLink&) = delete;

  bool ok() const { return ok_; }
  const std::string& reason() const { return reason_; }
  const std::string& rate() const { return rate_; }
  double rate_bits() const { return rate_bits_; }
  double rate_bytes_per_s() const { return rate_bits_ / 8; }
  int64_t burst_bytes() const { return burst_bytes_; }
  const std::string& latency() const { return latency_; }
  int mtu() const { return mtu_; }
  const std::string& ns(int r) const { return ns_[r]; }
  const std::string& veth(int r) const { return veth_[r]; }
  const std::string& address(int r) const { return addr_[r]; }
  const std::vector<std::string>& commands() const { return commands_; }

  // `tc -s qdisc show` of both ends: bytes and packets sent, drops, overlimits (times the shaper
  // held a packet back).
  std::vector<std::string> qdisc_stats() const {
    std::vector<std::string> out;
    for (int r = 0; r < 2; ++r) {
      std::string s;
      run_argv({kTc, "-n", ns_[r], "-s", "qdisc", "show", "dev", veth_[r]}, &s);
      out.push_back(veth_[r] + " (" + ns_[r] + "): " + s);
    }
    return out;
  }

  // Removes both namespaces (and so the veth pair); safe to call twice.
  void remove() {
    if (removed_) return;
    removed_ = true;
    for (int r = 0; r < 2; ++r)
      if (!ns_[r].empty()) run_argv({kIp, "netns", "del", ns_[r]});
    if (active_ == this) active_ = nullptr;
  }

  // From a signal handler: async-signal-safe (fork, execv, waitpid on prepared vectors).
  static void remove_now() {
    ShapedLink* l = active_;
    if (!l || l->removed_) return;
    l->removed_ = true;
    for (int r = 0; r < 2; ++r) {
      const pid_t pid = fork();
      if (pid == 0) {
        execv(kIp, l->del_argv_[r].data());
        _exit(127);
      }
      if (pid > 0) waitpid(pid, nullptr, 0);
    }
  }

 private:
  void prepare_removal() {
    for (int r = 0; r < 2; ++r) {
      del_args_[r] = {kIp, "netns", "del", ns_[r]};
      del_argv_[r].clear();
      for (auto& a : del_args_[r]) del_argv_[r].push_back(a.data());
      del_argv_[r].push_back(nullptr);
    }
    active_ = this;
  }

  // Namespaces of an earlier bench_ddp whose process is gone (it was killed before it could clean up).
  static void remove_stale() {
    std::error_code ec;
    const std::regex name(R"(bench_ddp_([0-9]+)_[ab])");
    for (const auto& e : std::filesystem::directory_iterator("/run/netns", ec)) {
      std::smatch m;
      const std::string n = e.path().filename().string();
      if (!std::regex_match(n, m, name)) continue;
      const pid_t pid = static_cast<pid_t>(std::stol(m[1].str()));
      if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
      std::fprintf(stderr, "bench_ddp: removing the stale namespace %s (its bench_ddp, pid %d, is gone)\n", n.c_str(), static_cast<int>(pid));
      run_argv({kIp, "netns", "del", n});
    }
  }

  std::string rate_, reason_;
  std::string latency_ = "50ms";
  double rate_bits_ = 0;
  int64_t burst_bytes_ = 0;
  int mtu_ = 0;
  std::string ns_[2], veth_[2], addr_[2];
  std::vector<std::string> commands_;
  std::vector<std::string> del_args_[2];
  std::vector<char*> del_argv_[2];
  bool ok_ = false;
  volatile bool removed_ = false;
  static inline ShapedLink* volatile active_ = nullptr;
};

}  // namespace bench_ddp
