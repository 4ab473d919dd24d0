// dp::nn::functional pad (constant mode), written with dp ops: a crop is a narrow (a view), padding
// is a cat with constant blocks, one dim at a time from the last.
#include <algorithm>
#include <vector>
#include "dp/nn/functional/padding.h"
#include "dp/ops/factory.h"
#include "dp/ops/shape.h"

namespace dp::nn::functional {

Tensor pad(const Tensor& input, const PadFuncOptions& options) {
  const std::vector<int64_t>& p = options.pad();
  DP_CHECK(input.defined(), ValueError, "pad: the input is an undefined tensor");
  DP_CHECK(p.size() % 2 == 0, ValueError, "pad: padding length must be divisible by 2, got ", p.size(), " values ", shape_str(p));
  DP_CHECK(static_cast<int64_t>(p.size()) <= 2 * input.dim(), ValueError, "pad: padding length too large: ", p.size(), " values for a ", input.dim(),
           "-D input ", input.size_str(), " (at most 2 per dim)");
  Tensor out = input;
  for (size_t i = 0; i < p.size() / 2; ++i) {
    const int64_t dim = input.dim() - 1 - static_cast<int64_t>(i);
    const int64_t before = p[2 * i], after = p[2 * i + 1];
    const int64_t size = out.size(dim);
    DP_CHECK(size + before + after >= 0, ValueError, "pad: the input size ", size, " of dim ", dim, " (input ", input.size_str(),
             "), plus negative padding ", before, " and ", after, ", resulted in a negative output size ", size + before + after);
    if (before < 0 || after < 0) {
      const int64_t start = std::max<int64_t>(-before, 0);
      out = dp::narrow(out, dim, start, std::max<int64_t>(size - start - std::max<int64_t>(-after, 0), 0));
    }
    std::vector<Tensor> parts;
    auto block = [&](int64_t n) {
      Shape s = out.sizes();
      s[dim] = n;
      return dp::full(s, options.value(), options_of(out));
    };
    if (before > 0) parts.push_back(block(before));
    parts.push_back(out);
    if (after > 0) parts.push_back(block(after));
    if (parts.size() > 1) out = dp::cat(parts, dim);
  }
  return out;
}

}  // namespace dp::nn::functional
