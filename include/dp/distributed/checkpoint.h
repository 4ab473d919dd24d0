#pragma once
// Checkpoints of a data-parallel job, written and read collectively: every rank calls, one rank
// (root) touches the file, and every rank returns the same way (normally, or with the same error),
// so no rank goes on training while another is stuck or failed.
//
//   dp::distributed::save_checkpoint(*pg, model->state_dict(), "ckpt.safetensors");   // every rank
//   auto state = dp::distributed::load_checkpoint(*pg, "ckpt.safetensors");              // every rank
//
// The file is dp::save's safetensors file (dp/core/serialize.h): written atomically by root, and
// readable by dp::load and Python's safetensors.
//
// save_checkpoint, on every rank:
//  1. With options.verify_identical (the default): every rank hashes its state (state_hash) and
//     the hashes are allgathered. DDP ranks must hold identical weights; if some differ from
//     root's, every rank throws the same StateMismatch naming those ranks, and nothing is written.
//  2. Root writes the file with dp::save. Its outcome (success, or the error's kind and message)
//     is broadcast, and every rank returns normally or throws the same error: IOError (ValueError
//     when dp::save rejected the state itself: an undefined tensor, a bad name) whose message is
//     "save_checkpoint: rank <root> could not write '<path>': <root's message>".
//  On return the complete file exists at `path` on root's filesystem.
//
// load_checkpoint, on every rank: root reads the file (dp::load_file) and broadcasts the names,
// dtypes, shapes and metadata, then the tensors, so ranks on machines without the file get it too.
// If root cannot read it (missing, unreadable, corrupt), every rank throws the same IOError:
// "load_checkpoint: rank <root> could not read '<path>': <root's message>". The tensors are CPU
// tensors in file order (dp::load's), identical on every rank.
//
// Both are collectives: every rank of `pg` must call them in the same order relative to its other
// collectives, with the same root and options. Only root opens `path`; the other ranks use theirs
// in messages only, so it need not exist on their machines. A lost peer or a timeout surfaces as the
// group's own errors (PeerLostError, CollectiveTimeout). A root outside [0, pg.size()) is a
// ValueError on every rank, before any communication.
#include <cstdint>
#include <map>
#include <string>
#include <vector>
#include "dp/core/ordered_dict.h"
#include "dp/core/serialize.h"
#include "dp/core/tensor.h"
#include "dp/distributed/errors.h"
#include "dp/distributed/process_group.h"

namespace dp::distributed {

struct CheckpointOptions {
  int root = 0;                                 // the rank that writes the file
  bool verify_identical = true;                 // check that every rank's state equals root's before writing
  std::map<std::string, std::string> metadata;  // the file's "__metadata__" (as dp::save's)
};

// The ranks whose state differs from root's at save_checkpoint (verify_identical).
class StateMismatch : public DistributedError {
 public:
  StateMismatch(const std::string& msg, std::vector<int> ranks) : DistributedError(msg), ranks_(std::move(ranks)) {}
  const std::vector<int>& ranks() const { return ranks_; }

 private:
  std::vector<int> ranks_;
};

void save_checkpoint(ProcessGroup& pg, const OrderedDict<std::string, Tensor>& state, const std::string& path, int root = 0);
void save_checkpoint(ProcessGroup& pg, const OrderedDict<std::string, Tensor>& state, const std::string& path, const CheckpointOptions& options);

// The file's tensors (CPU, in file order) on every rank.
OrderedDict<std::string, Tensor> load_checkpoint(ProcessGroup& pg, const std::string& path, int root = 0);
// The tensors and the file's metadata on every rank.
SafetensorsFile load_checkpoint_file(ProcessGroup& pg, const std::string& path, int root = 0);

// A 64-bit hash of a state: every entry's name, dtype, shape and bytes (a tensor on another device
// is copied to the host; a non-contiguous one is read in row-major order), taken in name order so
// that insertion order does not matter (the file does not keep it either). States that would be
// written as identical files hash equal; any single differing 8-byte word changes the hash.
// Not a cryptographic hash.
uint64_t state_hash(const OrderedDict<std::string, Tensor>& state);

}  // namespace dp::distributed
