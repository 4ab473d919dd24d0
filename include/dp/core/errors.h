#pragma once
// One exception hierarchy. Every message names the op and the shapes, dtypes or devices involved.
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>

namespace dp {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};
class ShapeError : public Error { using Error::Error; };         // incompatible sizes
class DTypeError : public Error { using Error::Error; };         // unsupported or mismatched dtype
class DeviceError : public Error { using Error::Error; };        // wrong or missing device
class IndexError : public Error { using Error::Error; };         // index / dim out of range
class ValueError : public Error { using Error::Error; };         // a bad argument value
class AutogradError : public Error { using Error::Error; };      // misuse of the autograd graph
class NotImplementedError : public Error { using Error::Error; };
class OutOfMemory : public Error { using Error::Error; };
class IOError : public Error { using Error::Error; };            // files: missing, truncated, corrupt

namespace detail {
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
// Re-throws the exception `e` with a message saying where it happened, as PyTorch's DataParallel
// does: "Caught <type> <where>.\nOriginal message: <what>", keeping its type for dparallel's error
// types and the standard exception types (others become dp::Error; std::bad_alloc is re-thrown as
// it is). Used for errors of DataParallel replicas, in forward (parallel_apply) and backward (the
// autograd engine, for nodes a replica's forward created).
[[noreturn]] void rethrow_with_context(std::exception_ptr e, const std::string& where);
// The same, returned as an exception_ptr instead of thrown.
std::exception_ptr with_context(std::exception_ptr e, const std::string& where);
}  // namespace detail

}  // namespace dp

// DP_CHECK(cond, ShapeError, "add: sizes ", a, " and ", b, " do not broadcast")
#define DP_CHECK(cond, ErrorType, ...)                              \
  do {                                                               \
    if (__builtin_expect(!(cond), 0)) {                              \
      throw ::dp::ErrorType(::dp::detail::str(__VA_ARGS__));         \
    }                                                                \
  } while (0)
