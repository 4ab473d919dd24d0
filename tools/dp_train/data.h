#pragma once
// The training and test sets, and the per-epoch loaders that let a run stop and resume anywhere.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include "args.h"
#include "dp/data/char_tokenizer.h"
#include "dp/data/data.h"

namespace dp::train {

// --data text:FILE: the file's characters, what the run's checkpoints record about it, and how it
// was cut into windows.
struct TextData {
  std::string path;
  std::shared_ptr<const data::CharTokenizer> tokenizer;  // the file's vocabulary
  int64_t characters = 0;                                // tokens in the file
  uint64_t fingerprint = 0;                              // FNV-1a (64 bits) of the file's bytes
  int64_t train_tokens = 0, test_tokens = 0;             // the first 90% and the last 10%
  int64_t block_size = 0;
  int64_t prompt = 0;  // the id of the held-out text's first character (where a sample starts)
};

struct DataSets {
  std::shared_ptr<data::TensorDataset> train;
  std::shared_ptr<data::TensorDataset> test;
  std::string description;       // for the header line: "Fashion-MNIST: 60000 train, 10000 test images"
  bool binary = false;           // seed: one probability per row, label 0/1 (float); else class ids (int64)
  std::optional<TextData> text;  // language models: rows are windows of token ids [block_size]
};

// Random data draws from the host's default generator, so the caller seeds it first (the same
// seed gives the same data, also when a run is resumed). Fashion-MNIST is normalised once here
// with the training set's pixel mean and standard deviation. A missing or corrupt data set is an
// IOError that names the files and the package to install.
//
// Text (--data text:FILE): the vocabulary is the file's distinct characters (dp::data::CharTokenizer:
// an empty file, invalid UTF-8 or a NUL byte, i.e. a binary file, is an IOError naming the file).
// Its first 90% of characters are the training text, the last 10% the held-out text; each is cut
// into windows of block_size characters that do not overlap (sample i: data = tokens
// [i*T, i*T + T), target = the T tokens one further on), so an epoch predicts every training
// character once, but the last few (fewer than T) of each part. Both parts must hold at least one
// window: ValueError naming the file, its length and --block-size otherwise. The windows are views of
// one int64 tensor of the text's ids (no copy).
DataSets load_data(const RunSettings& settings);

// FNV-1a, 64 bits, of `bytes`: tells whether a text file changed since a checkpoint.
uint64_t fnv1a64(std::string_view bytes);

// This rank's rows of a batch of `rows` rows split over `world` ranks: contiguous shares, the
// first rows % world ranks one row more (rank r starts at r * (rows / world) + min(r, rows % world)).
// With world 1 the whole batch.
struct Share {
  int64_t offset = 0, count = 0;
};
Share rank_share(int64_t rows, int world, int rank);

// The indices one epoch visits from batch `first_batch` on, on rank `rank` of `world`: the epoch's
// permutation (the e-th of dp::data::RandomSampler(n, seed), which recomputes any epoch on its own)
// or 0..n-1, cut into the run's global batches of `batch_size` rows, of which this rank takes its
// share (rank_share) of every batch from first_batch on. So the ranks' batches of step k together
// are exactly the single-process batch of step k, and the batches of a resumed epoch are exactly
// those the interrupted epoch would have gone on to, whatever the world size of either.
class EpochSampler : public data::Sampler {
 public:
  EpochSampler(size_t n, bool shuffle, uint64_t seed, uint64_t epoch, int64_t batch_size, int64_t first_batch, int world = 1, int rank = 0);
  std::vector<int64_t> indices(uint64_t /*loader epoch: ignored, this sampler serves one epoch*/) override;
  size_t size() const override { return size_; }

 private:
  size_t n_;
  bool shuffle_;
  uint64_t seed_, epoch_;
  int64_t batch_size_, first_batch_;
  int world_, rank_;
  size_t size_ = 0;
};

// A loader for the rest of epoch `epoch` (0-based), starting at batch `first_batch`: this rank's
// shares of the global batches (its batch size is its share of a full batch; the epoch's last,
// shorter batch gives a share no larger, possibly none: see last_batch_uneven).
data::DataLoader epoch_loader(const DataSets& sets, const RunSettings& settings, uint64_t epoch, int64_t first_batch, int64_t workers, int world = 1,
                              int rank = 0);

// Throws ValueError when a full batch has fewer rows than there are ranks (a rank would have
// nothing to train on at any step).
void check_rank_shares(const DataSets& sets, const RunSettings& settings, int world);

// Whether the epoch's last batch has fewer rows than there are ranks: then the ranks from rows on
// have no share of it, and their loaders end one batch early (the trainer's Join shadows that step).
bool last_batch_uneven(const DataSets& sets, const RunSettings& settings, int world);

// Rows of global batch `batch` (0-based) of an epoch.
int64_t batch_rows(const DataSets& sets, const RunSettings& settings, int64_t batch);

// Batches in one epoch (the last may be shorter: nothing is dropped).
int64_t steps_per_epoch(const DataSets& sets, const RunSettings& settings);

}  // namespace dp::train
