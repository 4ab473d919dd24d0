#pragma once
// An insertion-ordered map with unique keys (libtorch's torch::OrderedDict): the container of
// named parameters, buffers, children and state dicts, whose order is part of the contract
// (parameters() order, state_dict key order, checkpoint layout).
#include <cstddef>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>
#include "dp/core/errors.h"

namespace dp {

template <typename Key, typename Value>
class OrderedDict {
 public:
  class Item {
   public:
    Item(Key key, Value value) : key_(std::move(key)), value_(std::move(value)) {}
    const Key& key() const { return key_; }
    Value& value() { return value_; }
    const Value& value() const { return value_; }
    Value& operator*() { return value_; }
    const Value& operator*() const { return value_; }
    Value* operator->() { return &value_; }
    const Value* operator->() const { return &value_; }

   private:
    Key key_;
    Value value_;
  };

  OrderedDict() = default;
  OrderedDict(std::initializer_list<std::pair<Key, Value>> items) {
    for (auto& kv : items) insert(kv.first, kv.second);
  }

  // Throws ValueError if the key is already present.
  Value& insert(const Key& key, Value value) {
    DP_CHECK(index_.find(key) == index_.end(), ValueError, "OrderedDict: key '", key, "' already present");
    index_.emplace(key, items_.size());
    items_.emplace_back(key, std::move(value));
    return items_.back().value();
  }
  // Inserts or replaces (keeping the key's position).
  Value& insert_or_assign(const Key& key, Value value) {
    auto it = index_.find(key);
    if (it != index_.end()) return items_[it->second].value() = std::move(value);
    return insert(key, std::move(value));
  }
  bool contains(const Key& key) const { return index_.find(key) != index_.end(); }
  Value* find(const Key& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].value();
  }
  const Value* find(const Key& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].value();
  }
  Value& operator[](const Key& key) {
    Value* v = find(key);
    DP_CHECK(v != nullptr, IndexError, "OrderedDict: no key '", key, "'");
    return *v;
  }
  const Value& operator[](const Key& key) const {
    const Value* v = find(key);
    DP_CHECK(v != nullptr, IndexError, "OrderedDict: no key '", key, "'");
    return *v;
  }
  // Removes a key (order of the others kept); returns whether it was present.
  bool erase(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(it->second));
    rebuild_index();
    return true;
  }
  void clear() {
    items_.clear();
    index_.clear();
  }

  Item& operator[](size_t i) { return items_.at(i); }
  const Item& operator[](size_t i) const { return items_.at(i); }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  const std::vector<Item>& items() const { return items_; }
  std::vector<Key> keys() const {
    std::vector<Key> out;
    out.reserve(items_.size());
    for (const auto& it : items_) out.push_back(it.key());
    return out;
  }
  std::vector<Value> values() const {
    std::vector<Value> out;
    out.reserve(items_.size());
    for (const auto& it : items_) out.push_back(it.value());
    return out;
  }

 private:
  void rebuild_index() {
    index_.clear();
    for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].key(), i);
  }
  std::vector<Item> items_;
  std::unordered_map<Key, size_t> index_;
};

}  // namespace dp
