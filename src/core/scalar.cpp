#include "dp/core/scalar.h"

namespace dp {

std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.is_bool()) return os << (s.to_int() ? "True" : "False");
  if (s.is_integral()) return os << s.to_int();
  return os << s.to_double();
}

}  // namespace dp
