// PyTorch's "Optional: Data Parallelism" tutorial, its first program, in dparallel on one device:
// a RandomDataset of 100 rows x 5 features, batches of 30, and a Linear(5, 2) model whose forward
// prints the sizes it sees. (The DataParallel version, with --devices, splits each batch.)
//
//   seed_tutorial [--device cpu] [--seed 0]
//
// Output: for each of the 4 batches one "In Model" line and one "Outside" line:
//   	In Model: input size [30, 5] output size [30, 2]
//   Outside: input size [30, 5] output_size [30, 2]
//   ... and for the last batch [10, 5] / [10, 2].
#include <cstdio>
#include <iostream>
#include <string>
#include "dp/data/data.h"
#include "dp/dp.h"
#include "dp/nn/nn.h"

namespace {

constexpr int64_t kInputSize = 5;
constexpr int64_t kOutputSize = 2;
constexpr int64_t kBatchSize = 30;
constexpr int64_t kDataSize = 100;

// The tutorial's model: nothing but a Linear layer and a print.
struct Model : dp::nn::Module {
  dp::nn::Linear fc{nullptr};
  Model(int64_t input_size, int64_t output_size) { fc = register_module("fc", dp::nn::Linear(input_size, output_size)); }
  dp::Tensor forward(const dp::Tensor& input) {
    dp::Tensor output = fc(input);
    std::printf("\tIn Model: input size %s output size %s\n", input.size_str().c_str(), output.size_str().c_str());
    return output;
  }
};

}  // namespace

int main(int argc, char** argv) try {
  std::string device = "cpu";
  uint64_t seed = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw dp::ValueError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--device") device = value();
    else if (a == "--seed") seed = std::stoull(value());
    else if (a == "--help" || a == "-h") {
      std::cout << "seed_tutorial [--device cpu] [--seed 0]\n";
      return 0;
    } else throw dp::ValueError("unknown option " + a + " (try --help)");
  }
  dp::manual_seed(seed);
  dp::Device dev(device);

  dp::data::DataLoader loader(dp::data::RandomDataset(kInputSize, kDataSize),
                              dp::data::DataLoaderOptions().batch_size(kBatchSize).shuffle(true));
  auto model = std::make_shared<Model>(kInputSize, kOutputSize);
  model->to(dev);

  for (dp::data::Batch& batch : loader) {
    dp::Tensor input = batch.data.to(dev);
    dp::Tensor output = model->forward(input);
    std::printf("Outside: input size %s output_size %s\n", input.size_str().c_str(), output.size_str().c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "seed_tutorial: %s\n", e.what());
  return 2;
}
