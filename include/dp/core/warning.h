#pragma once
// Warnings (PyTorch's UserWarning): something legal but probably not what the user meant, such as
// DataParallel gathering scalar outputs into a vector. They go to a process-wide handler; the
// default one writes "dparallel warning: <message>" to stderr.
//
//   dp::WarningCapture capture;            // tests: collect instead of printing
//   ...; EXPECT_EQ(capture.messages().size(), 1);
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dp {

using WarningHandler = std::function<void(const std::string& message)>;

// Emits a warning through the current handler (thread-safe; the handler is called under a lock).
void warn(const std::string& message);
// Replaces the handler (nullptr restores the default); returns the previous one.
WarningHandler set_warning_handler(WarningHandler handler);

// Collects the warnings emitted (by any thread) during its lifetime, instead of printing them.
class WarningCapture {
 public:
  WarningCapture();
  ~WarningCapture();
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;
  std::vector<std::string> messages() const;

 private:
  WarningHandler previous_;
  std::shared_ptr<std::vector<std::string>> messages_;
};

}  // namespace dp
