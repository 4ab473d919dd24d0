#pragma once
// Fashion-MNIST (Xiao et al. 2017) from the IDX files that Debian's dataset-fashion-mnist package
// installs in /usr/share/datasets/fashion-mnist (torchvision.datasets.FashionMNIST's data).
#include <array>
#include <string>
#include "dp/data/tensor_dataset.h"

namespace dp::data {

// Reads <root>/{train,t10k}-images-idx3-ubyte.gz and -labels-idx1-ubyte.gz (an uncompressed file
// without the .gz suffix is used when the .gz one is absent).
//   data:   float32 [N, 1, 28, 28], pixel / 255 (torchvision's ToTensor), so values lie in [0, 1]
//   target: int64 [N], class ids 0..9 (see kClasses)
// N is 60000 for train and 10000 for test. Everything read is checked: the IDX magic numbers,
// dimensions (28x28), that the data is not truncated nor followed by extra bytes, that labels are
// in 0..9, and that images and labels count the same samples. Each problem is an IOError naming
// the file and what is wrong; a missing file's error says to install the package
// (apt-get install dataset-fashion-mnist). Files are recognised as gzip by their magic bytes; a gzip
// file must be one complete member (its CRC-32 and length are checked) with nothing after it. A
// file with 0 samples, a header announcing more than the file can hold (an uncompressed file holds
// at most its own size), and anything but a regular file (a FIFO is refused without waiting) are
// IOErrors too; running out of memory for what a header announces is an OutOfMemory naming the file.
class FashionMNIST : public TensorDataset {
 public:
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  static constexpr int64_t kRows = 28;
  static constexpr int64_t kCols = 28;
  static constexpr std::array<const char*, 10> kClasses = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                           "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

  explicit FashionMNIST(const std::string& root = kDefaultRoot, bool train = true);

  const Tensor& images() const { return data(); }
  const Tensor& targets() const { return target(); }
  bool train() const { return train_; }

 private:
  bool train_;
};

namespace detail {
// The readers of one IDX file each (what FashionMNIST uses; the fuzz targets call them directly):
// labels (int64 [N]) and images (float32 [N, 1, 28, 28], pixel / 255) that must number
// `expected_count` (the count `labels_path` holds). IOError naming the file for every problem.
Tensor read_idx_labels(const std::string& path);
Tensor read_idx_images(const std::string& path, int64_t expected_count, const std::string& labels_path);
}  // namespace detail

}  // namespace dp::data
