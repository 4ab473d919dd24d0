#include "distributed/tcp_store_protocol.h"
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <cstring>

namespace dp::distributed::tcp_store {

const char* command_name(uint8_t command) {
  switch (command) {
    case kHello:
      return "hello";
    case kSet:
      return "set";
    case kGet:
      return "get";
    case kAdd:
      return "add";
    case kCompareSet:
      return "compare_set";
    case kCheck:
      return "check";
    case kWait:
      return "wait";
    case kDelete:
      return "delete_key";
    case kNumKeys:
      return "num_keys";
    case kAuth:
      return "auth";
    default:
      return "unknown command";
  }
}

FrameWriter::FrameWriter(uint8_t type, size_t reserve) : buf_(kHeaderBytes, 0) {
  buf_.reserve(kHeaderBytes + reserve);
  buf_[0] = type;
}

FrameWriter& FrameWriter::u8(uint8_t v) {
  buf_.push_back(v);
  return *this;
}

FrameWriter& FrameWriter::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

FrameWriter& FrameWriter::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

FrameWriter& FrameWriter::bytes(const uint8_t* data, size_t size) {
  u32(static_cast<uint32_t>(size));
  buf_.insert(buf_.end(), data, data + size);
  return *this;
}

FrameWriter& FrameWriter::keys(const std::vector<std::string>& keys) {
  u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) bytes(k);
  return *this;
}

FrameWriter& FrameWriter::raw(const uint8_t* data, size_t size) {
  buf_.insert(buf_.end(), data, data + size);
  return *this;
}

Bytes FrameWriter::finish() {
  const uint32_t n = static_cast<uint32_t>(buf_.size() - kHeaderBytes);
  for (int i = 0; i < 4; ++i) buf_[1 + i] = static_cast<uint8_t>(n >> (8 * i));
  return std::move(buf_);
}

bool BodyReader::take(size_t n, const uint8_t** out) {
  if (failed_ || static_cast<size_t>(end_ - p_) < n) {
    failed_ = true;
    return false;
  }
  *out = p_;
  p_ += n;
  return true;
}

uint8_t BodyReader::u8() {
  const uint8_t* p;
  return take(1, &p) ? p[0] : 0;
}

uint32_t BodyReader::u32() {
  const uint8_t* p;
  if (!take(4, &p)) return 0;
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

uint64_t BodyReader::u64() {
  const uint8_t* p;
  if (!take(8, &p)) return 0;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

Bytes BodyReader::bytes(size_t max_size) {
  const uint32_t n = u32();
  const uint8_t* p;
  if (n > max_size) failed_ = true;
  if (!take(n, &p)) return {};
  return Bytes(p, p + n);
}

std::string BodyReader::string(size_t max_size) {
  const uint32_t n = u32();
  const uint8_t* p;
  if (n > max_size) failed_ = true;
  if (!take(n, &p)) return {};
  return std::string(reinterpret_cast<const char*>(p), n);
}

const uint8_t* BodyReader::raw(size_t n) {
  const uint8_t* p;
  return take(n, &p) ? p : nullptr;
}

std::vector<std::string> BodyReader::strings(size_t max_size, size_t max_count) {
  const uint32_t n = u32();
  last_count_ = n;
  // Each string costs at least its 4-byte length: a count the body cannot hold is a lie.
  if (failed_ || n > static_cast<size_t>(end_ - p_) / 4) {
    failed_ = true;
    return {};
  }
  if (n > max_count) {
    count_exceeded_ = true;
    failed_ = true;
    return {};
  }
  std::vector<std::string> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n && !failed_; ++i) out.push_back(string(max_size));
  return out;
}

void hmac_sha256(const void* key, size_t key_size, const uint8_t* data, size_t size, uint8_t out[kTagBytes]) {
  unsigned int n = 0;
  if (::HMAC(EVP_sha256(), key, static_cast<int>(key_size), data, size, out, &n) == nullptr || n != kTagBytes)
    throw StoreError("TCPStore: OpenSSL's HMAC-SHA256 failed");
}

void handshake_tag(const std::string& token, const char* label, const uint8_t* a, const uint8_t* b, uint8_t out[kTagBytes]) {
  uint8_t message[64 + 2 * kNonceBytes];
  const size_t label_size = std::strlen(label);
  std::memcpy(message, label, label_size);
  std::memcpy(message + label_size, a, kNonceBytes);
  std::memcpy(message + label_size + kNonceBytes, b, kNonceBytes);
  hmac_sha256(token.data(), token.size(), message, label_size + 2 * kNonceBytes, out);
}

void random_bytes(uint8_t* out, size_t n) {
  if (::RAND_bytes(out, static_cast<int>(n)) != 1)
    throw StoreError("TCPStore: the operating system gave no random bytes (OpenSSL's RAND_bytes failed)");
}

bool tags_equal(const uint8_t* a, const uint8_t* b) { return ::CRYPTO_memcmp(a, b, kTagBytes) == 0; }

}  // namespace dp::distributed::tcp_store
