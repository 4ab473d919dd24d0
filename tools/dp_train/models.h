#pragma once
// The built-in models. The image models are nn::Sequential so that their state_dict keys are those
// of the same torch.nn.Sequential in PyTorch ("1.weight", ...), which --init and --save rely on.
// The language models read windows of character ids [B, T] and give next-character logits
// [B, T, V]: gpt is dp::models::GPT (nanoGPT's keys), gru/lstm a CharRNN (below).
//
// The trainer holds any of them as a Net: the model, DataParallel around it, and
// DistributedDataParallel around that across processes, with the model's criterion.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>
#include "args.h"
#include "dp/distributed/distributed.h"
#include "dp/models/gpt.h"
#include "dp/nn/nn.h"
#include "dp/parallel/parallel.h"

namespace dp::train {

// "seed" (Linear(5,1), Sigmoid), "mlp" (width `hidden`) or "cnn"; ValueError for another name.
nn::Sequential make_model(const std::string& kind, int64_t hidden);

// A language model's loss: next-character cross-entropy of logits [B, T, V] against targets
// [B, T], the mean over the B x T characters. Under forward_loss each replica's part is its sum
// over its characters and their count (loss_part), so the loss of a batch split over devices or
// processes is exactly the one of the whole batch.
struct TokenLoss {
  Tensor operator()(const Tensor& logits, const Tensor& targets) const;
};
parallel::LossPart loss_part(const TokenLoss& loss, const Tensor& logits, const Tensor& targets);

// The model's criterion: BCELoss for seed (its output is a probability), cross-entropy for mlp
// and cnn, TokenLoss for the language models.
using Criterion = std::variant<nn::BCELoss, nn::CrossEntropyLoss, TokenLoss>;
Criterion make_criterion(const std::string& kind);

// Number of elements over all parameters.
int64_t parameter_count(const nn::Module& model);

// ---- gru / lstm ---------------------------------------------------------------------------------

struct CharRNNOptions {
  std::string cell = "lstm";  // "lstm" | "gru"
  int64_t vocab_size = 0, embd = 64, hidden = 128, layers = 1;
  double dropout = 0.0;  // between stacked layers, in training
};

// Embedding(V, embd) -> LSTM or GRU(embd, hidden, layers, batch_first) -> Linear(hidden, V): the
// classic character-level RNN language model. state_dict keys are those of the same PyTorch
// module with children `embed`, `rnn`, `head` ("rnn.weight_ih_l0", ...).
class CharRNNImpl : public nn::Module {
 public:
  explicit CharRNNImpl(const CharRNNOptions& options);
  // idx [B, T] (int64 ids) -> logits [B, T, V], from a zero state.
  Tensor forward(const Tensor& idx) const;
  // Appends max_new_tokens sampled ids to idx [B, T]: the prompt runs through once, then each new
  // id is fed back with the recurrent state carried (one step per id), without gradients.
  // Temperature and top-k as GPT::generate; draws from options.generator() (default: the host's).
  Tensor generate(const Tensor& idx, int64_t max_new_tokens, const models::SampleOptions& options = {}) const;

  CharRNNOptions options;
  nn::Embedding embed{nullptr};
  nn::LSTM lstm{nullptr};  // the "rnn" child: one of the two
  nn::GRU gru{nullptr};
  nn::Linear head{nullptr};

 private:
  // h and, for an LSTM, c.
  using State = std::tuple<Tensor, Tensor>;
  std::tuple<Tensor, State> run(const Tensor& idx, const std::optional<State>& state) const;
};
using CharRNN = nn::ModuleHolder<CharRNNImpl>;

// Draws one id per row of logits [B, V] (on the host, in double): softmax(logits / temperature)
// restricted to the top_k largest logits (ties at the k-th kept; 0: all), by inverse transform
// of one U[0, 1) draw of `gen` per row. Returns int64 [B, 1] on the logits' device.
Tensor sample_next(const Tensor& logits, double temperature, int64_t top_k, Generator* gen);

// ---- the model being trained --------------------------------------------------------------------

// A model of any class behind the interface the trainer needs.
class Net {
 public:
  virtual ~Net() = default;
  virtual nn::Module& module() = 0;
  // DataParallel over `devices` (the parameters moved to devices[0] first, DataParallel's rule).
  virtual void parallelize(const std::vector<Device>& devices, Device output_device) = 0;
  // DistributedDataParallel around the DataParallel (checks that every rank built the same model
  // and copies rank 0's weights to all).
  virtual void distribute(const distributed::ProcessGroupPtr& group) = 0;
  // The DistributedDataParallel (for a Join: uneven last batches), or null before distribute().
  virtual distributed::Joinable* joinable() = 0;
  // DataParallel's forward: outputs gathered on the output device.
  virtual Tensor forward(const Tensor& input) = 0;
  // The batch's loss: across processes DistributedDataParallel's forward_loss (the global batch's);
  // else on the replicas (forward_loss, on_replicas) or on the gathered output.
  virtual Tensor loss(Criterion& criterion, const Tensor& target, const Tensor& input, bool on_replicas) = 0;
  virtual void set_training(bool on) = 0;
  // Language models: idx [1, T] followed by `tokens` sampled ids (on the model's device, no
  // gradients, in eval mode). NotImplementedError for the image models.
  virtual Tensor generate(const Tensor& idx, int64_t tokens, const models::SampleOptions& options) = 0;
};

// The run's model, freshly initialised from the default generators. `vocab_size`: the text's
// vocabulary (language models).
std::unique_ptr<Net> make_net(const RunSettings& settings, int64_t vocab_size);

}  // namespace dp::train
