#include "dp/distributed/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <sstream>
#include "dp/core/errors.h"
#include "dp/ops/factory.h"

namespace dp::distributed {

namespace {

// ---- state_hash: a word-wise multiply-xor hash. Each step h = (h ^ w) * P (P odd) is a bijection
// of h for fixed w and of w for fixed h, so a single differing word always changes the result.

constexpr uint64_t kHashPrime = 0x100000001b3ULL;       // FNV-1a's 64-bit prime
constexpr uint64_t kHashStart = 0xcbf29ce484222325ULL;  // FNV-1a's offset basis

struct Hasher {
  uint64_t h = kHashStart;
  void word(uint64_t w) { h = (h ^ w) * kHashPrime; }
  // The length, then the bytes as little-endian words (the last one zero-padded).
  void bytes(const void* data, size_t n) {
    word(n);
    const auto* p = static_cast<const unsigned char*>(data);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      word(w);
    }
    if (i < n) {
      uint64_t w = 0;
      std::memcpy(&w, p + i, n - i);
      word(w);
    }
  }
  void text(const std::string& s) { bytes(s.data(), s.size()); }
  // murmur3's finaliser (a bijection): spreads the last words' bits over the whole result.
  uint64_t finish() const {
    uint64_t x = h;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
  }
};

// ---- the byte tensors that carry messages and metadata between ranks
//
// Every tensor this file makes for a collective (bytes, headers, status and hash words) is a host
// tensor (the default device), written and read on the host; the state's own tensors are read
// through host copies.

Tensor byte_tensor(const std::string& bytes) {
  Tensor t = empty({static_cast<int64_t>(bytes.size())}, kUInt8);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

std::string bytes_of(const Tensor& t) { return std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel())); }

// Blocks until the collective is done; rethrows the group's error (PeerLostError, ...).
void wait(const WorkPtr& work) { work->wait(); }

// What a rank announces to the others: an outcome and the length of what follows.
enum Status : int64_t { kOk = 0, kIOError = 1, kValueError = 2, kOtherError = 3 };

// Broadcasts root's status and text (its length first, so the others can allocate); returns them
// on every rank.
std::pair<int64_t, std::string> broadcast_outcome(ProcessGroup& pg, int root, int64_t status, const std::string& text) {
  const bool is_root = pg.rank() == root;
  Tensor header = empty({2}, kInt64);
  int64_t* h = header.data_ptr<int64_t>();
  h[0] = is_root ? status : 0;
  h[1] = is_root ? static_cast<int64_t>(text.size()) : 0;
  wait(pg.broadcast(header, root));
  const int64_t got_status = h[0], length = h[1];
  DP_CHECK(length >= 0, distributed::DistributedError, "checkpoint: rank ", root, " announced a negative length ", length);
  if (length == 0) return {got_status, std::string()};
  Tensor body = is_root ? byte_tensor(text) : empty({length}, kUInt8);
  wait(pg.broadcast(body, root));
  return {got_status, bytes_of(body)};
}

// ---- the metadata blob of load_checkpoint: names, dtypes, shapes and the file's metadata

class BlobWriter {
 public:
  void u64(uint64_t v) { out_.append(reinterpret_cast<const char*>(&v), 8); }
  void str(const std::string& s) {
    u64(s.size());
    out_ += s;
  }
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

class BlobReader {
 public:
  explicit BlobReader(const std::string& in) : in_(in) {}
  uint64_t u64() {
    need(8);
    uint64_t v;
    std::memcpy(&v, in_.data() + pos_, 8);
    pos_ += 8;
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    need(n);
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  void need(uint64_t n) const {
    DP_CHECK(n <= in_.size() - pos_, distributed::DistributedError, "load_checkpoint: the metadata received from the root is truncated (", in_.size(),
             " bytes, needed ", n, " more at byte ", pos_, ")");
  }
  const std::string& in_;
  size_t pos_ = 0;
};

std::string encode_layout(const SafetensorsFile& file) {
  BlobWriter w;
  w.u64(file.tensors.size());
  for (const auto& item : file.tensors) {
    const Tensor& t = item.value();
    w.str(item.key());
    w.str(dp::detail::safetensors_dtype_name(t.dtype()));
    w.u64(t.sizes().size());
    for (int64_t d : t.sizes()) w.u64(static_cast<uint64_t>(d));
  }
  w.u64(file.metadata.size());
  for (const auto& [k, v] : file.metadata) {
    w.str(k);
    w.str(v);
  }
  return w.bytes();
}

// Empty tensors shaped as root's, and root's metadata.
SafetensorsFile decode_layout(const std::string& blob) {
  BlobReader r(blob);
  SafetensorsFile file;
  const uint64_t count = r.u64();
  for (uint64_t i = 0; i < count; ++i) {
    std::string name = r.str();
    const DType dtype = dp::detail::safetensors_dtype_from_name(r.str(), "load_checkpoint: tensor '" + name + "'");
    const uint64_t ndim = r.u64();
    DP_CHECK(ndim <= 64, distributed::DistributedError, "load_checkpoint: tensor '", name, "' arrived with ", ndim, " dimensions");
    std::vector<int64_t> shape(ndim);
    for (auto& d : shape) d = static_cast<int64_t>(r.u64());
    file.tensors.insert(name, empty(shape, dtype));
  }
  const uint64_t entries = r.u64();
  for (uint64_t i = 0; i < entries; ++i) {
    std::string k = r.str();
    file.metadata[k] = r.str();
  }
  DP_CHECK(r.done(), distributed::DistributedError, "load_checkpoint: the metadata received from the root has trailing bytes");
  return file;
}

// ---- helpers

void check_root(const ProcessGroup& pg, int root, const char* op) {
  DP_CHECK(root >= 0 && root < pg.size(), ValueError, op, ": root must lie in [0, ", pg.size(), "), got ", root);
}

// The outcome of running fn: kOk, or the error's kind and message.
template <typename Fn>
std::pair<int64_t, std::string> capture(Fn&& fn) {
  try {
    fn();
    return {kOk, std::string()};
  } catch (const IOError& e) {
    return {kIOError, e.what()};
  } catch (const ValueError& e) {
    return {kValueError, e.what()};
  } catch (const std::exception& e) {
    return {kOtherError, e.what()};
  } catch (...) {
    return {kOtherError, "an exception that is not a std::exception"};
  }
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::ostringstream os;
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  return os.str();
}

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

// Step 1 of save_checkpoint: allgathers {hashed ok, hash}; throws the same error on every rank if a
// rank could not hash its state or holds a different one than root.
void verify_identical(ProcessGroup& pg, const OrderedDict<std::string, Tensor>& state, const std::string& path, int root) {
  uint64_t hash = 0;
  auto [status, message] = capture([&] { hash = state_hash(state); });
  Tensor mine = empty({2}, kInt64);
  mine.data_ptr<int64_t>()[0] = status;
  std::memcpy(mine.data_ptr<int64_t>() + 1, &hash, 8);
  std::vector<Tensor> all;
  for (int r = 0; r < pg.size(); ++r) all.push_back(empty({2}, kInt64));
  wait(pg.allgather(all, mine));

  std::vector<int> failed, differ;
  std::vector<uint64_t> hashes(pg.size());
  for (int r = 0; r < pg.size(); ++r) {
    const int64_t* p = all[r].data_ptr<int64_t>();
    std::memcpy(&hashes[r], p + 1, 8);
    if (p[0] != kOk) failed.push_back(r);
  }
  if (!failed.empty()) {
    std::string msg =
        detail::str("save_checkpoint: rank(s) ", join_ranks(failed), " could not hash their state; nothing was written to '", path, "'");
    if (status != kOk) msg += detail::str(" (rank ", pg.rank(), ": ", message, ")");
    throw DistributedError(msg);
  }
  for (int r = 0; r < pg.size(); ++r)
    if (hashes[r] != hashes[root]) differ.push_back(r);
  if (!differ.empty()) {
    std::ostringstream os;
    os << "save_checkpoint: the state of rank(s) " << join_ranks(differ) << " differs from root's (rank " << root << "): state hashes";
    for (int r : differ) os << " " << hex(hashes[r]) << " (rank " << r << ")";
    os << " vs " << hex(hashes[root]) << "; data-parallel ranks must hold identical weights, so they have diverged. Nothing was "
       << "written to '" << path << "'";
    throw StateMismatch(os.str(), differ);
  }
}

}  // namespace

uint64_t state_hash(const OrderedDict<std::string, Tensor>& state) {
  std::vector<const OrderedDict<std::string, Tensor>::Item*> items;
  for (const auto& item : state) items.push_back(&item);
  std::sort(items.begin(), items.end(), [](const auto* a, const auto* b) { return a->key() < b->key(); });
  Hasher h;
  h.word(items.size());
  for (const auto* item : items) {
    h.text(item->key());
    const Tensor& t = item->value();
    if (!t.defined()) {
      h.text("undefined");
      continue;
    }
    h.text(dtype_name(t.dtype()));
    h.word(t.sizes().size());
    for (int64_t d : t.sizes()) h.word(static_cast<uint64_t>(d));
    const Tensor host = t.to(Device::cpu()).contiguous();
    h.bytes(host.data_ptr(), host.nbytes());
  }
  return h.finish();
}

void save_checkpoint(ProcessGroup& pg, const OrderedDict<std::string, Tensor>& state, const std::string& path, int root) {
  CheckpointOptions options;
  options.root = root;
  save_checkpoint(pg, state, path, options);
}

void save_checkpoint(ProcessGroup& pg, const OrderedDict<std::string, Tensor>& state, const std::string& path, const CheckpointOptions& options) {
  const int root = options.root;
  check_root(pg, root, "save_checkpoint");
  if (options.verify_identical) verify_identical(pg, state, path, root);

  std::pair<int64_t, std::string> outcome{kOk, ""};
  if (pg.rank() == root) outcome = capture([&] { dp::save(state, path, options.metadata); });
  const auto [status, message] = broadcast_outcome(pg, root, outcome.first, outcome.second);
  if (status == kOk) return;
  const std::string msg = detail::str("save_checkpoint: rank ", root, " could not write '", path, "': ", message);
  if (status == kValueError) throw ValueError(msg);
  throw IOError(msg);
}

SafetensorsFile load_checkpoint_file(ProcessGroup& pg, const std::string& path, int root) {
  check_root(pg, root, "load_checkpoint");
  const bool is_root = pg.rank() == root;
  SafetensorsFile file;
  std::string layout;
  std::pair<int64_t, std::string> outcome{kOk, ""};
  if (is_root) {
    outcome = capture([&] {
      file = load_file(path);
      layout = encode_layout(file);
    });
    if (outcome.first == kOk) outcome.second = layout;
  }
  // On success the text root sends is the layout; on failure, its error message.
  const auto [status, text] = broadcast_outcome(pg, root, outcome.first, outcome.second);
  if (status != kOk) throw IOError(detail::str("load_checkpoint: rank ", root, " could not read '", path, "': ", text));
  if (!is_root) file = decode_layout(text);

  // One broadcast of every tensor that has elements (root's are the sources, the others' are filled).
  std::vector<Tensor> payload;
  for (const auto& item : file.tensors)
    if (item.value().numel() > 0) payload.push_back(item.value());
  if (!payload.empty()) wait(pg.broadcast(payload, root));
  return file;
}

OrderedDict<std::string, Tensor> load_checkpoint(ProcessGroup& pg, const std::string& path, int root) {
  return load_checkpoint_file(pg, path, root).tensors;
}

}  // namespace dp::distributed
