#pragma once
// How a loss combines its per-element values: None keeps them, Mean and Sum give a 0-dim tensor.
// In core (not beside the losses in dp/ops/loss.h) because the kernel interfaces of the backends
// take it too, and backends include core only.

namespace dp {

enum class Reduction { None, Mean, Sum };

}  // namespace dp
