// PyTorch's "Optional: Data Parallelism" tutorial in dparallel: a RandomDataset of 100 rows x 5
// features, batches of 30, and a Linear(5, 2) model whose forward prints the sizes it sees, wrapped
// in DataParallel over --devices.
//
//   seed_tutorial [--devices cpu:0,cpu:1] [--seed 0]
//
// With 2 devices the output is the tutorial's (the two "In Model" lines of a batch come from the two
// replicas, which run in parallel threads, so their order may vary):
//   Let's use 2 devices!                (with CUDA devices: Let's use 2 GPUs!)
//   	In Model: input size [15, 5] output size [15, 2]
//   	In Model: input size [15, 5] output size [15, 2]
//   Outside: input size [30, 5] output_size [30, 2]
//   ... three times, then for the last batch of 10 rows: two [5, 5] / [5, 2] lines and
//   Outside: input size [10, 5] output_size [10, 2]
// With one device there is no "Let's use" line (the tutorial prints it only for several GPUs) and
// DataParallel calls the module itself: one "In Model" line of [30, 5] per batch.
#include <cstdio>
#include <iostream>
#include <mutex>
#include <string>
#include "dp/dp.h"
#include "example_devices.h"

namespace {

constexpr int64_t kInputSize = 5;
constexpr int64_t kOutputSize = 2;
constexpr int64_t kBatchSize = 30;
constexpr int64_t kDataSize = 100;

// Replicas print from their devices' worker threads at the same time. One printf call writes its
// line under the stream's lock (POSIX), but the lock here makes "one line at a time" explicit and
// keeps holding if the printing ever becomes several calls.
std::mutex print_mutex;

// The tutorial's model: nothing but a Linear layer and a print.
struct Model : dp::nn::Module {
  dp::nn::Linear fc{nullptr};
  Model(int64_t input_size, int64_t output_size) { fc = register_module("fc", dp::nn::Linear(input_size, output_size)); }
  dp::Tensor forward(const dp::Tensor& input) {
    dp::Tensor output = fc(input);
    std::lock_guard<std::mutex> lock(print_mutex);
    std::printf("\tIn Model: input size %s output size %s\n", input.size_str().c_str(), output.size_str().c_str());
    return output;
  }
};

}  // namespace

int main(int argc, char** argv) try {
  uint64_t seed = 0;
  dp_examples::CommandLine cli("seed_tutorial [--devices LIST] [--seed 0]", "--seed N         seed of the data, the shuffling and the weights\n");
  cli.option("--seed", seed);
  if (!cli.parse(argc, argv)) return 0;  // --help
  const std::vector<dp::Device> device_ids = cli.devices();
  dp::manual_seed(seed);
  // The tutorial's `device = torch.device("cuda:0")`: where the model and the inputs live.
  const dp::Device device = device_ids[0];

  dp::data::DataLoader loader(dp::data::RandomDataset(kInputSize, kDataSize), dp::data::DataLoaderOptions().batch_size(kBatchSize).shuffle(true));
  auto model = std::make_shared<Model>(kInputSize, kOutputSize);
  if (device_ids.size() > 1) std::printf("Let's use %zu %s!\n", device_ids.size(), device.is_cuda() ? "GPUs" : "devices");
  // DataParallel on one device calls the module itself (no replica, no gather), so one code path
  // serves both cases; the tutorial wraps only for several GPUs, with the same printed result.
  dp::nn::DataParallel<Model> net(model, device_ids);
  model->to(device);  // the tutorial's model.to(device): parameters on device_ids[0]

  for (dp::data::Batch& batch : loader) {
    dp::Tensor input = batch.data.to(device);
    dp::Tensor output = net(input);
    std::lock_guard<std::mutex> lock(print_mutex);
    std::printf("Outside: input size %s output_size %s\n", input.size_str().c_str(), output.size_str().c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "seed_tutorial: %s\n", e.what());
  return 2;
}
