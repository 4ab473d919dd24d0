#pragma once
// The TCP store's wire format, shared by server and client. Every message is a frame:
//   [1 byte: command (request) or status (answer)] [4 bytes: body length, little-endian] [body]
// and a body is a sequence of fields: u8, u32/u64/i64 (little-endian), and byte strings written
// as a u32 length then the bytes. The limits below bound what a peer can make the other allocate:
// a frame that announces more, or a field that overruns its frame, closes the connection.
//
// Requests and their answers (kOk unless said otherwise):
//   kHello       u32 magic, u8 version            -> u32 magic, u8 version
//   kSet         key, value                       -> (empty)
//   kGet         key, u64 timeout_ms              -> value            | kTimeout: u32 n, n keys
//   kAdd         key, i64 delta                   -> i64 sum          | kBadValue: message
//   kCompareSet  key, expected, desired           -> value after the call
//   kCheck       u32 n, n keys                    -> u8 all present
//   kWait        u32 n, n keys, u64 timeout_ms    -> (empty)          | kTimeout: u32 n, n keys
//   kDelete      key                              -> u8 existed
//   kNumKeys     (empty)                          -> i64 count
// get and wait are timed by the server (it parks them until the keys exist or the timeout passes),
// so a timeout answer names exactly the keys that were missing and the connection stays in step.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include "dp/distributed/store.h"

namespace dp::distributed::tcp_store {

constexpr uint32_t kMagic = 0x53545044;  // "DPTS"
constexpr uint8_t kVersion = 1;

constexpr size_t kMaxKeyBytes = size_t{64} << 10;    // 64 KiB
constexpr size_t kMaxValueBytes = size_t{64} << 20;  // 64 MiB
// The largest body: compare_set's key and two values, and their length fields.
constexpr size_t kMaxBodyBytes = kMaxKeyBytes + 2 * kMaxValueBytes + 64;
constexpr size_t kHeaderBytes = 5;

enum Command : uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kCompareSet = 5,
  kCheck = 6,
  kWait = 7,
  kDelete = 8,
  kNumKeys = 9,
};

enum Status : uint8_t {
  kOk = 0,
  kTimeout = 1,
  kBadValue = 2,
};

// The printable name of a command ("set", "get", ...) for messages.
const char* command_name(uint8_t command);

// Builds one frame: the header first, the body length filled in by finish().
class FrameWriter {
 public:
  explicit FrameWriter(uint8_t type, size_t reserve = 64);
  FrameWriter& u8(uint8_t v);
  FrameWriter& u32(uint32_t v);
  FrameWriter& u64(uint64_t v);
  FrameWriter& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
  FrameWriter& bytes(const uint8_t* data, size_t size);
  FrameWriter& bytes(const Bytes& b) { return bytes(b.data(), b.size()); }
  FrameWriter& bytes(const std::string& s) { return bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
  FrameWriter& keys(const std::vector<std::string>& keys);
  // The frame, ready to send (moved out: the writer is spent).
  Bytes finish();

 private:
  Bytes buf_;
};

// Reads the fields of one body. Every read checks the remaining length; a short or oversized field
// sets failed() and returns zero/empty, so a parser reads on and checks once at the end.
class BodyReader {
 public:
  BodyReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  uint8_t u8();
  uint32_t u32();
  uint64_t u64();
  int64_t i64() { return static_cast<int64_t>(u64()); }
  Bytes bytes(size_t max_size);
  std::string string(size_t max_size);
  // u32 n, then n strings; n is bounded by what the body can still hold.
  std::vector<std::string> strings(size_t max_size);
  // Every field read and nothing left over.
  bool ok() const { return !failed_ && p_ == end_; }
  bool failed() const { return failed_; }

 private:
  bool take(size_t n, const uint8_t** out);
  const uint8_t* p_;
  const uint8_t* end_;
  bool failed_ = false;
};

// The frame header's fields.
inline uint8_t header_type(const uint8_t* header) { return header[0]; }
inline uint32_t header_length(const uint8_t* header) {
  return static_cast<uint32_t>(header[1]) | static_cast<uint32_t>(header[2]) << 8 | static_cast<uint32_t>(header[3]) << 16 |
         static_cast<uint32_t>(header[4]) << 24;
}

}  // namespace dp::distributed::tcp_store
