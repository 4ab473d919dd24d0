#pragma once
// View and shape operations. Views share storage with their base (writes land in the base).
#include <optional>
#include <vector>
#include "dp/core/tensor.h"

namespace dp {

Tensor view(const Tensor& t, IntArrayRef sizes);     // one size may be -1; needs compatible strides
Tensor reshape(const Tensor& t, IntArrayRef sizes);  // a view when possible, else a copy
Tensor as_strided(const Tensor& t, IntArrayRef sizes, IntArrayRef strides, std::optional<int64_t> offset = std::nullopt);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& t, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step = 1);
Tensor select(const Tensor& t, int64_t dim, int64_t index);
Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& t, IntArrayRef dims);
Tensor expand(const Tensor& t, IntArrayRef sizes);  // -1 keeps a size; new leading dims allowed
Tensor squeeze(const Tensor& t);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor flatten(const Tensor& t, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor unflatten(const Tensor& t, int64_t dim, IntArrayRef sizes);
// torch.chunk: split size ceil(B / chunks); may return fewer than `chunks` pieces; B == 0 gives
// `chunks` empty pieces.
std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split_with_sizes(const Tensor& t, IntArrayRef sizes, int64_t dim = 0);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor contiguous(const Tensor& t);
Tensor clone(const Tensor& t);
// Differentiable device / dtype conversion (returns t itself when nothing changes and !copy).
Tensor to(const Tensor& t, Device device, DType dtype, bool non_blocking = false, bool copy = false);

}  // namespace dp
