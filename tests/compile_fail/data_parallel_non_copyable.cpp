// Compile-fail check (compile_fail.cmake, registered in tests/CMakeLists.txt): DataParallel and
// replicate() of a module class that can't be copied must not compile, and the error must say what
// to add. Each case is one -D: DP_CASE_DATA_PARALLEL (nn::DataParallel<M>), DP_CASE_REPLICATE
// (parallel::replicate), DP_CASE_FUNCTIONAL (parallel::data_parallel). With DP_COMPILE_FAIL_CONTROL
// the module is made copyable and every case must compile, which shows the failures come from the
// check and not from a mistake in this file.
#include <memory>
#include <mutex>
#include "dp/nn/nn.h"
#include "dp/parallel/parallel.h"

struct Model : dp::nn::Module {
  dp::nn::Linear fc{nullptr};
#ifdef DP_COMPILE_FAIL_CONTROL
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();  // copyable: shared by the copies
#else
  std::mutex mu;  // not copyable, so Model has no copy constructor
#endif
  Model() { fc = register_module("fc", dp::nn::Linear(2, 2)); }
  dp::Tensor forward(const dp::Tensor& x) { return fc(x); }
};

int main() {
  auto model = std::make_shared<Model>();
  const std::vector<dp::Device> devices{dp::Device("cpu:0"), dp::Device("cpu:1")};
#if defined(DP_CASE_DATA_PARALLEL) || defined(DP_COMPILE_FAIL_CONTROL)
  dp::nn::DataParallel<Model> net(model, devices);
#endif
#if defined(DP_CASE_REPLICATE) || defined(DP_COMPILE_FAIL_CONTROL)
  auto replicas = dp::parallel::replicate(model, devices);
#endif
#if defined(DP_CASE_FUNCTIONAL) || defined(DP_COMPILE_FAIL_CONTROL)
  dp::Tensor y = dp::parallel::data_parallel(model, dp::Tensor(), devices);
#endif
  return 0;
}
