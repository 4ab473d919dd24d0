#pragma once
// --timeline FILE.json: each worker writes its own Chrome trace (DP_TIMELINE, dp/distributed/
// timeline.h: a line "[", then one event object per line, each ending with ","), one file per rank
// and attempt; at the end dp-run merges them into one file chrome://tracing and Perfetto open:
//   {"traceEvents": [
//   <every event of every file>,
//   {"name": "process_name", "ph": "M", "pid": 3, "args": {"name": "rank 3 (node 1)"}}, ...
//   ]}
// A line that is not a complete JSON object (the last line of a worker killed while writing) is left out.
#include <string>
#include <vector>

namespace dp::run {

struct TimelinePart {
  std::string path;
  int rank = 0;
  int node = 0;
};

struct MergeResult {
  size_t events = 0;               // events copied
  size_t dropped = 0;              // lines left out (not a complete event)
  std::vector<int> ranks_without;  // ranks none of whose files held an event
};

// Writes `out` (through a temporary file and a rename). Throws std::runtime_error naming the file
// when it cannot be written; missing parts count as empty.
MergeResult merge_timelines(const std::vector<TimelinePart>& parts, const std::string& out);

}  // namespace dp::run
