#pragma once
// Two "machines" on one host for multi-machine tests: two network namespaces joined by a veth pair,
// addresses 10.<octet>.<s>.1 and .2 (s from the pid and instance, so concurrent tests do not
// collide), loopback up in each. Needs root and iproute2: when they are missing or a step fails,
// ok() is false and error() says why (tests skip with it). The destructor removes both namespaces
// (and with them the veth pair), whatever happened.
#include <unistd.h>
#include <string>
#include <vector>
#include "support/run_command.h"

namespace dp::test {

class TwoHosts {
 public:
  // name_prefix: 2-3 characters that set these namespaces apart from other tests' (interface names
  // are limited to 15 characters).
  TwoHosts(const std::string& name_prefix, int octet, int instance) {
    const std::string tag = std::to_string(::getpid() % 100000) + "_" + std::to_string(instance);
    ns_[0] = name_prefix + "A" + tag;
    ns_[1] = name_prefix + "B" + tag;
    veth_[0] = name_prefix + "va" + tag;
    veth_[1] = name_prefix + "vb" + tag;
    const int subnet = 1 + (::getpid() + instance * 97) % 250;
    addr_[0] = "10." + std::to_string(octet) + "." + std::to_string(subnet) + ".1";
    addr_[1] = "10." + std::to_string(octet) + "." + std::to_string(subnet) + ".2";
    if (::geteuid() != 0) {
      error_ = "network namespaces need root";
      return;
    }
    if (::access("/usr/sbin/ip", X_OK) != 0) {
      error_ = "iproute2's ip is not installed";
      return;
    }
    const std::vector<std::string> setup = {
        "ip netns add " + ns_[0],
        "ip netns add " + ns_[1],
        "ip link add " + veth_[0] + " type veth peer name " + veth_[1],
        "ip link set " + veth_[0] + " netns " + ns_[0],
        "ip link set " + veth_[1] + " netns " + ns_[1],
        "ip -n " + ns_[0] + " addr add " + addr_[0] + "/24 dev " + veth_[0],
        "ip -n " + ns_[1] + " addr add " + addr_[1] + "/24 dev " + veth_[1],
        "ip -n " + ns_[0] + " link set " + veth_[0] + " up",
        "ip -n " + ns_[1] + " link set " + veth_[1] + " up",
        "ip -n " + ns_[0] + " link set lo up",
        "ip -n " + ns_[1] + " link set lo up",
    };
    created_ = true;
    for (const std::string& cmd : setup) {
      auto [status, out] = run_command(cmd);
      if (status != 0) {
        error_ = "could not make two network namespaces here: " + cmd + ": " + out;
        return;
      }
    }
    ok_ = true;
  }
  ~TwoHosts() {
    if (!created_) return;
    run_command("ip netns del " + ns_[0] + " 2>/dev/null");  // takes the veth pair with it
    run_command("ip netns del " + ns_[1] + " 2>/dev/null");
  }
  TwoHosts(const TwoHosts&) = delete;
  TwoHosts& operator=(const TwoHosts&) = delete;

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  const std::string& ns(int host) const { return ns_[host]; }
  const std::string& address(int host) const { return addr_[host]; }
  // Cuts the link: packets stop, no FIN or RST reaches either side.
  void partition() { run_command("ip -n " + ns_[0] + " link set " + veth_[0] + " down"); }
  // Mends a cut link (the connections that outlived the cut carry on: TCP retransmits).
  void heal() { run_command("ip -n " + ns_[0] + " link set " + veth_[0] + " up"); }

 private:
  std::string ns_[2], veth_[2], addr_[2];
  bool created_ = false;
  bool ok_ = false;
  std::string error_;
};

}  // namespace dp::test
