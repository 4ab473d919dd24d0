#include "dp/distributed/comm_hooks.h"
#include "dp/autograd/grad_mode.h"

namespace dp::distributed::comm_hooks {
namespace {

CommHook compress_to(DType wire) {
  return [wire](ProcessGroup& group, GradBucket& bucket) -> WorkPtr {
    Tensor buffer = bucket.buffer;
    Tensor wire_copy;
    {
      NoGradGuard no_grad;
      // Divide before narrowing the precision: a sum of large gradients could overflow float16.
      Tensor scaled = bucket.op == ReduceOp::Avg ? buffer.div(static_cast<double>(group.size())) : buffer;
      wire_copy = scaled.to(wire);
    }
    return group.allreduce_compressed({wire_copy}, ReduceOp::Sum)->then([buffer, wire_copy]() mutable {
      NoGradGuard no_grad;
      buffer.copy_(wire_copy);
    });
  };
}

}  // namespace

CommHook allreduce() {
  return [](ProcessGroup& group, GradBucket& bucket) -> WorkPtr { return group.allreduce(bucket.buffer, bucket.op); };
}
CommHook fp16_compress() { return compress_to(kFloat16); }
CommHook bf16_compress() { return compress_to(kBFloat16); }

}  // namespace dp::distributed::comm_hooks
