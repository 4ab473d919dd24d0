#pragma once
// A timeline of one process for chrome://tracing / Perfetto (Chrome's trace-event format), so a user
// can see where a step's time goes and whether communication overlapped backward. Off unless the
// environment variable DP_TIMELINE names a file (dp-run --timeline sets one per rank and merges
// them); then DDP records each forward and backward, each gradient bucket and the wait at the end
// of backward, and programs add their own spans (dp-train records its optimizer steps). A bucket
// has two events: "bucket N ready", the moment its last gradient arrived, and "allreduce bucket N",
// a span from its launch to the end of its all-reduce. Buckets are launched in order, so one that
// is ready while an earlier one still waits for gradients is launched later than it was ready. The
// bucket events' args give the bucket, the step (optimizer steps before this backward), the rank,
// its bytes and its parameter count.
//
// The file is written as it goes, one event per line in the "JSON array" form of the format (a
// crash leaves a readable file); times are microseconds of the steady clock, which processes of one
// machine share (machines' clocks are not aligned). pid is the rank (RANK, else 0); tid 0 is the
// training thread, tid 1 the communication.
#include <cstdint>
#include <string>

namespace dp::distributed::timeline {

// Whether events are being recorded (DP_TIMELINE was set when first asked). Cheap: check it before
// building an event's strings.
bool enabled();
// Microseconds of the steady clock (the events' time base).
int64_t now_us();
// A span [start_us, end_us) on thread `tid`. `category` groups events in the viewer ("ddp",
// "train"); `args` is a JSON object's members without braces ("\"bucket\": 3, \"bytes\": 4096") or empty.
void span(const std::string& name, const char* category, int64_t start_us, int64_t end_us, int tid = 0, const std::string& args = "");
// A point in time.
void instant(const std::string& name, const char* category, int64_t at_us, int tid = 0, const std::string& args = "");
// Flushes what was written to the file (also done at exit).
void flush();

// Records a span from construction to destruction (nothing when the timeline is off).
class Scope {
 public:
  Scope(const char* name, const char* category, int tid = 0) : name_(name), category_(category), tid_(tid), start_(enabled() ? now_us() : -1) {}
  ~Scope() {
    if (start_ >= 0) span(name_, category_, start_, now_us(), tid_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  const char* category_;
  int tid_;
  int64_t start_;
};

}  // namespace dp::distributed::timeline
