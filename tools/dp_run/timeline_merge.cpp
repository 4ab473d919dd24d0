#include "timeline_merge.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <nlohmann/json.hpp>

namespace dp::run {

MergeResult merge_timelines(const std::vector<TimelinePart>& parts, const std::string& out_path) {
  MergeResult result;
  const std::string tmp = out_path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write the timeline '" + out_path + "': " + std::strerror(errno));
  out << "{\"traceEvents\": [\n";
  bool first = true;
  std::map<int, int> node_of;  // rank -> node
  std::set<int> ranks_with_events;
  for (const TimelinePart& part : parts) {
    node_of[part.rank] = part.node;
    std::ifstream in(part.path, std::ios::binary);
    if (!in) continue;
    for (std::string line; std::getline(in, line);) {
      // Trim the line to the object: whitespace, the array's "[" and the trailing ",".
      size_t b = line.find_first_not_of(" \t\r");
      size_t e = line.find_last_not_of(" \t\r,");
      if (b == std::string::npos || e == std::string::npos || e < b) continue;
      std::string event = line.substr(b, e - b + 1);
      if (event == "[" || event == "]") continue;
      if (event.front() != '{' || !nlohmann::json::accept(event)) {
        ++result.dropped;
        continue;
      }
      out << (first ? "" : ",\n") << event;
      first = false;
      ++result.events;
      ranks_with_events.insert(part.rank);
    }
  }
  for (const auto& [rank, node] : node_of) {
    const nlohmann::json name{{"name", "process_name"},
                              {"ph", "M"},
                              {"pid", rank},
                              {"tid", 0},
                              {"args", {{"name", "rank " + std::to_string(rank) + " (node " + std::to_string(node) + ")"}}}};
    const nlohmann::json order{{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"sort_index", rank}}}};
    out << (first ? "" : ",\n") << name.dump() << ",\n" << order.dump();
    // timeline.h's threads: 0 trains, 1 communicates.
    for (const auto& [tid, what] : {std::pair<int, const char*>{0, "training"}, {1, "communication"}})
      out << ",\n" << nlohmann::json{{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", tid}, {"args", {{"name", what}}}}.dump();
    first = false;
    if (!ranks_with_events.count(rank)) result.ranks_without.push_back(rank);
  }
  out << "\n]}\n";
  out.close();
  if (!out) throw std::runtime_error("cannot write the timeline '" + out_path + "': " + std::strerror(errno));
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write the timeline '" + out_path + "': " + std::strerror(err));
  }
  return result;
}

}  // namespace dp::run
