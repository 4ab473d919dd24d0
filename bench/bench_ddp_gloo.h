#pragma once
// The "gloo-raw" configuration of bench_ddp: gloo used directly, as a program that links gloo
// would, with none of dparallel's process group in the way: a gloo::rendezvous::FileStore in a
// temporary folder, the TCP transport on 127.0.0.1, connectFullMesh, then gloo::allreduce (the
// same algorithm choice, "unspecified" = ring, that dparallel's process group makes) summing one
// flat float32 buffer in place. bench/CMakeLists.txt links gloo to bench_ddp and defines
// DP_BENCH_RAW_GLOO when the gloo target exists.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#ifdef DP_BENCH_RAW_GLOO
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#endif

namespace bench_ddp {

constexpr bool kHaveRawGloo =
#ifdef DP_BENCH_RAW_GLOO
    true;
#else
    false;
#endif

#ifdef DP_BENCH_RAW_GLOO
class RawGlooAllreduce {
 public:
  RawGlooAllreduce(const std::string& store_dir, int rank, int size, int64_t count) : buffer_(static_cast<size_t>(count), 1.0f) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(store_dir);
    context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context_->setTimeout(std::chrono::seconds(120));
    context_->connectFullMesh(store, device);
  }

  // One allreduce (sum) of the whole buffer; blocks until this rank has the result.
  void run() {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(buffer_.data(), buffer_.size());
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(tag_++);
    opts.setTimeout(std::chrono::seconds(120));
    gloo::allreduce(opts);
  }

 private:
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::vector<float> buffer_;  // 1.0, doubled by every sum (inf after 128 calls, which adds as fast: no denormals)
  uint32_t tag_ = 0;
};
#endif

}  // namespace bench_ddp
