#pragma once
#include <vector>
#include "dp/core/tensor.h"

namespace dp::autograd {

// Computes gradients of `roots` (with incoming `grad_roots`; undefined = ones for scalars) and
// accumulates them into the leaves. Each node runs on its device's worker (host nodes in the
// calling thread), so the backward passes of replicas on different devices run in parallel.
// The order is iterative (no recursion), so graphs of any depth work.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {},
              bool retain_graph = false, bool create_graph = false);

// Returns d(outputs)/d(inputs) without touching .grad (torch.autograd.grad). With allow_unused,
// inputs the outputs do not depend on give undefined tensors; otherwise that is an error.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

}  // namespace dp::autograd
