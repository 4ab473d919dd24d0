#pragma once
// The TCP store's wire format, shared by server and client. Every message is a frame:
//   [1 byte: command (request) or status (answer)] [4 bytes: body length, little-endian] [body]
// and a body is a sequence of fields: u8, u32/u64/i64 (little-endian), and byte strings written
// as a u32 length then the bytes. The limits below bound what a peer can make the other allocate:
// a frame that announces more, or a field that overruns its frame, closes the connection.
//
// A connection starts with the server's greeting and the client's proof that it holds the job's
// token (a challenge-response: the token itself never travels):
//   S -> C  kHello   u32 magic, u8 version, u8 flags (bit 0: a token is required), 32 bytes Ns
//                    (random, new for every connection), u32 max key bytes, u32 max value bytes,
//                    u32 max keys per request, u64 max wait ms (the server's limits)
//   C -> S  kAuth    32 bytes Nc (random), 32 bytes Tc = HMAC-SHA256(token, "dp-store v2 client" Ns Nc)
//   S -> C  kOk      32 bytes Ts = HMAC-SHA256(token, "dp-store v2 server" Nc Ns)   | kDenied (empty)
// The server checks Tc in constant time and reads nothing else before it: an unauthenticated peer
// can send exactly one frame of exactly kAuthBody bytes. The client checks Ts, so a server that
// does not hold the token (another job's store on the port) is refused too. An open server (no
// token) sets no flag and expects no kAuth: its connections may send requests at once.
//
// Requests and their answers (kOk unless said otherwise; any request may also be answered kLimit
// with a message naming the limit it exceeds):
//   kSet         key, value                       -> (empty)
//   kGet         key, u64 timeout_ms              -> value            | kTimeout: u32 n, n keys, u64 waited_ms
//   kAdd         key, i64 delta                   -> i64 sum          | kBadValue: message
//   kCompareSet  key, expected, desired           -> value after the call
//   kCheck       u32 n, n keys                    -> u8 all present
//   kWait        u32 n, n keys, u64 timeout_ms    -> (empty)          | kTimeout: u32 n, n keys, u64 waited_ms
//   kDelete      key                              -> u8 existed
//   kNumKeys     (empty)                          -> i64 count
// get and wait are timed by the server (it parks them until the keys exist or the timeout passes,
// at most its max wait), so a timeout answer names exactly the keys that were missing and the
// connection stays in step.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include "dp/distributed/store.h"

namespace dp::distributed::tcp_store {

constexpr uint32_t kMagic = 0x53545044;  // "DPTS"
constexpr uint8_t kVersion = 2;
constexpr uint8_t kFlagTokenRequired = 1;
constexpr size_t kNonceBytes = 32;
constexpr size_t kTagBytes = 32;
constexpr size_t kAuthBody = kNonceBytes + kTagBytes;
constexpr size_t kHelloBody = 4 + 1 + 1 + kNonceBytes + 4 + 4 + 4 + 8;

// The largest limits a server may be configured with (its options are checked against these).
constexpr size_t kMaxKeyBytesCap = size_t{64} << 10;    // 64 KiB
constexpr size_t kMaxValueBytesCap = size_t{64} << 20;  // 64 MiB
constexpr size_t kHeaderBytes = 5;
// The largest body a server with these limits accepts: compare_set's key and two values, and their
// length fields (a key list of check/wait must fit in it too).
constexpr size_t max_body_bytes(size_t max_key, size_t max_value) { return max_key + 2 * max_value + 64; }
constexpr size_t kMaxBodyBytesCap = max_body_bytes(kMaxKeyBytesCap, kMaxValueBytesCap);

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
  kAuth = 10,
};

enum Status : uint8_t {
  kOk = 0,
  kTimeout = 1,
  kBadValue = 2,
  kLimit = 3,
  kDenied = 4,
};

// HMAC-SHA256(key, data) (OpenSSL's one-shot HMAC); StoreError if OpenSSL fails.
void hmac_sha256(const void* key, size_t key_size, const uint8_t* data, size_t size, uint8_t out[kTagBytes]);
// HMAC-SHA256(token, label ‖ a ‖ b) over two nonces: the handshake's proofs (OpenSSL's HMAC).
void handshake_tag(const std::string& token, const char* label, const uint8_t* a, const uint8_t* b, uint8_t out[kTagBytes]);
constexpr const char* kClientLabel = "dp-store v2 client";
constexpr const char* kServerLabel = "dp-store v2 server";
// Fills `out` with n random bytes from the operating system (OpenSSL's RAND_bytes); StoreError if
// it has none to give.
void random_bytes(uint8_t* out, size_t n);
// Whether two tags are equal, in time that does not depend on where they differ (CRYPTO_memcmp).
bool tags_equal(const uint8_t* a, const uint8_t* b);

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
  // Fixed-size bytes without a length (nonces, tags).
  FrameWriter& raw(const uint8_t* data, size_t size);
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
  // Exactly n bytes without a length field (nonces, tags); nullptr when the body is shorter.
  const uint8_t* raw(size_t n);
  // u32 n, then n strings; n is bounded by what the body can still hold. More than max_count: the
  // strings are not read, count_exceeded() is set (and ok() is false).
  std::vector<std::string> strings(size_t max_size, size_t max_count = SIZE_MAX);
  bool count_exceeded() const { return count_exceeded_; }
  uint32_t last_count() const { return last_count_; }
  // Every field read and nothing left over.
  bool ok() const { return !failed_ && p_ == end_; }
  bool failed() const { return failed_; }

 private:
  bool take(size_t n, const uint8_t** out);
  const uint8_t* p_;
  const uint8_t* end_;
  bool failed_ = false;
  bool count_exceeded_ = false;
  uint32_t last_count_ = 0;
};

// The frame header's fields.
inline uint8_t header_type(const uint8_t* header) { return header[0]; }
inline uint32_t header_length(const uint8_t* header) {
  return static_cast<uint32_t>(header[1]) | static_cast<uint32_t>(header[2]) << 8 | static_cast<uint32_t>(header[3]) << 16 |
         static_cast<uint32_t>(header[4]) << 24;
}

}  // namespace dp::distributed::tcp_store
