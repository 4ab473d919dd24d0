// Tensor::to_string() and operator<<: PyTorch's repr (torch/_tensor_str.py, default print options:
// precision 4, threshold 1000, edgeitems 3, linewidth 80), reproduced character for character:
//   - one formatter for the whole tensor (of the summarised data when numel > 1000) decides
//     between integer style ("1."), fixed ("0.1000") and scientific ("1.0000e+08") notation and
//     the common width;
//   - rows wrap at 80 columns; dims longer than 6 are summarised as 3 items, "...", 3 items;
//   - suffixes: device='cpu:1' (any device but the host "cpu"), size=(0, 3) for empty tensors,
//     dtype=torch.float64 (every dtype but float32, int64, bool), grad_fn=<...> or
//     requires_grad=True; a suffix that would pass column 80 goes on its own line.
#include <cmath>
#include <cstdio>
#include "dp/autograd/node.h"  // IWYU pragma: keep (grad_fn()->name(): a use through a pointer)
#include "dp/core/tensor.h"

namespace dp {

namespace {

constexpr int kPrecision = 4;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kLineWidth = 80;

// Python's format(float, ".{p}f") / ".{p}e": nan and inf are spelled "nan", "inf", "-inf".
std::string format_float(double v, int precision, char conv) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[512];
  const char fmt[] = {'%', '.', '*', conv, '\0'};
  std::snprintf(buf, sizeof(buf), fmt, precision, v);
  return buf;
}

enum class Kind { Floating, Integral, Boolean };

// The elements of a tensor, row-major, on the host: doubles for floating types (float16/bfloat16
// widen exactly, as PyTorch prints them via float32), int64 for integers, 0/1 for bool.
struct HostValues {
  Kind kind;
  std::vector<double> f;
  std::vector<int64_t> i;
  double fval(int64_t k) const { return f[k]; }
};

class Formatter {
 public:
  Formatter(const HostValues& hv, const std::vector<int64_t>& shown) : kind_(hv.kind) {
    if (kind_ != Kind::Floating) {
      for (int64_t k : shown) width_ = std::max<int64_t>(width_, static_cast<int64_t>(plain(hv, k).size()));
      return;
    }
    std::vector<double> nz;
    for (int64_t k : shown) {
      double v = hv.f[k];
      if (std::isfinite(v) && v != 0.0) nz.push_back(v);
    }
    if (nz.empty()) return;
    double mn = std::fabs(nz[0]), mx = mn;
    for (double v : nz) {
      mn = std::min(mn, std::fabs(v));
      mx = std::max(mx, std::fabs(v));
      if (v != std::ceil(v)) int_mode_ = false;
    }
    if (int_mode_) {
      if (mx / mn > 1000.0 || mx > 1.0e8) {
        sci_mode_ = true;
        for (double v : nz) width_ = std::max<int64_t>(width_, format_float(v, kPrecision, 'e').size());
      } else {
        for (double v : nz) width_ = std::max<int64_t>(width_, format_float(v, 0, 'f').size() + 1);
      }
    } else {
      if (mx / mn > 1000.0 || mx > 1.0e8 || mn < 1.0e-4) {
        sci_mode_ = true;
        for (double v : nz) width_ = std::max<int64_t>(width_, format_float(v, kPrecision, 'e').size());
      } else {
        for (double v : nz) width_ = std::max<int64_t>(width_, format_float(v, kPrecision, 'f').size());
      }
    }
  }

  int64_t width() const { return width_; }

  std::string format(const HostValues& hv, int64_t k) const {
    std::string s;
    if (kind_ == Kind::Floating) {
      const double v = hv.f[k];
      if (sci_mode_) {
        s = format_float(v, kPrecision, 'e');
      } else if (int_mode_) {
        s = format_float(v, 0, 'f');
        if (std::isfinite(v)) s += ".";
      } else {
        s = format_float(v, kPrecision, 'f');
      }
    } else {
      s = plain(hv, k);
    }
    if (static_cast<int64_t>(s.size()) < width_) s.insert(0, static_cast<size_t>(width_ - static_cast<int64_t>(s.size())), ' ');
    return s;
  }

 private:
  static std::string plain(const HostValues& hv, int64_t k) {
    if (hv.kind == Kind::Boolean) return hv.i[k] ? "True" : "False";
    return std::to_string(hv.i[k]);
  }
  Kind kind_;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  int64_t width_ = 1;
};

struct Printer {
  const HostValues& hv;
  const Shape& sizes;
  Shape strides;  // contiguous strides of the host copy
  bool summarize;

  // The indices shown along a dim of the given size.
  std::vector<int64_t> shown_indices(int64_t size) const {
    std::vector<int64_t> idx;
    if (summarize && size > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
      for (int64_t i = size - kEdgeItems; i < size; ++i) idx.push_back(i);
    } else {
      for (int64_t i = 0; i < size; ++i) idx.push_back(i);
    }
    return idx;
  }

  // Flat positions of every element that is printed (what the formatter sees).
  void collect(size_t d, int64_t base, std::vector<int64_t>& out) const {
    if (d == sizes.size()) {
      out.push_back(base);
      return;
    }
    for (int64_t i : shown_indices(sizes[d])) collect(d + 1, base + i * strides[d], out);
  }

  std::string vector_str(int64_t base, int64_t indent, const Formatter& fmt) const {
    const size_t d = sizes.size() - 1;
    const int64_t element_length = fmt.width() + 2;
    const int64_t per_line = std::max<int64_t>(1, (kLineWidth - indent) / element_length);
    std::vector<std::string> data;
    const int64_t n = sizes[d];
    if (summarize && n > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) data.push_back(fmt.format(hv, base + i * strides[d]));
      data.push_back(" ...");
      for (int64_t i = n - kEdgeItems; i < n; ++i) data.push_back(fmt.format(hv, base + i * strides[d]));
    } else {
      for (int64_t i = 0; i < n; ++i) data.push_back(fmt.format(hv, base + i * strides[d]));
    }
    std::string out = "[";
    for (size_t i = 0; i < data.size(); ++i) {
      if (i > 0) {
        if (static_cast<int64_t>(i) % per_line == 0) {
          out += ",\n";
          out.append(static_cast<size_t>(indent + 1), ' ');
        } else {
          out += ", ";
        }
      }
      out += data[i];
    }
    return out + "]";
  }

  std::string tensor_str(size_t d, int64_t base, int64_t indent, const Formatter& fmt) const {
    const size_t nd = sizes.size();
    if (nd == d) return fmt.format(hv, base);
    if (nd - d == 1) return vector_str(base, indent, fmt);
    const int64_t n = sizes[d];
    std::vector<std::string> slices;
    if (summarize && n > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) slices.push_back(tensor_str(d + 1, base + i * strides[d], indent + 1, fmt));
      slices.push_back("...");
      for (int64_t i = n - kEdgeItems; i < n; ++i) slices.push_back(tensor_str(d + 1, base + i * strides[d], indent + 1, fmt));
    } else {
      for (int64_t i = 0; i < n; ++i) slices.push_back(tensor_str(d + 1, base + i * strides[d], indent + 1, fmt));
    }
    std::string sep(1, ',');
    sep.append(nd - d - 1, '\n');
    sep.append(static_cast<size_t>(indent + 1), ' ');
    std::string out = "[";
    for (size_t i = 0; i < slices.size(); ++i) {
      if (i) out += sep;
      out += slices[i];
    }
    return out + "]";
  }
};

HostValues host_values(const Tensor& t) {
  HostValues hv;
  if (is_floating_point(t.dtype())) {
    hv.kind = Kind::Floating;
    const Tensor c = t.detach().to(Device::cpu(), kFloat64).contiguous();
    const double* p = c.numel() ? c.data_ptr<double>() : nullptr;
    hv.f.assign(p, p + c.numel());
  } else {
    hv.kind = t.dtype() == kBool ? Kind::Boolean : Kind::Integral;
    const Tensor c = t.detach().to(Device::cpu(), kInt64).contiguous();
    const int64_t* p = c.numel() ? c.data_ptr<int64_t>() : nullptr;
    hv.i.assign(p, p + c.numel());
  }
  return hv;
}

std::string tuple_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  if (s.size() == 1) out += ",";
  return out + ")";
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "[ Tensor (undefined) ]";
  const std::string prefix = "tensor(";
  const int64_t indent = static_cast<int64_t>(prefix.size());
  std::vector<std::string> suffixes;
  if (device() != Device::cpu()) suffixes.push_back("device='" + device().str() + "'");
  const DType dt = dtype();
  std::string body;
  if (numel() == 0) {
    if (dim() != 1) suffixes.push_back("size=" + tuple_str(sizes()));
    if (dt != kFloat32) suffixes.push_back(std::string("dtype=torch.") + dtype_name(dt));
    body = "[]";
  } else {
    if (dt != kFloat32 && dt != kInt64 && dt != kBool) suffixes.push_back(std::string("dtype=torch.") + dtype_name(dt));
    HostValues hv = host_values(*this);
    Printer pr{hv, sizes(), contiguous_strides(sizes()), numel() > kThreshold};
    std::vector<int64_t> shown;
    pr.collect(0, 0, shown);
    Formatter fmt(hv, shown);
    body = pr.tensor_str(0, 0, indent, fmt);
  }
  if (const auto& fn = grad_fn())
    suffixes.push_back("grad_fn=<" + fn->name() + ">");
  else if (requires_grad())
    suffixes.push_back("requires_grad=True");

  std::string out = prefix + body;
  const size_t nl = out.rfind('\n');
  int64_t last_line_len = static_cast<int64_t>(out.size()) - (nl == std::string::npos ? -1 : static_cast<int64_t>(nl)) + 1;
  for (const std::string& s : suffixes) {
    const int64_t len = static_cast<int64_t>(s.size());
    if (last_line_len + len + 2 > kLineWidth) {
      out += ",\n";
      out.append(static_cast<size_t>(indent), ' ');
      out += s;
      last_line_len = indent + len;
    } else {
      out += ", " + s;
      last_line_len += len + 2;
    }
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace dp
