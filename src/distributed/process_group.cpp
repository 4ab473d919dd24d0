// ProcessGroupOptions' default timeout (DP_DIST_TIMEOUT) and the names of the reduction ops.
#include "dp/distributed/process_group.h"
#include <cmath>
#include <cstdlib>
#include <string>
#include "dp/core/errors.h"

namespace dp::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Product:
      return "product";
  }
  return "unknown";
}

// Read on every default-constructed ProcessGroupOptions (not cached), so a test or a launcher that
// sets the variable before making a group is obeyed. Seconds, fractional allowed ("2.5").
std::chrono::milliseconds ProcessGroupOptions::default_timeout() {
  constexpr std::chrono::milliseconds kDefault{60'000};
  const char* env = std::getenv("DP_DIST_TIMEOUT");
  if (env == nullptr || *env == '\0') return kDefault;
  const std::string text(env);
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  // A timeout of a millisecond or less cannot connect anything: it is a typo, not a setting.
  DP_CHECK(end == text.c_str() + text.size() && std::isfinite(seconds) && seconds >= 0.001 && seconds <= 1e7, ValueError, "DP_DIST_TIMEOUT='", text,
           "' is not a timeout in seconds (expected a number such as 60 or 2.5, at least 0.001)");
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

}  // namespace dp::distributed
