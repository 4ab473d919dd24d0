#pragma once
#include <vector>
#include "dp/autograd/node.h"
#include "dp/core/tensor.h"

namespace dp::autograd {

// Computes gradients of `roots` (with incoming `grad_roots`; undefined = ones for scalars) and
// accumulates them into the leaves' .grad.
//
// Where nodes run: each node on its device's worker (cpu:i), so the backward passes of replicas on
// different devices run in parallel; host ("cpu") nodes run in the calling thread. Called from a
// worker (a node's backward, or a task submitted to a worker), the nodes of that worker's own
// device run in the calling thread too, and the caller keeps serving its worker's queue while it
// waits, so re-entrant backward does not deadlock.
//
// CUDA streams (as PyTorch's "stream semantics of backward passes"): a CUDA node runs with the
// stream current when it was made (its forward op's) current; a gradient produced on one stream
// and consumed on another is synchronised with an event; the roots' gradients come from the
// caller's current streams; and before returning, the caller's current stream of each device
// waits for the streams the leaves' gradients were written on. So backward is ordered like any
// other call on the caller's streams, whatever streams the forward used (Node::stream()).
//
// Every node runs with grad mode = create_graph on whatever thread runs it. Without retain_graph
// (create_graph implies it) the nodes' saved state is freed as they run, and running them again
// throws PyTorch's "Trying to backward through the graph a second time..." AutogradError.
// An exception thrown in any node is re-thrown here once the nodes already started have finished;
// no node runs after it. Backward calls from several threads may run at once, on disjoint graphs
// or on one shared graph (with retain_graph): leaf accumulation is locked.
// The traversal is iterative (no recursion), so graphs of any depth work.
// As in PyTorch, backward(create_graph=true) leaves leaves' .grad with history that refers back to
// the graph (and so to the leaf): reset .grad (set_grad(Tensor())) after use, or prefer grad().
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {}, bool retain_graph = false, bool create_graph = false);

// Returns d(outputs)/d(inputs) without touching .grad (torch.autograd.grad): only the nodes on a
// path from the outputs to an input run. With allow_unused, inputs the outputs do not depend on
// give undefined tensors; otherwise that is an AutogradError naming the input.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs, const std::vector<Tensor>& grad_outputs = {},
                         bool retain_graph = false, bool create_graph = false, bool allow_unused = false);

namespace detail {
// For activation checkpointing (dp/nn/utils/checkpoint.h): the gradients of `roots` (seeded with
// `grad_roots`, one each) that arrive at each of `edges` (node, input_nr), undefined where none
// does. The edges' nodes are barriers: never run, never looked behind, so the graph the roots
// belong to (a recomputed segment) is evaluated down to them and no further; no AccumulateGrad
// runs (no .grad, no post-accumulate hook), and a barrier's output hooks or a leaf's tensor hooks
// are not run (the outer pass runs them on the whole gradient). Callbacks queued during this pass,
// when it is called from a node of an outer pass, are moved to the outer pass and run at its end.
// Frees the segment's saved state unless create_graph.
std::vector<Tensor> grad_at_edges(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, const std::vector<Edge>& edges,
                                  bool create_graph);
// backward({root}, {grad_root}) without the two vectors (Tensor::backward).
void backward_one(const Tensor& root, const Tensor& grad_root, bool retain_graph, bool create_graph);
}  // namespace detail

}  // namespace dp::autograd
