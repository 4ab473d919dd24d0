#pragma once
// The command line shared by the DataParallel examples. Every example takes --devices: a
// comma-separated device list such as "cpu:0,cpu:1" or "cuda:0,cuda:1". The default is what
// torch.nn.DataParallel uses (every CUDA device) and, on a machine without one, two CPU devices so
// that the examples still split batches. CommandLine reads --devices, --help and the options an
// example declares; StepOptions are those of the examples that train a few steps on random batches.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>
#include "dp/dp.h"

namespace dp_examples {

inline const char* kDevicesHelp =
    "--devices LIST   comma-separated devices, e.g. cpu:0,cpu:1 or cuda:0,cuda:1\n"
    "                 (default: every CUDA device if there is one, else cpu:0,cpu:1)\n";

// The default device list (see above).
inline std::vector<dp::Device> default_devices() {
  std::vector<dp::Device> cuda = dp::devices(dp::DeviceType::CUDA);
  if (!cuda.empty()) return cuda;
  return {dp::Device::cpu(0), dp::Device::cpu(1)};
}

// Parses "cpu:0,cpu:1". CPU devices past the configured count (DP_CPU_DEVICES, else the number of
// hardware threads) are made to exist, so "cpu:0,...,cpu:3" works on a 2-core machine too (the
// replicas then share cores). Must run before any CPU device's worker starts.
inline std::vector<dp::Device> parse_devices(const std::string& list) {
  std::vector<dp::Device> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    dp::Device d(item);
    DP_CHECK(d.has_index(), ValueError, "--devices: '", item, "' is the host; list indexed devices such as cpu:0 or cuda:0");
    out.push_back(d);
  }
  DP_CHECK(!out.empty(), ValueError, "--devices: no device in '", list, "'");
  int needed = 0;
  for (dp::Device d : out)
    if (d.is_cpu()) needed = std::max(needed, d.index + 1);
  if (needed > dp::cpu_device_count()) dp::set_cpu_device_count(needed);
  for (dp::Device d : out) dp::check_device(d);
  return out;
}

inline std::string join(const std::vector<dp::Device>& devices) {
  std::string s;
  for (size_t i = 0; i < devices.size(); ++i) s += (i ? "," : "") + devices[i].str();
  return s;
}

// The examples' command line: --devices LIST and --help, plus the options an example declares, each
// with the variable it sets (converted by std::stoi, stoll, stoull or stod, by the variable's type):
//
//   int epochs = 300;
//   dp_examples::CommandLine cli("seed_training [--devices LIST] [--epochs 300]");
//   cli.option("--epochs", epochs);
//   if (!cli.parse(argc, argv)) return 0;  // --help printed the usage
//   const std::vector<dp::Device> device_ids = cli.devices();
class CommandLine {
 public:
  // usage: the first line --help prints; more_help: the lines it prints after the --devices ones.
  explicit CommandLine(std::string usage, std::string more_help = "") : usage_(std::move(usage)), more_help_(std::move(more_help)) {}

  CommandLine& option(const std::string& name, int& target) {
    return add(name, [&target](const std::string& v) { target = std::stoi(v); });
  }
  CommandLine& option(const std::string& name, int64_t& target) {
    return add(name, [&target](const std::string& v) { target = std::stoll(v); });
  }
  CommandLine& option(const std::string& name, uint64_t& target) {
    return add(name, [&target](const std::string& v) { target = std::stoull(v); });
  }
  CommandLine& option(const std::string& name, double& target) {
    return add(name, [&target](const std::string& v) { target = std::stod(v); });
  }
  // An option without a value: present, it sets target to true.
  CommandLine& flag(const std::string& name, bool& target) {
    flags_[name] = &target;
    return *this;
  }

  // Reads the arguments in order (the --devices list is parsed where it stands). Returns false after
  // --help, having printed the usage; throws dp::ValueError for an unknown option or a missing value.
  bool parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw dp::ValueError(a + " needs a value");
        return argv[++i];
      };
      if (a == "--devices") {
        devices_ = parse_devices(value());
      } else if (a == "--help" || a == "-h") {
        std::cout << usage_ << "\n" << kDevicesHelp << more_help_;
        return false;
      } else if (auto o = options_.find(a); o != options_.end()) {
        o->second(value());
      } else if (auto f = flags_.find(a); f != flags_.end()) {
        *f->second = true;
      } else {
        throw dp::ValueError("unknown option " + a + " (try --help)");
      }
    }
    if (devices_.empty()) devices_ = default_devices();
    return true;
  }

  // The --devices list, else default_devices() (once parse has run).
  const std::vector<dp::Device>& devices() const { return devices_; }

 private:
  CommandLine& add(const std::string& name, std::function<void(const std::string&)> set) {
    options_[name] = std::move(set);
    return *this;
  }

  std::string usage_, more_help_;
  std::map<std::string, std::function<void(const std::string&)>> options_;
  std::map<std::string, bool*> flags_;
  std::vector<dp::Device> devices_;
};

// The options of the examples that train a few steps on random batches: --devices, --steps,
// --batch, --lr and --seed, with the example's defaults:
//   dp_examples::StepOptions options{.steps = 5, .batch = 64, .lr = 0.05};
struct StepOptions {
  int steps;
  int64_t batch;
  double lr;
  uint64_t seed = 0;
  std::vector<dp::Device> device_ids;

  // Reads the arguments (see CommandLine::parse); false after --help. Steps and batch must be >= 1.
  bool parse(int argc, char** argv, const std::string& usage, const std::string& more_help = "") {
    CommandLine cli(usage, more_help);
    cli.option("--steps", steps).option("--batch", batch).option("--lr", lr).option("--seed", seed);
    if (!cli.parse(argc, argv)) return false;
    device_ids = cli.devices();
    DP_CHECK(steps >= 1 && batch >= 1, ValueError, "--steps and --batch must be at least 1");
    return true;
  }
};

}  // namespace dp_examples
