#pragma once
// Built-in comm hooks for DistributedDataParallel::register_comm_hook (PyTorch's
// torch.distributed.algorithms.ddp_comm_hooks.default_hooks).
#include "dp/distributed/reducer.h"

namespace dp::distributed::comm_hooks {

// What DDP does without a hook: allreduce the bucket in place (averaged, or summed after
// forward_loss). Useful to wrap.
CommHook allreduce();
// Gradient compression: the bucket (divided by the world size first, for a mean) is cast to
// float16 / bfloat16, all-reduced in that precision on the wire (sums computed in float32; see
// ProcessGroup::allreduce_compressed), and cast back into the bucket. Half the bytes of float32;
// float16 keeps 11 significant bits, bfloat16 8 (with float32's range).
CommHook fp16_compress();
CommHook bf16_compress();

}  // namespace dp::distributed::comm_hooks
