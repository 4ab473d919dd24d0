#pragma once
// --log FILE.jsonl: one JSON object per line, flushed as it is written, so another program (or a
// test) can follow the run. Every record has "event": "start", "step", "eval", "checkpoint",
// "stop" or "end"; the fields of each are listed in README.md (dp-train section).
#include <cstdio>
#include <string>
#include <nlohmann/json.hpp>

namespace dp::train {

class JsonlLog {
 public:
  JsonlLog() = default;
  // append: a resumed run adds to the interrupted run's log. IOError naming the path on failure.
  JsonlLog(const std::string& path, bool append);
  ~JsonlLog();
  JsonlLog(const JsonlLog&) = delete;
  JsonlLog& operator=(const JsonlLog&) = delete;

  bool enabled() const { return file_ != nullptr; }
  void write(const nlohmann::json& record);

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace dp::train
