// DistributedDataParallel across processes: every process runs this program with a launcher's
// environment (torchrun's names; dp-run, mpirun and srun work too, see docs/distributed.md). On one
// machine, two processes sharing the store's token (rank 0 hosts the store; only holders of the
// token may use it):
//
//   export DP_STORE_TOKEN=$(openssl rand -hex 32)
//   MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 WORLD_SIZE=2 RANK=0 build/examples/ddp_train &
//   MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 WORLD_SIZE=2 RANK=1 build/examples/ddp_train
//
// Each rank trains on its shard of every epoch (DistributedSampler), the loss and gradients are
// those of the global batch (forward_loss), the test accuracy counts every test row exactly once
// (the sampler's evaluation mode, then a sum over ranks), and --save writes one checkpoint
// collectively (rank 0 writes, every rank learns whether it worked).
//
//   ddp_train [--data random|fashion-mnist] [--epochs 2] [--batch 128 (global)] [--lr 1e-3]
//             [--seed 0] [--devices cpu:0,cpu:1 (DataParallel inside each process)] [--save PATH]
//             [--min-accuracy A] [--print-params] [--threads N]
//
// Exit status: 0; 1 below --min-accuracy; 2 bad arguments; 3 a distributed error (a lost peer, a
// timeout: the message names the rank).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include "dp/dp.h"

namespace {

using namespace dp;

struct Args {
  std::string data = "random";
  int epochs = 2;
  int64_t batch = 128;
  double lr = 1e-3;
  uint64_t seed = 0;
  std::vector<Device> devices;
  std::string save;
  double min_accuracy = -1;
  bool print_params = false;
};

constexpr double kMean = 0.2860, kStd = 0.3530;  // Fashion-MNIST's pixels (training set)

// A synthetic 4-class problem a fixed random teacher labels (the same on every rank: one seed).
std::pair<data::TensorDataset, data::TensorDataset> synthetic_data() {
  Generator gen(1234);
  Tensor teacher = randn({20, 4}, {}, &gen);
  auto make = [&](int64_t n) {
    Tensor x = randn({n, 20}, {}, &gen);
    return data::TensorDataset(x, x.matmul(teacher).argmax(1));
  };
  data::TensorDataset train = make(4096);
  return {std::move(train), make(1000)};
}

nn::Sequential make_model(const std::string& data) {
  if (data == "random") return nn::Sequential(nn::Linear(20, 64), nn::ReLU(), nn::Linear(64, 4));
  return nn::Sequential(nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string o = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw ValueError(o + " needs a value");
      return argv[++i];
    };
    if (o == "--data")
      a.data = value();
    else if (o == "--epochs")
      a.epochs = std::stoi(value());
    else if (o == "--batch")
      a.batch = std::stoll(value());
    else if (o == "--lr")
      a.lr = std::stod(value());
    else if (o == "--seed")
      a.seed = std::stoull(value());
    else if (o == "--save")
      a.save = value();
    else if (o == "--min-accuracy")
      a.min_accuracy = std::stod(value());
    else if (o == "--print-params")
      a.print_params = true;
    else if (o == "--devices") {
      std::stringstream ss(value());
      for (std::string d; std::getline(ss, d, ',');) a.devices.emplace_back(d);
    } else if (o == "--help" || o == "-h") {
      std::cout << "ddp_train [--data random|fashion-mnist] [--epochs 2] [--batch 128] [--lr 1e-3] [--seed 0]\n"
                   "          [--devices cpu:0,cpu:1] [--save PATH] [--min-accuracy A] [--print-params]\n";
      std::exit(0);
    } else
      throw ValueError("unknown option " + o + " (try --help)");
  }
  DP_CHECK(a.data == "random" || a.data == "fashion-mnist", ValueError, "--data must be random or fashion-mnist, got ", a.data);
  DP_CHECK(a.epochs >= 1 && a.batch >= 1, ValueError, "--epochs and --batch must be >= 1");
  return a;
}

template <typename Model>
double evaluate(Model& ddp, const data::TensorDataset& test, distributed::ProcessGroup& group, Device dev, bool images) {
  NoGradGuard no_grad;
  ddp->eval();
  auto sampler = std::make_shared<data::DistributedSampler>(data::DistributedSampler::evaluation(test.size(), group.size(), group.rank()));
  data::DataLoader loader(std::make_shared<data::TensorDataset>(test), data::DataLoaderOptions(500), sampler);
  Tensor counts = zeros({2}, TensorOptions().dtype(kFloat64));  // correct, seen
  for (data::Batch& b : loader) {
    Tensor x = images ? (b.data - kMean) / kStd : b.data;
    Tensor pred = ddp(x.to(dev)).argmax(1).cpu();
    counts[0].add_(pred.eq(b.target).sum().to(kFloat64));
    counts[1].add_(static_cast<double>(b.target.size(0)));
  }
  group.allreduce(counts, distributed::ReduceOp::Sum)->wait();
  ddp->train();
  return counts[0].item<double>() / counts[1].item<double>();
}

// Trains, evaluates, saves; the exit status.
template <typename Model>
int train(Model& ddp, const Args& a, distributed::ProcessGroup& group, const data::DistributedSampler& sampler, data::DataLoader& loader,
          const data::TensorDataset& test, Device dev, bool images) {
  const int rank = group.rank();
  optim::Adam opt(ddp->parameters(), optim::AdamOptions(a.lr));
  if (rank == 0)
    std::printf("ddp_train: %d processes, %zu training rows per rank per epoch, global batch %lld, devices per process: %zu\n", group.size(),
                sampler.size(), static_cast<long long>(a.batch), a.devices.empty() ? size_t{1} : a.devices.size());
  double accuracy = 0;
  for (int epoch = 1; epoch <= a.epochs; ++epoch) {
    double loss_sum = 0;
    int64_t steps = 0;
    for (data::Batch& b : loader) {
      Tensor x = images ? (b.data - kMean) / kStd : b.data;
      opt.zero_grad();
      Tensor loss = ddp->forward_loss(nn::CrossEntropyLoss(), b.target.to(dev), x.to(dev));
      loss.backward();
      opt.step();
      loss_sum += loss.item<double>();
      ++steps;
    }
    accuracy = evaluate(ddp, test, group, dev, images);
    if (rank == 0) std::printf("epoch %d  train loss %.4f  test accuracy %.4f\n", epoch, loss_sum / static_cast<double>(steps), accuracy);
    std::fflush(stdout);
  }
  if (!a.save.empty()) {
    distributed::save_checkpoint(group, ddp->state_dict(), a.save);
    if (rank == 0) std::printf("saved %s\n", a.save.c_str());
  }
  if (a.print_params) std::printf("rank %d state hash %016llx\n", rank, static_cast<unsigned long long>(distributed::state_hash(ddp->state_dict())));
  if (a.min_accuracy >= 0 && accuracy < a.min_accuracy) {
    if (rank == 0) std::printf("test accuracy %.4f is below the required %.4f\n", accuracy, a.min_accuracy);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    a = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_train: %s\n", e.what());
    return 2;
  }
  try {
    set_num_threads(1);  // one BLAS thread per process: the processes share the machine's cores
    auto group = distributed::init_process_group();
    const int world = group->size();
    manual_seed(a.seed);  // the same initial model everywhere (DDP copies rank 0's anyway)
    const bool images = a.data == "fashion-mnist";
    data::TensorDataset train_set = images ? data::TensorDataset(data::FashionMNIST(data::FashionMNIST::kDefaultRoot, true)) : synthetic_data().first;
    data::TensorDataset test_set =
        images ? data::TensorDataset(data::FashionMNIST(data::FashionMNIST::kDefaultRoot, false)) : synthetic_data().second;
    DP_CHECK(a.batch % world == 0, ValueError, "--batch ", a.batch, " must be a multiple of the world size ", world);
    auto sampler = std::make_shared<data::DistributedSampler>(train_set.size(), world, group->rank(), /*shuffle=*/true, a.seed);
    data::DataLoader loader(std::make_shared<data::TensorDataset>(train_set), data::DataLoaderOptions(a.batch / world), sampler);

    nn::Sequential model = make_model(a.data);
    if (a.devices.empty()) {
      nn::DistributedDataParallel ddp(model, group);
      return train(ddp, a, *group, *sampler, loader, test_set, Device::cpu(), images);
    }
    // Hybrid: DataParallel over this process's devices, DDP across processes.
    model->to(a.devices[0]);
    nn::DataParallel<nn::SequentialImpl> local(model.ptr(), a.devices);
    nn::DistributedDataParallel ddp(local, group);
    return train(ddp, a, *group, *sampler, loader, test_set, a.devices[0], images);
  } catch (const distributed::DistributedError& e) {
    std::fprintf(stderr, "ddp_train: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_train: error: %s\n", e.what());
    return 2;
  }
}
