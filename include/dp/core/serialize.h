#pragma once
// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors), readable by
// Python's safetensors.torch.load_file and able to read the files it writes:
//   8 bytes   N, little-endian u64: the header length
//   N bytes   UTF-8 JSON: {"__metadata__": {str: str} (optional),
//                          "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}
//             padded with spaces so the data starts 8-byte aligned
//   the rest  the data buffer: every tensor contiguous, row-major, little-endian; offsets are
//             relative to the buffer start and tile it exactly (no holes, no overlap, no tail).
//
// Supported dtypes: F64, F32, F16, BF16, I64, I32, U8, BOOL. Other safetensors dtypes (I8, I16,
// U16, U32, U64, F8_*) are rejected on load with a ValueError naming the tensor.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include "dp/core/device.h"
#include "dp/core/ordered_dict.h"
#include "dp/core/tensor.h"

namespace dp {

// Writes `tensors` (and optional string metadata) to `path`, atomically: the bytes go to a unique
// temporary file in the same directory, which is flushed, fsync'ed and renamed over `path`, then the
// directory is fsync'ed. Either the complete new file is at `path` or the previous file is left
// untouched; the temporary file never outlives the call, except when the process dies during it
// (kill -9): such stale temporaries (of this host, by a process no longer running) are removed by
// the next save to the same path.
//
// Layout matches the reference writer (safetensors' serialize_to_file), so the same tensors give a
// byte-identical file: tensors ordered by the reference's dtype order, descending (I64, F64, F32,
// I32, BF16, F16, U8, BOOL: largest alignment first, so every tensor's data is aligned), ties by name
// (bytewise); compact JSON with "__metadata__" first (omitted when `metadata` is empty; its keys
// sorted). load() returns tensors in that file order, not in the order given here (state dicts are
// matched by name).
//
// Tensors on any device are copied to the host one at a time while writing; non-contiguous tensors
// are written contiguously. Tensors that share storage (views, tied weights) are written as separate,
// independent copies, and load as independent tensors (PyTorch's safetensors refuses them instead).
//
// Throws ValueError for an undefined tensor, a name "__metadata__" or a name/metadata string that is
// not valid UTF-8; IOError (naming `path`, the step and the errno text) when the file cannot be
// written: unwritable or missing directory, full disk, short write, failed fsync or rename, or a
// destination that exists but is not a regular file. A non-IO exception raised while writing (e.g.
// from a device-to-host copy) is rethrown unchanged after the temporary file is removed.
void save(const OrderedDict<std::string, Tensor>& tensors, const std::string& path, const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  OrderedDict<std::string, Tensor> tensors;     // in file order (sorted by data offset)
  std::map<std::string, std::string> metadata;  // the header's "__metadata__" (empty if absent)
};

// Reads a whole safetensors file; tensors are created on `device` (read straight into host memory
// for CPU devices, staged on the host for others). Every tensor owns its storage.
// Throws IOError (missing/unreadable file, file shorter than its header says, read errors) or
// ValueError (corrupt content: header length over 100 MB or past the end of the file, invalid UTF-8
// or JSON, duplicate names, unknown or unsupported dtype, bad shape, bad offsets — out of range,
// overlapping, leaving a hole, not covering the buffer, or disagreeing with shape x dtype size —
// and trailing bytes), always naming the file and the tensor involved.
SafetensorsFile load_file(const std::string& path, Device device = Device::cpu());
// load_file(path, device).tensors.
OrderedDict<std::string, Tensor> load(const std::string& path, Device device = Device::cpu());

namespace detail {
// Test-only fault injection for the writer, per thread (saves on other threads are unaffected).
// After `after_bytes` bytes have been written to the temporary file, the next write fails: with
// errno `error` (as a full disk, ENOSPC, would: a short write then the error), or, if `throw_exception`,
// by throwing a std::runtime_error (an unrelated failure in the middle of a save).
struct SaveFault {
  int64_t after_bytes = -1;  // < 0: no fault
  int error = 28;            // ENOSPC
  bool throw_exception = false;
};
void set_save_fault(const SaveFault& fault);
void clear_save_fault();
// Writes `bytes` to `path` as save() writes a checkpoint: a temporary file in the same directory,
// fsync'ed, renamed over `path`, the directory fsync'ed; a failure leaves the previous file as it
// was. Errors are IOErrors (ValueError for an empty path or one naming a directory) that begin
// "<op>: '<path>': ". For the small files other parts of the library keep (a tokenizer's vocabulary).
void write_file_atomic(const std::string& path, std::string_view bytes, const char* op);
// This host's tag in temporary file names (8 hex digits of a hash of the host name): save() writes
// ".<name>.tmp.<tag>-<pid>.<n>.<hex>" and, on the next save to the same name, removes those whose
// tag is this host's and whose process no longer exists (left by a writer killed mid-save).
std::string temp_file_host_tag();
// The header limit the reader enforces (as the reference: 100,000,000 bytes).
inline constexpr uint64_t kSafetensorsMaxHeader = 100000000;
// dtype <-> the format's spelling ("F32"); the rank is the reference's dtype order (writer sort key).
const char* safetensors_dtype_name(DType dtype);
int safetensors_dtype_rank(DType dtype);
// Throws ValueError naming `what` for a name the format does not define or dparallel does not support.
DType safetensors_dtype_from_name(const std::string& name, const std::string& what);
}  // namespace detail

}  // namespace dp
