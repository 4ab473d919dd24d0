#include "dp/data/random_dataset.h"

#include "dp/ops/factory.h"

namespace dp::data {

namespace {
Tensor random_rows(int64_t size, int64_t length, Generator* gen) {
  DP_CHECK(size >= 0 && length >= 0, ValueError, "RandomDataset: size and length must be non-negative, got size ", size, " and length ", length);
  return randn({length, size}, TensorOptions(kFloat32), gen);  // torch.randn(length, size)
}
}  // namespace

RandomDataset::RandomDataset(int64_t size, int64_t length, Generator* gen)
    : TensorDataset(random_rows(size, length, gen)), size_(size), length_(length) {}

}  // namespace dp::data
