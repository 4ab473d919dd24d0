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
//
// Per-argument dims (SplitOptions::arg_dims, DataParallelOptions::in_dims; vmap's in_dims): each
// argument's tensors are split along that argument's own dim (an RNN's [T, B, *] input on dim 1,
// its lengths [B] on dim 0, h0 [L*D, B, H] on dim 1), or not at all (std::nullopt: the whole
// value, moved to each replica's device). Every split argument must then hold the same batch, and
// a std::vector of non-tensors (std::vector<int64_t> lengths, std::vector<std::string> ids) inside
// a split argument is split with the batch into consecutive runs, one per replica (by default such
// a vector is copied whole, as PyTorch copies a Python list). Outputs: gather_outputs' out_dims
// give each element of a returned std::tuple / std::pair (or the whole output) its own dim.
//
// Gathering checks that the replicas' tensors agree in every dim but the gather dim, and names the
// output and the shapes when they don't (the PyTorch FAQ's pad_packed_sequence mistake).
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
  // Per-argument dims for scatter_args, one per argument: a dim, or std::nullopt (not split: every
  // replica gets the whole value). Empty: every argument along `dim`, vectors of non-tensors copied.
  std::vector<std::optional<int64_t>> arg_dims;
  // How errors name argument i (default "argument i").
  std::vector<std::string> arg_names;
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

// Whether a value of type T may hold tensors by the rules above (a struct with fields: assumed so).
template <typename T>
struct holds_tensors;
template <typename T>
inline constexpr bool holds_tensors_v = holds_tensors<T>::value;
template <typename T>
struct holds_tensors : std::bool_constant<std::is_same_v<T, Tensor>> {};
template <typename V, typename A>
struct holds_tensors<std::vector<V, A>> : holds_tensors<V> {};
template <typename V, size_t N>
struct holds_tensors<std::array<V, N>> : holds_tensors<V> {};
template <typename V>
struct holds_tensors<std::optional<V>> : holds_tensors<V> {};
template <typename... Ts>
struct holds_tensors<std::tuple<Ts...>> : std::bool_constant<(holds_tensors_v<Ts> || ...)> {};
template <typename A, typename B>
struct holds_tensors<std::pair<A, B>> : std::bool_constant<holds_tensors_v<A> || holds_tensors_v<B>> {};
template <typename K, typename V, typename C, typename A>
struct holds_tensors<std::map<K, V, C, A>> : holds_tensors<V> {};
template <typename K, typename V, typename H, typename E, typename A>
struct holds_tensors<std::unordered_map<K, V, H, E, A>> : holds_tensors<V> {};

// A std::vector of values without tensors: one element per sample when split with the batch.
template <typename T>
concept sequence_of_values = is_vector<T>::value && !holds_tensors_v<typename T::value_type> && !has_fields<typename T::value_type>;

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
  // Where `dim` came from, for messages ("dim 0", "out_dims[1] = 2").
  std::string dim_source;
  // out_dims given: std::vector outputs of non-tensors are concatenated (the replicas' runs).
  bool concat_sequences = false;
  Tensor gather(const std::vector<Tensor>& parts);
  [[noreturn]] void fail(const std::string& what);
  // The replicas' tensors must agree in every dim but the gather dim (ShapeError naming the output,
  // the shapes and the pad_packed_sequence fix otherwise).
  void check_shapes(const std::vector<Tensor>& parts) const;
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

  // Calls f(n) for every std::vector of non-tensors in v (n: its length), in the order rebuild()
  // meets them.
  template <typename F>
  static void sequences(const T& v, F& f) {
    if constexpr (sequence_of_values<T>) {
      f(v.size());
    } else if constexpr (is_vector<T>::value || is_array<T>::value) {
      for (const auto& e : v) Walk<std::decay_t<decltype(e)>>::sequences(e, f);
    } else if constexpr (is_tuple_like<T>::value) {
      std::apply([&](const auto&... e) { (Walk<std::decay_t<decltype(e)>>::sequences(e, f), ...); }, v);
    } else if constexpr (is_map<T>::value) {
      for (const auto& kv : v) Walk<std::decay_t<decltype(kv.second)>>::sequences(kv.second, f);
    } else if constexpr (is_optional<T>::value) {
      if (v) Walk<typename T::value_type>::sequences(*v, f);
    } else if constexpr (has_fields<T>) {
      std::apply([&](const auto&... e) { (Walk<std::decay_t<decltype(e)>>::sequences(e, f), ...); }, Fields<T>::tie(v));
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

  // `next()` gives the replacement of each tensor in turn; `next.slice(v)`, when Next has it, the
  // replacement of each vector of non-tensors (else it is copied).
  template <typename Next>
  static T rebuild(const T& v, Next& next) {
    if constexpr (std::is_same_v<T, Tensor>) {
      return v.defined() ? next() : Tensor();
    } else if constexpr (sequence_of_values<T>) {
      if constexpr (requires { next.slice(v); })
        return next.slice(v);
      else
        return v;
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
      if constexpr (sequence_of_values<T>) {
        if (g.concat_sequences) {  // the replicas' runs of a vector split with the batch
          T out;
          for (auto& p : parts) out.insert(out.end(), std::make_move_iterator(p.begin()), std::make_move_iterator(p.end()));
          return out;
        }
      }
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

// What a scatter did: how many replicas run and which rows of the batch each got (along `dim`,
// measured on the first split tensor, or on the first vector split with the batch).
struct ScatterPlan {
  size_t replicas = 0;
  bool split = false;  // false: nothing was split (every replica got whole values)
  int64_t batch = 0;
  int64_t dim = 0;
  std::vector<int64_t> rows;  // per replica (when split)
};
// A tensor of argument `arg`, and the length of a vector of non-tensors of argument `arg`.
struct ArgTensor {
  Tensor tensor;
  size_t arg;
};
struct ArgSequence {
  size_t length;
  size_t arg;
};
// scatter_args' plan: pieces[tensor][replica] for `tensors` (split along their argument's dim, or
// whole on each device), checked, with what was done in `plan`. Without arg_dims: split_all.
std::vector<std::vector<Tensor>> plan_scatter(const std::vector<ArgTensor>& tensors, const std::vector<ArgSequence>& sequences,
                                              const SplitOptions& options, ScatterPlan& plan);

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

namespace detail {
// Replica j's replacements while its arguments are rebuilt: the next tensor piece, and the run of
// a vector of non-tensors that belongs to replica j (when the argument is split).
struct ScatterCursor {
  const std::vector<std::vector<Tensor>>* pieces;
  size_t* next_piece;
  size_t replica;
  bool split_sequences;
  int64_t offset, rows;
  Tensor operator()() { return (*pieces)[(*next_piece)++][replica]; }
  template <typename V>
  V slice(const V& v) const {
    if (!split_sequences) return v;
    return V(v.begin() + offset, v.begin() + offset + rows);
  }
};
}  // namespace detail

// Calls f(tensor) for every defined tensor in a value of any type scatter and gather accept
// (tensors, vectors, arrays, tuples, maps, optionals, DP_FIELDS structs, nested), in the order they
// use. DistributedDataParallel finds its outputs' tensors with it (PyTorch's _find_tensors).
template <typename T, typename F>
void for_each_tensor(const T& value, F&& f) {
  detail::Walk<T>::tensors(value, f);
}

// Scatters a tuple of arguments: result[j] is replica j's argument tuple. `plan`, when given,
// receives what was split (the rows of each replica).
template <typename... Args>
std::vector<std::tuple<Args...>> scatter_args(const std::tuple<Args...>& args, const SplitOptions& options, detail::ScatterPlan* plan = nullptr) {
  using Tuple = std::tuple<Args...>;
  constexpr size_t kArgs = sizeof...(Args);
  const bool per_arg = !options.arg_dims.empty();
  DP_CHECK(!per_arg || options.arg_dims.size() == kArgs, ValueError, "scatter: ", options.arg_dims.size(), " per-argument dims for ", kArgs,
           " arguments (give one per argument; std::nullopt for one that is not split)");
  std::vector<detail::ArgTensor> tensors;
  std::vector<detail::ArgSequence> sequences;
  [&]<size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          using A = std::tuple_element_t<I, Tuple>;
          auto collect = [&tensors](const Tensor& t) { tensors.push_back({t, I}); };
          detail::Walk<A>::tensors(std::get<I>(args), collect);
          if (per_arg && options.arg_dims[I]) {
            auto lengths = [&sequences](size_t n) { sequences.push_back({n, I}); };
            detail::Walk<A>::sequences(std::get<I>(args), lengths);
          }
        }(),
        ...);
  }
  (std::make_index_sequence<kArgs>{});
  detail::ScatterPlan local;
  detail::ScatterPlan& p = plan ? *plan : local;
  const std::vector<std::vector<Tensor>> pieces = detail::plan_scatter(tensors, sequences, options, p);
  std::vector<Tuple> out;
  out.reserve(p.replicas);
  int64_t offset = 0;
  for (size_t j = 0; j < p.replicas; ++j) {
    size_t next_piece = 0;
    const int64_t rows = p.split ? p.rows[j] : 0;
    out.push_back([&]<size_t... I>(std::index_sequence<I...>) {
      return Tuple{[&] {
        detail::ScatterCursor cursor{&pieces, &next_piece, j, per_arg && p.split && options.arg_dims[I].has_value(), offset, rows};
        return detail::Walk<std::tuple_element_t<I, Tuple>>::rebuild(std::get<I>(args), cursor);
      }()...};
    }(std::make_index_sequence<kArgs>{}));
    offset += rows;
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
  detail::TensorGatherer g{destination, dim, {}, false, "dim " + std::to_string(dim), false};
  return detail::Walk<T>::gather(outputs, g);
}

// The same with one dim per output element (DataParallelOptions::out_dims, vmap's out_dims): for
// a std::tuple / std::pair output, out_dims[i] applies to every tensor of element i (a (h_n, c_n)
// pair included); for any other output, out_dims holds one dim for all of it. Vectors of
// non-tensors are concatenated (the runs of a vector split with the batch). Empty: `dim` for all.
template <typename T>
T gather_outputs(std::vector<T> outputs, Device destination, int64_t dim, const std::vector<int64_t>& out_dims) {
  if (out_dims.empty()) return gather_outputs(std::move(outputs), destination, dim);
  DP_CHECK(!outputs.empty(), ValueError, "gather: no outputs to gather");
  auto gatherer = [&](size_t i) {
    return detail::TensorGatherer{destination, out_dims[i], {}, false, "out_dims[" + std::to_string(i) + "] = " + std::to_string(out_dims[i]), true};
  };
  if constexpr (detail::is_tuple_like<T>::value) {
    constexpr size_t kOut = std::tuple_size_v<T>;
    DP_CHECK(out_dims.size() == kOut, ValueError, "DataParallel: out_dims has ", out_dims.size(), " entries but the forward returns ", kOut,
             " elements (a std::tuple or std::pair): give one dim per element");
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return T{[&] {
        using E = std::tuple_element_t<I, T>;
        std::vector<E> column;
        column.reserve(outputs.size());
        for (auto& o : outputs) column.push_back(std::move(std::get<I>(o)));
        detail::TensorGatherer g = gatherer(I);
        g.path.push(".get<" + std::to_string(I) + ">()");
        return detail::Walk<E>::gather(column, g);
      }()...};
    }
    (std::make_index_sequence<kOut>{});
  } else {
    DP_CHECK(out_dims.size() == 1, ValueError, "DataParallel: out_dims has ", out_dims.size(),
             " entries but the forward returns one value (not a std::tuple or std::pair): give one dim");
    detail::TensorGatherer g = gatherer(0);
    return detail::Walk<T>::gather(outputs, g);
  }
}

// A single device's output moved to `destination` (tensors moved, differentiably, only where they
// are elsewhere; nothing concatenated).
template <typename T>
T move_output(T output, Device destination) {
  std::vector<T> parts;
  parts.push_back(std::move(output));
  detail::TensorGatherer g{destination, 0, {}, true, "dim 0", false};
  return detail::Walk<T>::gather(parts, g);
}

}  // namespace dp::parallel
