// dparallel as another project uses it (tests/consumer/CMakeLists.txt builds it against an installed
// prefix with find_package, or with add_subdirectory; tests/consumer/run.sh also with pkg-config).
// A Linear layer under DataParallel on two CPU devices must give the single-device results: the
// output, the loss and the weight gradient; then a few SGD steps must lower the loss.
//
// It also says what it has of CUDA. Linked with dparallel::dparallel alone (the program
// `consumer`), it has no CUDA backend and no CUDA library; linked with dparallel::cuda as well
// (`consumer_cuda`, the same source), it has the backend and whatever GPUs are visible. run.sh
// checks the line and the program's needed libraries.
#include <cmath>
#include <cstdio>
#include <string>
#include "dp/dp.h"

int main() {
  dp::manual_seed(0);
  const dp::Tensor x = dp::randn({64, 8}).to("cpu:0");           // where the model's parameters live
  const dp::Tensor y = x.matmul(dp::randn({8, 3}).to("cpu:0"));  // a linear teacher

  dp::nn::Linear model(8, 3);
  model->to("cpu:0");
  dp::nn::DataParallel net(model, {"cpu:0", "cpu:1"});
  dp::nn::MSELoss criterion;

  // One step by hand on one device, then through DataParallel: the same numbers.
  dp::Tensor single = model(x);
  dp::Tensor single_loss = criterion(single, y);
  single_loss.backward();
  const dp::Tensor single_grad = model->weight.grad().clone();
  model->zero_grad();

  dp::Tensor out = net(x);
  dp::Tensor loss = criterion(out, y);
  loss.backward();
  const bool same_out = dp::allclose(out, single, 1e-5, 1e-6);
  const bool same_grad = dp::allclose(model->weight.grad(), single_grad, 1e-5, 1e-6);
  std::printf("output %s on 2 devices, loss %.6f (one device %.6f), same output %s, same gradient %s\n", out.size_str().c_str(), loss.item<double>(),
              single_loss.item<double>(), same_out ? "yes" : "no", same_grad ? "yes" : "no");

  dp::optim::SGD optimizer(model->parameters(), dp::optim::SGDOptions(0.1));
  const double first = loss.item<double>();
  double last = first;
  for (int step = 0; step < 50; ++step) {
    optimizer.zero_grad();
    dp::Tensor l = criterion(net(x), y);
    l.backward();
    optimizer.step();
    last = l.item<double>();
  }
  std::printf("loss after 50 SGD steps: %.6f (from %.6f)\n", last, first);
  const bool ok = same_out && same_grad && std::isfinite(last) && last < 0.5 * first;
  std::string cuda0 = "cuda:0 exists";
  try {
    dp::check_device(dp::Device::cuda(0));
  } catch (const dp::DeviceError& e) {
    cuda0 = e.what();
  }
  std::printf("cuda: backend %s, %d device(s), is_available %s; %s\n", dp::backend_linked(dp::DeviceType::CUDA) ? "linked" : "not linked",
              dp::cuda::device_count(), dp::cuda::is_available() ? "yes" : "no", cuda0.c_str());
  std::printf("consumer: %s (DP_HAVE_CUDA=%d)\n", ok ? "ok" : "FAILED", DP_HAVE_CUDA);
  return ok ? 0 : 1;
}
