#pragma once
// One exception hierarchy. Every message names the op and the shapes, dtypes or devices involved.
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>

namespace dp {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg), what_(msg) {}
  const char* what() const noexcept override { return what_.c_str(); }
  // Puts `context` before the message. A layer that catches an error says where it happened and
  // rethrows the same object (`throw;`), so its type survives, a user's own subclass included
  // (c10's Error::add_context, which appends instead).
  void add_context(const std::string& context) { what_ = context + what_; }

 private:
  std::string what_;
};
class ShapeError : public Error {
  using Error::Error;
};  // incompatible sizes
class DTypeError : public Error {
  using Error::Error;
};  // unsupported or mismatched dtype
class DeviceError : public Error {
  using Error::Error;
};  // wrong or missing device
class IndexError : public Error {
  using Error::Error;
};  // index / dim out of range
class ValueError : public Error {
  using Error::Error;
};  // a bad argument value
class AutogradError : public Error {
  using Error::Error;
};  // misuse of the autograd graph
class NotImplementedError : public Error {
  using Error::Error;
};
class OutOfMemory : public Error {
  using Error::Error;
};
class IOError : public Error {
  using Error::Error;
};  // files: missing, truncated, corrupt

namespace detail {
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
// Re-throws the exception `e` with a message saying where it happened, as PyTorch's DataParallel
// does: "Caught <type> <where>.\nOriginal message: <what>". A dp::Error (any subclass) is the same
// object with the context added (Error::add_context); a standard exception, whose message cannot
// change, is rebuilt as its standard type; others become dp::Error; std::bad_alloc is re-thrown as
// it is. Used for errors of DataParallel replicas, in forward (parallel_apply) and backward (the
// autograd engine, for nodes a replica's forward created).
[[noreturn]] void rethrow_with_context(std::exception_ptr e, const std::string& where);
// The same, returned as an exception_ptr instead of thrown.
std::exception_ptr with_context(std::exception_ptr e, const std::string& where);
}  // namespace detail

}  // namespace dp

// DP_CHECK(cond, ShapeError, "add: sizes ", a, " and ", b, " do not broadcast")
#define DP_CHECK(cond, ErrorType, ...)                       \
  do {                                                       \
    if (__builtin_expect(!(cond), 0)) {                      \
      throw ::dp::ErrorType(::dp::detail::str(__VA_ARGS__)); \
    }                                                        \
  } while (0)
