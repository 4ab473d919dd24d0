#pragma once
// What a worker started by a launcher (dp-run; torchrun's names work too) needs beyond
// init_process_group: its restart count, the run's id, and an error file through which the launcher
// learns why the worker failed.
//
//   int main() try {
//     ...
//   } catch (const std::exception& e) {
//     dp::distributed::record_error(e);   // dp-run prints it in its one-line report of this rank
//     return 1;
//   }
#include <cstdint>
#include <exception>
#include <optional>
#include <string>

namespace dp::distributed {

// DP_RESTART_COUNT (else TORCHELASTIC_RESTART_COUNT): how many times the launcher restarted the
// job's workers before this one; 0 when unset.
int restart_count();
// DP_RUN_ID (else TORCHELASTIC_RUN_ID); empty when unset.
std::string run_id();

// An error as a worker recorded it.
struct RecordedError {
  std::string type;     // "PeerLostError", "CollectiveTimeout", "ValueError", ... ("std::exception" for others)
  std::string message;  // what()
  int rank = -1;        // RANK of the worker that wrote it (-1 unknown)
  int64_t unix_ms = 0;  // when
};

// Writes the error to the file named by DP_ERROR_FILE (torchrun: TORCHELASTIC_ERROR_FILE), replacing
// it atomically (temporary file and rename), as one JSON object. Does nothing when neither is set.
// Never throws: it runs in error handlers.
void record_error(const std::string& type, const std::string& message) noexcept;
// The type is the most derived dp error class the exception is (PeerLostError, CollectiveTimeout,
// RendezvousError, ..., ValueError, IOError, ...), else "std::exception".
void record_error(const std::exception& e) noexcept;

// Reads a file record_error wrote; nullopt when it is missing, empty or not such a file.
std::optional<RecordedError> read_error_file(const std::string& path);

}  // namespace dp::distributed
