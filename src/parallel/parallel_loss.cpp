// Per-replica loss parts of dparallel's loss modules, and their combination.
#include "dp/parallel/parallel_loss.h"
#include "dp/autograd/grad_mode.h"
#include "dp/ops/elementwise.h"
#include "dp/ops/factory.h"
#include "dp/ops/index.h"
#include "dp/parallel/comm.h"
#include "parallel/placement.h"

namespace dp::parallel {
namespace {

Tensor on(const Tensor& t, const Tensor& like) { return t.defined() ? detail::place_on(t, like.device()) : t; }

Tensor count_of(double n, const Tensor& like) { return full({}, n, TensorOptions().dtype(like.dtype()).device(like.device())); }

void check_reduced(Reduction r, const char* loss) {
  DP_CHECK(r != Reduction::None, ValueError, "forward_loss: ", loss,
           " has reduction='none'; a loss computed on the replicas must be reduced ('mean' or 'sum')");
}

// Elementwise losses: a mean divides by the number of elements.
LossPart elementwise_part(Reduction r, Tensor sum, const Tensor& output) {
  if (r == Reduction::Sum) return {std::move(sum), Tensor()};
  return {std::move(sum), count_of(static_cast<double>(output.numel()), output)};
}

// NLL-style: a mean divides by the summed weights of the targets that are not ignored.
Tensor class_denominator(const Tensor& weight, int64_t ignore_index, const Tensor& output, const Tensor& target) {
  NoGradGuard no_grad;
  Tensor keep = target.ne(ignore_index);
  if (!weight.defined()) return keep.to(output.dtype()).sum();
  Tensor safe = where(keep, target, zeros_like(target));
  return (index_select(on(weight, output), 0, safe.flatten()).view(target.sizes()) * keep.to(output.dtype())).sum();
}

}  // namespace

LossPart loss_part(const nn::BCELossImpl& l, const Tensor& out, const Tensor& target) {
  check_reduced(l.options.reduction(), "BCELoss");
  return elementwise_part(l.options.reduction(), binary_cross_entropy(out, target, on(l.weight, out), Reduction::Sum), out);
}
LossPart loss_part(const nn::BCEWithLogitsLossImpl& l, const Tensor& out, const Tensor& target) {
  check_reduced(l.options.reduction(), "BCEWithLogitsLoss");
  return elementwise_part(l.options.reduction(),
                          binary_cross_entropy_with_logits(out, target, on(l.weight, out), on(l.pos_weight, out), Reduction::Sum), out);
}
LossPart loss_part(const nn::MSELossImpl& l, const Tensor& out, const Tensor& target) {
  check_reduced(l.options.reduction(), "MSELoss");
  return elementwise_part(l.options.reduction(), mse_loss(out, target, Reduction::Sum), out);
}
LossPart loss_part(const nn::L1LossImpl& l, const Tensor& out, const Tensor& target) {
  check_reduced(l.options.reduction(), "L1Loss");
  return elementwise_part(l.options.reduction(), l1_loss(out, target, Reduction::Sum), out);
}
LossPart loss_part(const nn::NLLLossImpl& l, const Tensor& out, const Tensor& target) {
  check_reduced(l.options.reduction(), "NLLLoss");
  Tensor sum = nll_loss(out, target, on(l.weight, out), l.options.ignore_index(), Reduction::Sum);
  if (l.options.reduction() == Reduction::Sum) return {sum, Tensor()};
  return {sum, class_denominator(l.weight, l.options.ignore_index(), out, target)};
}
LossPart loss_part(const nn::CrossEntropyLossImpl& l, const Tensor& out, const Tensor& target) {
  check_reduced(l.options.reduction(), "CrossEntropyLoss");
  Tensor sum = cross_entropy(out, target, on(l.weight, out), l.options.ignore_index(), Reduction::Sum, l.options.label_smoothing());
  if (l.options.reduction() == Reduction::Sum) return {sum, Tensor()};
  // Class-probability targets (floating, same shape as the output) average over rows.
  if (is_floating_point(target.dtype())) return {sum, count_of(static_cast<double>(out.numel() / std::max<int64_t>(1, out.size(-1))), out)};
  return {sum, class_denominator(l.weight, l.options.ignore_index(), out, target)};
}

LossPart sum_loss_parts(const std::vector<LossPart>& parts, Device destination) {
  DP_CHECK(!parts.empty(), ValueError, "forward_loss: no replica produced a loss");
  std::vector<Tensor> sums, counts;
  size_t with_count = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    DP_CHECK(parts[i].sum.defined() && parts[i].sum.numel() == 1, ShapeError, "forward_loss: replica ", i,
             "'s criterion must give a one-element loss, got ",
             parts[i].sum.defined() ? parts[i].sum.size_str() : std::string("an undefined tensor"));
    sums.push_back(parts[i].sum.reshape({1}));
    if (parts[i].count.defined()) {
      ++with_count;
      counts.push_back(parts[i].count.detach().reshape({1}));
    }
  }
  DP_CHECK(with_count == 0 || with_count == parts.size(), ValueError, "forward_loss: ", with_count, " of ", parts.size(),
           " replicas gave a mean's count; give one from every replica (a mean) or from none (a sum)");
  Tensor total = gather(sums, destination, 0).sum();
  if (with_count == 0) return {total, Tensor()};
  return {total, gather(counts, destination, 0).sum()};
}

Tensor combine_loss_parts(const std::vector<LossPart>& parts, Device destination) {
  LossPart all = sum_loss_parts(parts, destination);
  if (!all.count.defined()) return all.sum;
  return all.sum / all.count.to(all.sum.dtype());
}

}  // namespace dp::parallel
