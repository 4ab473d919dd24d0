// Activation checkpointing (dp/nn/utils/checkpoint.h).
//
// Forward runs the segment with grad enabled under a NodeCreationLog, walks the graph it made from
// its outputs to find where that graph leaves the segment (its detached inputs' accumulators, and
// "external" edges: parameters' AccumulateGrad and any node made outside the segment, such as a
// DataParallel replica's parameter copy), and drops the graph. One CheckpointNode, with edges to
// the inputs and to those external edges, becomes the outputs' grad_fn. Its backward recomputes the
// segment and evaluates it with grad_at_edges() down to the same edges, returning what arrives
// there as its own input gradients: a parameter's gradient then reaches its AccumulateGrad in the
// outer pass only, once, summed with its other uses.
#include "dp/nn/utils/checkpoint.h"
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include "dp/amp/autocast.h"
#include "dp/autograd/engine.h"
#include "dp/autograd/function.h"
#include "dp/autograd/grad_mode.h"
#include "dp/autograd/node.h"
#include "dp/core/errors.h"
#include "dp/core/generator.h"

namespace dp::utils {
namespace {

using autograd::Edge;
using autograd::Node;
using EdgeKey = std::pair<const Node*, uint32_t>;

// The default generators of the devices the inputs live on (the host's if none), and their states.
struct RngStates {
  struct Entry {
    Device device;
    uint64_t seed, offset;
  };
  std::vector<Entry> entries;

  static RngStates capture(const std::vector<Tensor>& inputs) {
    std::vector<Device> devices;
    for (const Tensor& t : inputs)
      if (t.defined() && std::find(devices.begin(), devices.end(), t.device()) == devices.end()) devices.push_back(t.device());
    if (devices.empty()) devices.push_back(Device::cpu());
    RngStates s;
    for (Device d : devices) {
      const Generator& g = default_generator(d);
      s.entries.push_back(Entry{d, g.seed(), g.offset()});
    }
    return s;
  }
  void restore() const {
    for (const Entry& e : entries) default_generator(e.device).set_state(e.seed, e.offset);
  }
};

// Restores the generators' states at the end of a recomputation (torch.random.fork_rng).
class ForkRng {
 public:
  ForkRng(const RngStates& replay, const std::vector<Tensor>& inputs) : saved_(RngStates::capture(inputs)) { replay.restore(); }
  ~ForkRng() { saved_.restore(); }
  ForkRng(const ForkRng&) = delete;
  ForkRng& operator=(const ForkRng&) = delete;

 private:
  RngStates saved_;
};

std::vector<Tensor> detach_inputs(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out;
  out.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (!t.defined()) {
      out.emplace_back();
      continue;
    }
    Tensor d = t.detach();
    if (t.requires_grad()) d.requires_grad_(true);
    out.push_back(std::move(d));
  }
  return out;
}

// Where the graph the segment made (the nodes in `log`) leaves it, from its outputs: the external
// edges in the order first reached (parameters' AccumulateGrad, nodes made outside the segment);
// the accumulators of the segment's own detached inputs are not external.
std::vector<Edge> external_edges(const std::vector<Tensor>& outputs, const autograd::NodeCreationLog& log,
                                 const std::unordered_set<const Node*>& input_accumulators) {
  std::unordered_set<const Node*> internal(log.nodes().begin(), log.nodes().end());
  std::unordered_set<const Node*> visited;
  std::map<EdgeKey, size_t> seen;
  std::vector<Edge> external;
  std::vector<const Node*> stack;
  auto reach = [&](const Edge& e) {
    const Node* n = e.function.get();
    if (!n || input_accumulators.count(n)) return;
    if (n->is_accumulate_grad() || !internal.count(n)) {
      if (seen.emplace(EdgeKey{n, e.input_nr}, external.size()).second) external.push_back(e);
      return;
    }
    if (visited.insert(n).second) stack.push_back(n);
  };
  for (const Tensor& o : outputs)
    if (o.defined() && o.requires_grad()) reach(autograd::gradient_edge(o));
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) reach(e);
  }
  return external;
}

class CheckpointNode final : public Node {
 public:
  CheckpointNode(detail::SegmentFn fn, std::vector<Tensor> inputs, std::vector<size_t> attached, std::vector<Edge> external, RngStates rng,
                 bool preserve_rng, autocast::ThreadState autocast_state)
      : fn_(std::move(fn)),
        inputs_(std::move(inputs)),
        attached_(std::move(attached)),
        num_external_(external.size()),
        rng_(std::move(rng)),
        preserve_rng_(preserve_rng),
        autocast_(autocast_state) {
    materialize_grads = false;
    for (const Tensor& t : inputs_) {
      versions_.push_back(t.defined() ? t.version() : 0);
      add_next_edge(t.defined() && t.requires_grad() ? autograd::gradient_edge(t) : Edge{});
    }
    for (size_t i = 0; i < external.size(); ++i) external_index_.emplace(EdgeKey{external[i].function.get(), external[i].input_nr}, i);
    for (Edge& e : external) add_next_edge(std::move(e));
  }

  std::string name() const override { return "CheckpointFunctionBackward"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = nullptr;
    inputs_.clear();
  }

  autograd::variable_list apply(autograd::variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t num_inputs = inputs_.size();
    autograd::variable_list result(num_inputs + num_external_);
    bool any = false;
    for (const Tensor& g : grads) any = any || g.defined();
    if (!any) return result;
    for (size_t i = 0; i < num_inputs; ++i)
      DP_CHECK(!inputs_[i].defined() || inputs_[i].version() == versions_[i], AutogradError, "checkpoint: tensor input ", i,
               " was modified by an in-place operation after the checkpointed forward (version ", versions_[i], ", now ", inputs_[i].version(),
               "); the recomputation needs it as it was");
    const bool create_graph = GradMode::is_enabled();

    std::vector<Tensor> detached = detach_inputs(inputs_);
    std::vector<Tensor> outputs;
    std::vector<Edge> edges;
    {
      std::optional<ForkRng> fork;
      if (preserve_rng_) fork.emplace(rng_, inputs_);
      autocast::ThreadStateGuard autocast_state(autocast_);
      AutoGradMode grad_on(true);
      autograd::NodeCreationLog log;
      outputs = fn_(detached);
      // The edges whose gradients this node returns: its inputs' (through their detached copies)
      // and the external ones, each in its slot.
      std::unordered_set<const Node*> accumulators;
      edges.resize(num_inputs + num_external_);
      for (size_t i = 0; i < num_inputs; ++i) {
        if (!detached[i].defined() || !detached[i].requires_grad()) continue;
        edges[i] = Edge{autograd::grad_accumulator(detached[i]), 0};
        accumulators.insert(edges[i].function.get());
      }
      for (Edge& e : external_edges(outputs, log, accumulators)) {
        auto it = external_index_.find(EdgeKey{e.function.get(), e.input_nr});
        DP_CHECK(it != external_index_.end(), AutogradError, "checkpoint: the recomputation in backward reached a tensor (gradient node ",
                 e.function->name(),
                 ") that the forward did not use; the checkpointed function must do the same thing when it is run again (fn must be "
                 "deterministic apart from the random numbers of its inputs' devices)");
        edges[num_inputs + it->second] = std::move(e);
      }
    }
    DP_CHECK(outputs.size() > (attached_.empty() ? 0 : attached_.back()), AutogradError, "checkpoint: the recomputation in backward returned ",
             outputs.size(), " tensors, fewer than the forward's");
    std::vector<Tensor> roots, root_grads;
    for (size_t j = 0; j < attached_.size(); ++j) {
      if (!grads[j].defined()) continue;
      const Tensor& o = outputs[attached_[j]];
      DP_CHECK(o.defined() && o.requires_grad(), AutogradError, "checkpoint: output ", attached_[j],
               " of the recomputation in backward does not require grad, but the forward's did");
      DP_CHECK(o.sizes() == grads[j].sizes(), AutogradError, "checkpoint: output ", attached_[j], " of the recomputation has size ", o.size_str(),
               ", the forward's ", grads[j].size_str());
      roots.push_back(o);
      root_grads.push_back(std::move(grads[j]));
    }
    // Only the edges reached get a barrier (an unused input's slot stays undefined).
    std::vector<Edge> targets;
    std::vector<size_t> slots;
    for (size_t i = 0; i < edges.size(); ++i)
      if (edges[i].function) {
        targets.push_back(edges[i]);
        slots.push_back(i);
      }
    std::vector<Tensor> got = autograd::detail::grad_at_edges(roots, root_grads, targets, create_graph);
    for (size_t k = 0; k < slots.size(); ++k) result[slots[k]] = std::move(got[k]);
    return result;
  }

 private:
  std::mutex mu_;
  detail::SegmentFn fn_;
  std::vector<Tensor> inputs_;
  std::vector<uint32_t> versions_;
  std::vector<size_t> attached_;  // which of fn's outputs are this node's outputs (those that required grad)
  size_t num_external_;
  std::map<EdgeKey, size_t> external_index_;
  RngStates rng_;
  bool preserve_rng_;
  autocast::ThreadState autocast_;
};

}  // namespace

namespace detail {

std::vector<Tensor> checkpoint_impl(SegmentFn fn, const std::vector<Tensor>& inputs, const CheckpointOptions& options) {
  DP_CHECK(fn != nullptr, ValueError, "checkpoint: no function given");
  if (!GradMode::is_enabled()) return fn(inputs);  // nothing to keep or recompute
  RngStates rng;
  if (options.preserve_rng_state()) rng = RngStates::capture(inputs);
  const autocast::ThreadState autocast_state = autocast::ThreadState::current();

  std::vector<Tensor> outputs;
  std::vector<Edge> external;
  std::vector<size_t> attached;
  {
    std::vector<Tensor> detached = detach_inputs(inputs);
    std::vector<Tensor> segment_outputs;
    std::unordered_set<const Node*> accumulators;
    {
      autograd::NodeCreationLog log;
      segment_outputs = fn(detached);
      for (const Tensor& d : detached)
        if (d.defined() && d.requires_grad()) accumulators.insert(autograd::grad_accumulator(d).get());
      external = external_edges(segment_outputs, log, accumulators);
    }
    // The outputs leave the segment's graph behind (it is freed here, with its activations).
    outputs.reserve(segment_outputs.size());
    for (const Tensor& o : segment_outputs) outputs.push_back(o.defined() ? o.detach() : Tensor());
    for (size_t i = 0; i < outputs.size(); ++i)
      if (segment_outputs[i].defined() && segment_outputs[i].requires_grad()) attached.push_back(i);
  }
  if (attached.empty()) return outputs;
  auto node = std::make_shared<CheckpointNode>(std::move(fn), inputs, attached, std::move(external), std::move(rng), options.preserve_rng_state(),
                                               autocast_state);
  std::vector<Tensor> with_history;
  with_history.reserve(attached.size());
  for (size_t i : attached) with_history.push_back(outputs[i]);
  autograd::set_history(with_history, node);
  return outputs;
}

}  // namespace detail

Tensor checkpoint_sequential(const nn::Sequential& sequential, int64_t segments, const Tensor& input, const CheckpointOptions& options) {
  const auto seq = sequential.ptr();
  const int64_t n = static_cast<int64_t>(seq->size());
  DP_CHECK(segments >= 1 && segments <= n, ValueError, "checkpoint_sequential: segments must be between 1 and the number of modules (", n, "), got ",
           segments);
  const int64_t size = n / segments;
  Tensor x = input;
  int64_t start = 0;
  for (; start < size * (segments - 1); start += size) {
    const auto begin = static_cast<size_t>(start), end = static_cast<size_t>(start + size);
    x = checkpoint(
        options, [seq, begin, end](const Tensor& t) { return seq->forward_range(t, begin, end); }, x);
  }
  return seq->forward_range(x, static_cast<size_t>(start), static_cast<size_t>(n));
}

}  // namespace dp::utils
