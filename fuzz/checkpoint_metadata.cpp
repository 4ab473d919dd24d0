// Fuzz target: dp-train's checkpoint metadata validator (tools/dp_train/checkpoint.h): the input is
// the "dp_train" metadata text of a checkpoint. parse_checkpoint_metadata must accept it or throw a
// dp::Error; an accepted one then goes through check_position with the step counts its own settings
// give on random data (as dp-train would compute them). Anything else is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include "checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const dp::train::Checkpoint c = dp::train::parse_checkpoint_metadata(text);
    const dp::train::RunSettings& s = c.settings;
    const int64_t spe = (s.data_size + s.batch_size - 1) / s.batch_size;
    const int64_t total = s.steps > 0 ? s.steps : s.epochs * spe;
    dp::train::check_position(c, spe, total);
    // What resuming reads: the loss of every step taken, evaluation by evaluation.
    double sum = 0;
    int64_t from = 0;
    for (const auto& e : c.state.history.evals) {
      for (int64_t i = from; i < e.step; ++i) sum += c.state.history.step_loss.at(static_cast<size_t>(i));
      from = e.step;
    }
    (void)sum;
  } catch (const dp::Error&) {
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_metadata: foreign exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
