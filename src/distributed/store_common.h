#pragma once
// Helpers every store shares: add()'s decimal counters and the StoreTimeout message.
#include <chrono>
#include <string>
#include <vector>
#include "dp/distributed/store.h"

namespace dp::distributed {

// add()'s values are decimal integers ("42"), as c10d's stores write them.
int64_t parse_counter(const std::string& key, const Bytes& value);
Bytes counter_bytes(int64_t value);

// "<store>: timed out after 5000 ms waiting for key(s) 'a', 'b'"
[[noreturn]] void throw_store_timeout(const std::string& store, const std::vector<std::string>& missing, std::chrono::milliseconds waited);

}  // namespace dp::distributed
