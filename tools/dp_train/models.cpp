#include "models.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include "dp/core/errors.h"
#include "dp/dp.h"
#include "dp/nn/functional/loss.h"

namespace dp::train {

nn::Sequential make_model(const std::string& kind, int64_t hidden) {
  if (kind == "seed") return nn::Sequential(nn::Linear(5, 1), nn::Sigmoid());
  if (kind == "mlp")
    return nn::Sequential(nn::Flatten(), nn::Linear(784, hidden), nn::ReLU(), nn::Linear(hidden, hidden), nn::ReLU(), nn::Linear(hidden, 10));
  if (kind == "cnn")
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                          nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
  throw ValueError("unknown model '" + kind + "': choose seed, mlp or cnn");
}

namespace {
void check_token_loss(const Tensor& logits, const Tensor& targets) {
  DP_CHECK(logits.dim() == 3, ShapeError, "TokenLoss: expected logits [B, T, V], got ", logits.describe());
  DP_CHECK(targets.dim() == 2 && targets.size(0) == logits.size(0) && targets.size(1) == logits.size(1), ShapeError,
           "TokenLoss: expected targets [B, T] = [", logits.size(0), ", ", logits.size(1), "], got ", targets.describe());
}
}  // namespace

Tensor TokenLoss::operator()(const Tensor& logits, const Tensor& targets) const {
  check_token_loss(logits, targets);
  return nn::functional::cross_entropy(logits.flatten(0, 1), targets.flatten());
}

parallel::LossPart loss_part(const TokenLoss&, const Tensor& logits, const Tensor& targets) {
  check_token_loss(logits, targets);
  const nn::CrossEntropyLossImpl ce;
  return parallel::loss_part(ce, logits.flatten(0, 1), targets.flatten());
}

Criterion make_criterion(const std::string& kind) {
  if (kind == "seed") return nn::BCELoss();
  if (kind == "gpt" || kind == "gru" || kind == "lstm") return TokenLoss();
  return nn::CrossEntropyLoss();
}

int64_t parameter_count(const nn::Module& model) {
  int64_t n = 0;
  for (const Tensor& p : model.parameters()) n += p.numel();
  return n;
}

// ---- CharRNN ----------------------------------------------------------------------------------

CharRNNImpl::CharRNNImpl(const CharRNNOptions& o) : nn::Module("CharRNN"), options(o) {
  DP_CHECK(o.cell == "lstm" || o.cell == "gru", ValueError, "CharRNN: cell must be lstm or gru, got '", o.cell, "'");
  embed = register_module("embed", nn::Embedding(o.vocab_size, o.embd));
  if (o.cell == "lstm")
    lstm = register_module("rnn", nn::LSTM(nn::LSTMOptions(o.embd, o.hidden).num_layers(o.layers).dropout(o.dropout).batch_first(true)));
  else
    gru = register_module("rnn", nn::GRU(nn::GRUOptions(o.embd, o.hidden).num_layers(o.layers).dropout(o.dropout).batch_first(true)));
  head = register_module("head", nn::Linear(o.hidden, o.vocab_size));
}

std::tuple<Tensor, CharRNNImpl::State> CharRNNImpl::run(const Tensor& idx, const std::optional<State>& state) const {
  DP_CHECK(idx.dim() == 2, ShapeError, "CharRNN: expected token ids [B, T], got ", idx.describe());
  Tensor x = embed(idx);
  if (lstm) {
    auto [out, hc] = lstm->forward(x, state);
    return {head(out), hc};
  }
  auto [out, h] = gru->forward(x, state ? std::get<0>(*state) : Tensor());
  return {head(out), State{h, Tensor()}};
}

Tensor CharRNNImpl::forward(const Tensor& idx) const { return std::get<0>(run(idx, std::nullopt)); }

Tensor CharRNNImpl::generate(const Tensor& idx, int64_t max_new_tokens, const models::SampleOptions& o) const {
  DP_CHECK(max_new_tokens >= 0, ValueError, "CharRNN::generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  DP_CHECK(o.temperature() > 0.0, ValueError, "CharRNN::generate: temperature must be > 0, got ", o.temperature());
  DP_CHECK(o.top_k() >= 0, ValueError, "CharRNN::generate: top_k must be >= 0, got ", o.top_k());
  DP_CHECK(idx.dim() == 2 && idx.size(1) >= 1, ShapeError, "CharRNN::generate: expected a prompt [B, T] with T >= 1, got ", idx.describe());
  NoGradGuard no_grad;
  std::vector<Tensor> parts{idx};
  if (max_new_tokens == 0) return idx;
  auto [logits, state] = run(idx, std::nullopt);
  Tensor last = logits.select(1, logits.size(1) - 1);
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    Tensor next = sample_next(last, o.temperature(), o.top_k(), o.generator()).to(idx.dtype());
    parts.push_back(next);
    if (i + 1 == max_new_tokens) break;
    auto [l, s] = run(next, state);
    state = s;
    last = l.select(1, 0);
  }
  return cat(parts, 1);
}

Tensor sample_next(const Tensor& logits, double temperature, int64_t top_k, Generator* gen) {
  DP_CHECK(logits.dim() == 2 && logits.size(1) >= 1, ShapeError, "sample_next: expected logits [B, V], got ", logits.describe());
  const int64_t B = logits.size(0), V = logits.size(1);
  const std::vector<double> all = logits.detach().to(Device::cpu()).to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> u = rand({B}, TensorOptions().dtype(kFloat64), gen).to_vector<double>();
  std::vector<int64_t> ids(static_cast<size_t>(B));
  std::vector<double> row(static_cast<size_t>(V)), sorted;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t v = 0; v < V; ++v) row[static_cast<size_t>(v)] = all[static_cast<size_t>(b * V + v)] / temperature;
    double cut = -std::numeric_limits<double>::infinity();
    if (top_k > 0 && top_k < V) {
      sorted = row;
      std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<double>());
      cut = sorted[static_cast<size_t>(top_k - 1)];
    }
    const double top = *std::max_element(row.begin(), row.end());
    double total = 0;
    for (double& x : row) total += (x = x >= cut ? std::exp(x - top) : 0.0);
    const double target = u[static_cast<size_t>(b)] * total;
    int64_t pick = -1;
    double acc = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double w = row[static_cast<size_t>(v)];
      if (w <= 0) continue;
      pick = v;  // the last id with weight, should rounding leave the draw past the sum
      acc += w;
      if (acc > target) break;
    }
    DP_CHECK(pick >= 0, ValueError, "sample_next: row ", b, " has no finite logit to sample from");
    ids[static_cast<size_t>(b)] = pick;
  }
  return tensor(ids).view({B, 1}).to(logits.device());
}

// ---- Net ------------------------------------------------------------------------------------

namespace {

template <typename M>
class NetOf final : public Net {
 public:
  explicit NetOf(std::shared_ptr<M> model) : model_(std::move(model)) {}

  nn::Module& module() override { return *model_; }

  void parallelize(const std::vector<Device>& devices, Device output_device) override {
    model_->to(devices[0]);
    dp_ = nn::DataParallel<M>(model_, parallel::DataParallelOptions(devices).output_device(output_device));
  }

  void distribute(const distributed::ProcessGroupPtr& group) override {
    ddp_ = nn::DistributedDataParallel<parallel::DataParallelImpl<M>>(dp_.ptr(), group);
  }

  distributed::Joinable* joinable() override { return ddp_ ? ddp_->joinable() : nullptr; }

  Tensor forward(const Tensor& input) override { return dp_(input); }

  Tensor loss(Criterion& criterion, const Tensor& target, const Tensor& input, bool on_replicas) override {
    return std::visit(
        [&](auto& c) -> Tensor {
          // Inputs stay on the host: DataParallel hands each replica its rows (views on CPU devices, copies on GPUs).
          // Across processes: this rank's rows; the loss is the global batch's (every rank's rows).
          if (ddp_) return ddp_->forward_loss(c, target, input);
          if (on_replicas) return dp_->forward_loss(c, target, input);
          return c(dp_(input), target.to(dp_->output_device()));
        },
        criterion);
  }

  void set_training(bool on) override {
    if (ddp_)
      ddp_->train(on);
    else
      model_->train(on);
  }

  Tensor generate(const Tensor& idx, int64_t tokens, const models::SampleOptions& options) override {
    if constexpr (requires(const M& m) { m.generate(idx, tokens, options); }) {
      const bool was_training = model_->is_training();
      model_->eval();
      Tensor out = model_->generate(idx.to(model_->parameters().at(0).device()), tokens, options);
      model_->train(was_training);
      return out;
    } else {
      throw NotImplementedError("generate: " + model_->name() + " is not a language model");
    }
  }

 private:
  std::shared_ptr<M> model_;
  nn::DataParallel<M> dp_{nullptr};
  nn::DistributedDataParallel<parallel::DataParallelImpl<M>> ddp_{nullptr};
};

}  // namespace

std::unique_ptr<Net> make_net(const RunSettings& s, int64_t vocab_size) {
  if (s.model == "lstm" || s.model == "gru") {
    CharRNNOptions o;
    o.cell = s.model;
    o.vocab_size = vocab_size;
    o.embd = s.embd;
    o.hidden = s.hidden;
    o.layers = s.layers;
    o.dropout = s.dropout;
    return std::make_unique<NetOf<CharRNNImpl>>(CharRNN(o).ptr());
  }
  if (s.model == "gpt") {
    // Through the holder: its zeroed allocation keeps stale bytes out of GPTConfig's padding, which
    // the replicas' copy check would otherwise read (dp/core/zeroed_allocator.h).
    models::GPT gpt(
        models::GPTConfig().vocab_size(vocab_size).block_size(s.block_size).n_layer(s.layers).n_head(s.heads).n_embd(s.embd).dropout(s.dropout));
    return std::make_unique<NetOf<models::GPTImpl>>(gpt.ptr());
  }
  return std::make_unique<NetOf<nn::SequentialImpl>>(make_model(s.model, s.hidden).ptr());
}

}  // namespace dp::train
