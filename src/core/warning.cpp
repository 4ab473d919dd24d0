#include "dp/core/warning.h"
#include <cstdio>
#include <mutex>

namespace dp {
namespace {

std::mutex& handler_mutex() {
  static std::mutex mu;
  return mu;
}
WarningHandler& current_handler() {
  static WarningHandler handler;
  return handler;
}

}  // namespace

void warn(const std::string& message) {
  std::lock_guard<std::mutex> lock(handler_mutex());
  if (current_handler())
    current_handler()(message);
  else
    std::fprintf(stderr, "dparallel warning: %s\n", message.c_str());
}

WarningHandler set_warning_handler(WarningHandler handler) {
  std::lock_guard<std::mutex> lock(handler_mutex());
  WarningHandler previous = std::move(current_handler());
  current_handler() = std::move(handler);
  return previous;
}

WarningCapture::WarningCapture() : messages_(std::make_shared<std::vector<std::string>>()) {
  auto sink = messages_;  // the handler is called under the handler lock: no lock of its own
  previous_ = set_warning_handler([sink](const std::string& m) { sink->push_back(m); });
}

WarningCapture::~WarningCapture() { set_warning_handler(std::move(previous_)); }

std::vector<std::string> WarningCapture::messages() const {
  std::lock_guard<std::mutex> lock(handler_mutex());
  return *messages_;
}

}  // namespace dp
