#include "dp/autograd/node.h"
#include "dp/autograd/grad_mode.h"
#include "dp/ops/elementwise.h"

namespace dp::autograd {
namespace {
std::atomic<uint64_t> next_sequence_nr{0};
}

Node::Node() : sequence_nr_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

uint32_t Node::add_output_meta(const Tensor& t) {
  output_meta_.push_back(TensorMeta{t.sizes(), t.dtype(), t.device()});
  return static_cast<uint32_t>(output_meta_.size() - 1);
}

variable_list FunctionNode::apply(variable_list&& grads) {
  DP_CHECK(fn_ != nullptr, AutogradError, "Trying to backward through the graph a second time (or directly access saved tensors after they have already been freed). Saved intermediate values of the graph are freed when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or if you need to access saved tensors after calling backward. (node ", name_, ")");
  return fn_(std::move(grads));
}

AccumulateGrad::AccumulateGrad(Tensor variable) : variable_(std::move(variable)) {
  set_device(variable_.device());
  add_output_meta(variable_);
}

variable_list AccumulateGrad::apply(variable_list&& grads) {
  Tensor g = std::move(grads[0]);
  if (!g.defined()) return {};
  AutogradMeta& meta = variable_.unsafe_impl()->autograd_meta();
  std::vector<TensorHook> hooks;
  std::vector<PostAccumulateGradHook> post;
  {
    std::lock_guard<std::mutex> lock(meta.mu);
    for (auto& h : meta.hooks) hooks.push_back(h.second);
    for (auto& h : meta.post_accumulate_hooks) post.push_back(h.second);
  }
  for (auto& h : hooks) {
    Tensor r = h(g);
    if (r.defined()) g = std::move(r);
  }
  const bool create_graph = GradMode::is_enabled();
  {
    std::lock_guard<std::mutex> lock(meta.mu);
    if (!meta.grad || !meta.grad->defined()) {
      // Steal the incoming buffer when nothing else can see it (one reference to the tensor and
      // to its storage); otherwise copy, so .grad never aliases another tensor's memory.
      bool stealable = !create_graph && g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 &&
                       g.is_contiguous() && g.requires_grad() == false;
      Tensor stored = stealable ? g : (create_graph ? g : g.detach().clone());
      meta.grad = std::make_shared<Tensor>(stored);
    } else if (create_graph) {
      meta.grad = std::make_shared<Tensor>(dp::add(*meta.grad, g));
    } else {
      NoGradGuard no_grad;
      Tensor& acc = *meta.grad;
      dp::add_(acc, g);
    }
  }
  for (auto& h : post) h(variable_);
  return {};
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return Edge{};
  if (const auto& fn = t.grad_fn()) return Edge{fn, t.output_nr()};
  return Edge{grad_accumulator(t), 0};
}

std::shared_ptr<Node> grad_accumulator(const Tensor& t) {
  AutogradMeta& meta = t.unsafe_impl()->autograd_meta();
  std::lock_guard<std::mutex> lock(meta.mu);
  if (auto acc = meta.grad_accumulator.lock()) return acc;
  auto acc = std::make_shared<AccumulateGrad>(t);
  meta.grad_accumulator = acc;
  return acc;
}

}  // namespace dp::autograd
