#pragma once
// Typed, recursive scatter and gather of whole argument lists and outputs: the C++ shape of
// PyTorch's scatter_kwargs / gather over *args, **kwargs and nested outputs.
//
// The rules, by type (recursively):
//   dp::Tensor                      scatter: split along dim (comm.h's scatter, differentiable);
//                                   an undefined Tensor reaches every replica undefined.
//                                   gather: concatenated on the output device (comm.h's gather).
//   std::vector, std::array,        element by element; gather checks that the replicas' lengths
//   std::tuple, std::pair           agree.
//   std::map, std::unordered_map    keys copied, values scattered; gather checks that every
//                                   replica returned the same keys.
//   std::optional                   scattered if set; gather: all set or all empty.
//   structs with DP_FIELDS(...)     the listed fields as above; other members are copied (scatter)
//   or a Fields<T> specialisation   or taken from replica 0's output (gather).
//   anything else                   scatter: copied to every replica unchanged (ints, strings,
//                                   flags, your config objects). gather: the replicas' values
//                                   must be equal (==), and that value is returned; a type
//                                   without == can't be gathered (compile-time error).
//
//   struct Batch {                       // a user struct, scatterable and gatherable:
//     dp::Tensor images, labels;
//     std::string source;                // not listed: copied as is
//     DP_FIELDS(images, labels)
//   };
//
// For a type you can't edit, specialise the trait at global scope instead:
//   template <> struct dp::parallel::Fields<Theirs> {
//     static auto tie(Theirs& t) { return std::tie(t.a, t.b); }
//     static auto tie(const Theirs& t) { return std::tie(t.a, t.b); }
//   };
//
// How many replicas run: every tensor found is split with the same policy (see SplitOptions);
// they must all give the same number of chunks (PyTorch silently drops the extra chunks of the
// longer one; here that is an error naming the shapes). That number may be smaller than the number
// of devices (a batch of 1 on 2 devices runs one replica). Arguments with no tensor at all run on
// every device.
#include <array>
#include <concepts>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>
#include "dp/core/tensor.h"

// Inside a struct: the fields DataParallel scatters and gathers.
#define DP_FIELDS(...)                               \
  auto dp_fields() { return std::tie(__VA_ARGS__); } \
  auto dp_fields() const { return std::tie(__VA_ARGS__); }

namespace dp::parallel {

// How tensors are split across devices.
enum class SplitPolicy {
  Chunk,     // torch.chunk: ceil(B / n) rows per device, possibly fewer chunks than devices
  Balanced,  // every device gets floor or ceil of B / n rows (uses all devices when B >= n)
};

struct SplitOptions {
  std::vector<Device> devices;
  int64_t dim = 0;
  SplitPolicy policy = SplitPolicy::Chunk;
  // Explicit rows per device (overrides the policy); must sum to each tensor's size along dim.
  std::vector<int64_t> chunk_sizes;
};

// The sizes a tensor with `batch` rows along the split dim is cut into.
std::vector<int64_t> split_sizes(const SplitOptions& options, int64_t batch);

// `Fields<T>::tie(value)` returns a tuple of references to T's scattered/gathered fields. The
// default uses the DP_FIELDS member; specialise it for types you can't edit.
template <typename T>
struct Fields {
  static auto tie(T& v) requires requires(T& x) { x.dp_fields(); }
  { return v.dp_fields(); }
  static auto tie(const T& v) requires requires(const T& x) { x.dp_fields(); }
  { return v.dp_fields(); }
};

namespace detail {

template <typename T>
concept has_fields = requires(T& v, const T& c) {
  Fields<T>::tie(v);
  Fields<T>::tie(c);
};

template <typename T>
struct is_vector : std::false_type {};
template <typename V, typename A>
struct is_vector<std::vector<V, A>> : std::true_type {};
template <typename T>
struct is_array : std::false_type {};
template <typename V, size_t N>
struct is_array<std::array<V, N>> : std::true_type {};
template <typename T>
struct is_tuple_like : std::false_type {};
template <typename... Ts>
struct is_tuple_like<std::tuple<Ts...>> : std::true_type {};
template <typename A, typename B>
struct is_tuple_like<std::pair<A, B>> : std::true_type {};
template <typename T>
struct is_map : std::false_type {};
template <typename K, typename V, typename C, typename A>
struct is_map<std::map<K, V, C, A>> : std::true_type {};
template <typename K, typename V, typename H, typename E, typename A>
struct is_map<std::unordered_map<K, V, H, E, A>> : std::true_type {};
template <typename T>
struct is_optional : std::false_type {};
template <typename V>
struct is_optional<std::optional<V>> : std::true_type {};
template <typename T>
inline constexpr bool always_false = false;

// A printable key for error messages.
template <typename K>
std::string key_str(const K& k) {
  if constexpr (std::is_convertible_v<const K&, std::string>)
    return "'" + std::string(k) + "'";
  else if constexpr (std::is_arithmetic_v<K>)
    return std::to_string(k);
  else
    return "<key>";
}

// Where in an output structure a gather is ("output", "output[1]", "output['logits'].first").
class Path {
 public:
  void push(std::string s) { parts_.push_back(std::move(s)); }
  void pop() { parts_.pop_back(); }
  std::string str() const {
    std::string s = "output";
    for (const auto& p : parts_) s += p;
    return s;
  }

 private:
  std::vector<std::string> parts_;
};

// Gathers one set of replica tensors (implemented with comm.h's gather).
struct TensorGatherer {
  Device destination;
  int64_t dim = 0;
  Path path;
  // A single device's output: tensors are moved to the destination (no copy when already there,
  // scalars stay scalars) instead of being concatenated.
  bool move_only = false;
  Tensor gather(const std::vector<Tensor>& parts);
  [[noreturn]] void fail(const std::string& what);
};

// Collects the tensors of a value in a fixed order, and rebuilds the value from replacements
// taken in the same order.
template <typename T>
struct Walk {
  template <typename F>
  static void tensors(const T& v, F& f) {
    if constexpr (std::is_same_v<T, Tensor>) {
      if (v.defined()) f(v);
    } else if constexpr (is_vector<T>::value || is_array<T>::value) {
      for (const auto& e : v) Walk<std::decay_t<decltype(e)>>::tensors(e, f);
    } else if constexpr (is_tuple_like<T>::value) {
      std::apply([&](const auto&... e) { (Walk<std::decay_t<decltype(e)>>::tensors(e, f), ...); }, v);
    } else if constexpr (is_map<T>::value) {
      for (const auto& kv : v) Walk<std::decay_t<decltype(kv.second)>>::tensors(kv.second, f);
    } else if constexpr (is_optional<T>::value) {
      if (v) Walk<typename T::value_type>::tensors(*v, f);
    } else if constexpr (has_fields<T>) {
      std::apply([&](const auto&... e) { (Walk<std::decay_t<decltype(e)>>::tensors(e, f), ...); }, Fields<T>::tie(v));
    }
  }

  // Calls f(t) on every defined tensor of v, by reference, in the same order (f may replace it).
  template <typename F>
  static void update(T& v, F& f) {
    if constexpr (std::is_same_v<T, Tensor>) {
      if (v.defined()) f(v);
    } else if constexpr (is_vector<T>::value || is_array<T>::value) {
      for (auto& e : v) Walk<std::decay_t<decltype(e)>>::update(e, f);
    } else if constexpr (is_tuple_like<T>::value) {
      std::apply([&](auto&... e) { (Walk<std::decay_t<decltype(e)>>::update(e, f), ...); }, v);
    } else if constexpr (is_map<T>::value) {
      for (auto& kv : v) Walk<std::decay_t<decltype(kv.second)>>::update(kv.second, f);
    } else if constexpr (is_optional<T>::value) {
      if (v) Walk<typename T::value_type>::update(*v, f);
    } else if constexpr (has_fields<T>) {
      std::apply([&](auto&... e) { (Walk<std::decay_t<decltype(e)>>::update(e, f), ...); }, Fields<T>::tie(v));
    }
  }

  template <typename Next>
  static T rebuild(const T& v, Next& next) {
    if constexpr (std::is_same_v<T, Tensor>) {
      return v.defined() ? next() : Tensor();
    } else if constexpr (is_vector<T>::value) {
      T out;
      out.reserve(v.size());
      for (const auto& e : v) out.push_back(Walk<typename T::value_type>::rebuild(e, next));
      return out;
    } else if constexpr (is_array<T>::value) {
      T out = v;
      for (size_t i = 0; i < v.size(); ++i) out[i] = Walk<typename T::value_type>::rebuild(v[i], next);
      return out;
    } else if constexpr (is_tuple_like<T>::value) {
      // Elements are rebuilt left to right (braced initialisation fixes the order).
      return std::apply([&](const auto&... e) { return T{Walk<std::decay_t<decltype(e)>>::rebuild(e, next)...}; }, v);
    } else if constexpr (is_map<T>::value) {
      T out;
      for (const auto& kv : v) out.emplace(kv.first, Walk<std::decay_t<decltype(kv.second)>>::rebuild(kv.second, next));
      return out;
    } else if constexpr (is_optional<T>::value) {
      if (!v) return v;
      return T(Walk<typename T::value_type>::rebuild(*v, next));
    } else if constexpr (has_fields<T>) {
      T out = v;
      auto src = Fields<T>::tie(v);
      auto dst = Fields<T>::tie(out);
      [&]<size_t... I>(std::index_sequence<I...>) {
        ((std::get<I>(dst) = Walk<std::decay_t<std::tuple_element_t<I, decltype(src)>>>::rebuild(std::get<I>(src), next)), ...);
      }
      (std::make_index_sequence<std::tuple_size_v<decltype(src)>>{});
      return out;
    } else {
      return v;  // not scattered: every replica gets a copy
    }
  }

  // One value from the replicas' outputs.
  static T gather(std::vector<T>& parts, TensorGatherer& g) {
    if constexpr (std::is_same_v<T, Tensor>) {
      return g.gather(parts);
    } else if constexpr (is_vector<T>::value) {
      using E = typename T::value_type;
      for (size_t i = 1; i < parts.size(); ++i)
        if (parts[i].size() != parts[0].size())
          g.fail("replica 0 returned " + std::to_string(parts[0].size()) + " elements but replica " + std::to_string(i) + " returned " +
                 std::to_string(parts[i].size()));
      T out;
      out.reserve(parts[0].size());
      for (size_t e = 0; e < parts[0].size(); ++e) {
        std::vector<E> column;
        column.reserve(parts.size());
        for (auto& p : parts) column.push_back(std::move(p[e]));
        g.path.push("[" + std::to_string(e) + "]");
        out.push_back(Walk<E>::gather(column, g));
        g.path.pop();
      }
      return out;
    } else if constexpr (is_array<T>::value) {
      using E = typename T::value_type;
      T out = parts[0];
      for (size_t e = 0; e < out.size(); ++e) {
        std::vector<E> column;
        for (auto& p : parts) column.push_back(std::move(p[e]));
        g.path.push("[" + std::to_string(e) + "]");
        out[e] = Walk<E>::gather(column, g);
        g.path.pop();
      }
      return out;
    } else if constexpr (is_tuple_like<T>::value) {
      return [&]<size_t... I>(std::index_sequence<I...>) { return T{gather_element<I>(parts, g)...}; }
      (std::make_index_sequence<std::tuple_size_v<T>>{});
    } else if constexpr (is_map<T>::value) {
      using V = typename T::mapped_type;
      for (size_t i = 1; i < parts.size(); ++i) {
        bool same = parts[i].size() == parts[0].size();
        for (const auto& kv : parts[0]) same = same && parts[i].count(kv.first) > 0;
        if (!same) {
          std::string a, b;
          for (const auto& kv : parts[0]) a += (a.empty() ? "" : ", ") + key_str(kv.first);
          for (const auto& kv : parts[i]) b += (b.empty() ? "" : ", ") + key_str(kv.first);
          g.fail("maps with different keys: replica 0 returned {" + a + "} but replica " + std::to_string(i) + " returned {" + b + "}");
        }
      }
      T out;
      for (const auto& kv : parts[0]) {
        std::vector<V> column;
        for (auto& p : parts) column.push_back(std::move(p.find(kv.first)->second));
        g.path.push("[" + key_str(kv.first) + "]");
        out.emplace(kv.first, Walk<V>::gather(column, g));
        g.path.pop();
      }
      return out;
    } else if constexpr (is_optional<T>::value) {
      using V = typename T::value_type;
      size_t set = 0;
      for (const auto& p : parts) set += p.has_value() ? 1 : 0;
      if (set == 0) return T();
      if (set != parts.size()) g.fail("an optional is set in " + std::to_string(set) + " of " + std::to_string(parts.size()) + " replicas' outputs");
      std::vector<V> values;
      for (auto& p : parts) values.push_back(std::move(*p));
      return T(Walk<V>::gather(values, g));
    } else if constexpr (has_fields<T>) {
      T out = parts[0];
      auto dst = Fields<T>::tie(out);
      [&]<size_t... I>(std::index_sequence<I...>) { ((std::get<I>(dst) = gather_field<I>(parts, g)), ...); }
      (std::make_index_sequence<std::tuple_size_v<decltype(dst)>>{});
      return out;
    } else if constexpr (std::equality_comparable<T>) {
      for (size_t i = 1; i < parts.size(); ++i)
        if (!(parts[i] == parts[0]))
          g.fail("replicas returned different values of a type that is not a tensor (replica 0 and replica " + std::to_string(i) +
                 " differ); DataParallel gathers tensors, containers of them and structs declared with DP_FIELDS, and passes on other "
                 "values only when every replica returns the same");
      return std::move(parts[0]);
    } else {
      static_assert(always_false<T>,
                    "DataParallel can't gather this output type: return tensors, standard containers of them, or a struct declared "
                    "with DP_FIELDS(...) (see dp/parallel/scatter_gather.h)");
    }
  }

 private:
  template <size_t I>
  static auto gather_element(std::vector<T>& parts, TensorGatherer& g) {
    using E = std::tuple_element_t<I, T>;
    std::vector<E> column;
    column.reserve(parts.size());
    for (auto& p : parts) column.push_back(std::move(std::get<I>(p)));
    g.path.push(".get<" + std::to_string(I) + ">()");
    E out = Walk<E>::gather(column, g);
    g.path.pop();
    return out;
  }
  template <size_t I>
  static auto gather_field(std::vector<T>& parts, TensorGatherer& g) {
    using E = std::decay_t<std::tuple_element_t<I, decltype(Fields<T>::tie(parts[0]))>>;
    std::vector<E> column;
    column.reserve(parts.size());
    for (auto& p : parts) column.push_back(std::move(std::get<I>(Fields<T>::tie(p))));
    g.path.push(".field" + std::to_string(I));
    E out = Walk<E>::gather(column, g);
    g.path.pop();
    return out;
  }
};

// Splits every tensor in `tensors` (in walk order) with one plan; returns pieces[tensor][replica]
// and the replica count. Throws if the tensors disagree on the chunk count.
std::vector<std::vector<Tensor>> split_all(const std::vector<Tensor>& tensors, const SplitOptions& options, size_t& replicas);

// "replica j of k got rows a..b of a batch of B split along dim d", one per replica, from the
// batch size and each replica's row count (errors in replicas carry it).
std::vector<std::string> describe_slices(int64_t batch, const std::vector<int64_t>& rows, int64_t dim);

// describe_slices() for arguments `packed` scattered into `inputs` (scatter_args) along `dim`,
// measured on their first tensor; empty when they hold no tensor (nothing was split).
template <typename Tuple>
std::vector<std::string> slice_notes(const Tuple& packed, const std::vector<Tuple>& inputs, int64_t dim) {
  auto first = [](const Tuple& args) {
    const Tensor* found = nullptr;
    auto take = [&found](const Tensor& t) {
      if (!found) found = &t;
    };
    Walk<Tuple>::tensors(args, take);
    return found;
  };
  const Tensor* whole = first(packed);
  if (!whole || whole->dim() == 0) return {};
  const int64_t d = dim < 0 ? dim + whole->dim() : dim;
  if (d < 0 || d >= whole->dim()) return {};
  std::vector<int64_t> rows;
  rows.reserve(inputs.size());
  for (const Tuple& in : inputs) {
    const Tensor* part = first(in);
    if (!part || part->dim() <= d) return {};
    rows.push_back(part->size(d));
  }
  return describe_slices(whole->size(d), rows, d);
}

// Moves every tensor of `value` (found by the rules above) that is not on `device` there,
// differentiably; other members are left alone.
template <typename T>
void move_tensors_to(T& value, Device device) {
  auto move = [device](Tensor& t) {
    if (t.device() != device) t = t.to(device);
  };
  Walk<T>::update(value, move);
}

}  // namespace detail

// Scatters a tuple of arguments: result[j] is replica j's argument tuple.
template <typename... Args>
std::vector<std::tuple<Args...>> scatter_args(const std::tuple<Args...>& args, const SplitOptions& options) {
  using Tuple = std::tuple<Args...>;
  std::vector<Tensor> tensors;
  auto collect = [&tensors](const Tensor& t) { tensors.push_back(t); };
  detail::Walk<Tuple>::tensors(args, collect);
  size_t replicas = 0;
  std::vector<std::vector<Tensor>> pieces = detail::split_all(tensors, options, replicas);
  std::vector<Tuple> out;
  out.reserve(replicas);
  for (size_t j = 0; j < replicas; ++j) {
    size_t cursor = 0;
    auto next = [&]() -> Tensor { return pieces[cursor++][j]; };
    out.push_back(detail::Walk<Tuple>::rebuild(args, next));
  }
  return out;
}

// Scatters one value (a tensor, a container, a struct): result[j] is replica j's part.
template <typename T>
std::vector<T> scatter_value(const T& value, const SplitOptions& options) {
  std::vector<T> out;
  for (auto& t : scatter_args(std::tuple<T>(value), options)) out.push_back(std::move(std::get<0>(t)));
  return out;
}

// Gathers the replicas' outputs (all of one type) onto `destination` along `dim`.
template <typename T>
T gather_outputs(std::vector<T> outputs, Device destination, int64_t dim = 0) {
  DP_CHECK(!outputs.empty(), ValueError, "gather: no outputs to gather");
  detail::TensorGatherer g{destination, dim, {}, false};
  return detail::Walk<T>::gather(outputs, g);
}

// A single device's output moved to `destination` (tensors moved, differentiably, only where they
// are elsewhere; nothing concatenated).
template <typename T>
T move_output(T output, Device destination) {
  std::vector<T> parts;
  parts.push_back(std::move(output));
  detail::TensorGatherer g{destination, 0, {}, true};
  return detail::Walk<T>::gather(parts, g);
}

}  // namespace dp::parallel
