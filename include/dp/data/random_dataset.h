#pragma once
// The RandomDataset of PyTorch's DataParallel tutorial ("Optional: Data Parallelism"):
//
//   class RandomDataset(Dataset):
//       def __init__(self, size, length):
//           self.len = length
//           self.data = torch.randn(length, size)
//       def __getitem__(self, index): return self.data[index]
//       def __len__(self): return self.len
//
// The tutorial uses RandomDataset(input_size = 5, data_size = 100) with batch_size 30.
#include <cstdint>
#include "dp/core/generator.h"
#include "dp/data/tensor_dataset.h"

namespace dp::data {

// `length` samples of `size` float32 features drawn from N(0, 1) once, at construction, with `gen`
// (nullptr: the CPU default generator, which dp::manual_seed seeds). No target. Sizes must be
// non-negative (ValueError).
class RandomDataset : public TensorDataset {
 public:
  RandomDataset(int64_t size, int64_t length, Generator* gen = nullptr);

  int64_t feature_size() const { return size_; }
  int64_t length() const { return length_; }

 private:
  int64_t size_;
  int64_t length_;
};

}  // namespace dp::data
