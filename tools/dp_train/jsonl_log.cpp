#include "jsonl_log.h"

#include <cerrno>
#include <cstring>
#include "dp/core/errors.h"

namespace dp::train {

JsonlLog::JsonlLog(const std::string& path, bool append) : path_(path) {
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  DP_CHECK(file_ != nullptr, IOError, "--log: cannot open ", path, ": ", std::strerror(errno));
}

JsonlLog::~JsonlLog() {
  if (file_) std::fclose(file_);
}

void JsonlLog::write(const nlohmann::json& record) {
  if (!file_) return;
  const std::string line = record.dump() + "\n";
  const bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  DP_CHECK(ok, IOError, "--log: cannot write to ", path_, ": ", std::strerror(errno));
}

}  // namespace dp::train
