#pragma once

namespace dp {

// Whether ops record autograd history on this thread (thread-local, like torch.is_grad_enabled()).
struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Sets grad mode for a scope and restores the previous value.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : prev_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~AutoGradMode() { GradMode::set_enabled(prev_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};

// torch::NoGradGuard.
class NoGradGuard : public AutoGradMode {
 public:
  NoGradGuard() : AutoGradMode(false) {}
};

}  // namespace dp
