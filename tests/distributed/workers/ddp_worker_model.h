#pragma once
// The model and data of ddp_worker, shared with test_ddp_processes.cpp so the test can compute
// the single-process reference itself.
#include <utility>
#include "dp/dp.h"
#include "dp/nn/nn.h"

namespace dp::test {

inline nn::Sequential make_ddp_worker_model(uint64_t seed) {
  manual_seed(seed);
  return nn::Sequential(nn::Linear(10, 32), nn::Tanh(), nn::Linear(32, 16), nn::ReLU(), nn::Linear(16, 3));
}

// Step `step`'s global batch of 12 rows (every rank draws the same one and takes its share).
inline std::pair<Tensor, Tensor> ddp_worker_batch(int step) {
  Generator gen(1000 + static_cast<uint64_t>(step));
  Tensor x = randn({12, 10}, {}, &gen);
  Tensor y = randint(0, 3, {12}, kInt64, &gen);
  return {x, y};
}

}  // namespace dp::test
