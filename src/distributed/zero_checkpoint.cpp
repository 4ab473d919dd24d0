// ZeroRedundancyOptimizer's checkpoints: consolidate_state_dict / state_dict, load_state_dict of a
// full state (keeping this rank's shard), and the sharded save / load that needs no gather.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include "distributed/zero_internal.h"
#include "dp/core/serialize.h"
#include "dp/distributed/errors.h"
#include "dp/distributed/zero_redundancy_optimizer.h"
#include "dp/ops/factory.h"
#include "dp/optim/state_keys.h"

namespace dp::distributed {

using nlohmann::json;

namespace zero_detail {

Fingerprint fingerprint(const optim::Optimizer& optimizer) {
  Fingerprint f;
  uint64_t h = 0xcbf29ce484222325ULL;
  auto word = [&h](uint64_t w) { h = (h ^ w) * 0x100000001b3ULL; };
  word(optimizer.param_groups().size());
  for (const auto& g : optimizer.param_groups()) {
    word(g.params().size());
    for (const Tensor& p : g.params()) {
      word(static_cast<uint64_t>(p.dtype()));
      word(static_cast<uint64_t>(p.dim()));
      for (int64_t s : p.sizes()) word(static_cast<uint64_t>(s));
      f.elements += p.numel();
      ++f.params;
    }
  }
  f.groups = static_cast<int64_t>(optimizer.param_groups().size());
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  f.hash = h;
  return f;
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace zero_detail

namespace {

constexpr const char* kName = "ZeroRedundancyOptimizer";
constexpr const char* kIndexFormat = "dparallel.zero.sharded";
constexpr const char* kShardFormat = "dparallel.zero.shard";

using optim::parse_state_key;

json parse_json(const std::string& text, const std::string& context) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw ValueError(dp::detail::str(context, " is not valid JSON: ", e.what()));
  }
}

// ---- outcomes every rank agrees on

enum Code : int64_t { kOk = 0, kValue, kShape, kDType, kIO, kIndex, kDevice, kOther };

struct Outcome {
  int64_t code = kOk;
  std::string message;
};

template <typename Fn>
Outcome capture(Fn&& fn) {
  try {
    fn();
    return {};
  } catch (const ShapeError& e) {
    return {kShape, e.what()};
  } catch (const DTypeError& e) {
    return {kDType, e.what()};
  } catch (const IOError& e) {
    return {kIO, e.what()};
  } catch (const IndexError& e) {
    return {kIndex, e.what()};
  } catch (const DeviceError& e) {
    return {kDevice, e.what()};
  } catch (const ValueError& e) {
    return {kValue, e.what()};
  } catch (const std::exception& e) {
    return {kOther, e.what()};
  }
}

[[noreturn]] void raise(int64_t code, const std::string& msg) {
  switch (code) {
    case kShape:
      throw ShapeError(msg);
    case kDType:
      throw DTypeError(msg);
    case kIO:
      throw IOError(msg);
    case kIndex:
      throw IndexError(msg);
    case kDevice:
      throw DeviceError(msg);
    case kValue:
      throw ValueError(msg);
    default:
      throw DistributedError(msg);
  }
}

// Every rank learns every rank's outcome; if any failed, every rank throws the error of the lowest
// failed rank (its type, its message prefixed with "rank r: "). Collective.
void agree(ProcessGroup& pg, const Outcome& mine, const char* op) {
  const int world = pg.size();
  if (world == 1) {
    if (mine.code != kOk) raise(mine.code, mine.message);
    return;
  }
  Tensor local = empty({2}, kInt64);  // this file's collective tensors are host tensors, written and read on the host
  local.data_ptr<int64_t>()[0] = mine.code;
  local.data_ptr<int64_t>()[1] = static_cast<int64_t>(mine.message.size());
  std::vector<Tensor> all;
  for (int r = 0; r < world; ++r) all.push_back(empty({2}, kInt64));
  pg.allgather(all, local)->wait();
  int failed = -1;
  for (int r = 0; r < world && failed < 0; ++r)
    if (all[static_cast<size_t>(r)].data_ptr<int64_t>()[0] != kOk) failed = r;
  if (failed < 0) return;
  const int64_t code = all[static_cast<size_t>(failed)].data_ptr<int64_t>()[0];
  const int64_t length = all[static_cast<size_t>(failed)].data_ptr<int64_t>()[1];
  std::string message = mine.message;
  if (length > 0) {
    Tensor body = empty({length}, kUInt8);
    if (pg.rank() == failed) std::memcpy(body.data_ptr(), mine.message.data(), mine.message.size());
    pg.broadcast(body, failed)->wait();
    message.assign(static_cast<const char*>(body.data_ptr()), static_cast<size_t>(length));
  }
  raise(code, dp::detail::str(kName, ".", op, ": rank ", failed, " of ", world, ": ", message));
}

// ---- a state's tensors from one rank to every rank: the layout (names, dtypes, shapes) as JSON,
// then one broadcast of the data.

OrderedDict<std::string, Tensor> broadcast_tensors(ProcessGroup& pg, int root, const OrderedDict<std::string, Tensor>& tensors) {
  const bool is_root = pg.rank() == root;
  std::string layout;
  if (is_root) {
    json j = json::array();
    for (const auto& item : tensors) {
      const Tensor& t = item.value();
      j.push_back({item.key(), static_cast<int>(t.dtype()), std::vector<int64_t>(t.sizes().begin(), t.sizes().end())});
    }
    layout = j.dump();
  }
  Tensor header = empty({1}, kInt64);
  header.data_ptr<int64_t>()[0] = static_cast<int64_t>(layout.size());
  pg.broadcast(header, root)->wait();
  const int64_t length = header.data_ptr<int64_t>()[0];
  Tensor blob = empty({length}, kUInt8);
  if (is_root && length > 0) std::memcpy(blob.data_ptr(), layout.data(), layout.size());
  if (length > 0) pg.broadcast(blob, root)->wait();
  if (!is_root) layout.assign(static_cast<const char*>(blob.data_ptr()), static_cast<size_t>(length));
  OrderedDict<std::string, Tensor> out;
  if (is_root) {
    for (const auto& item : tensors)
      out.insert(item.key(), item.value().is_cpu() && item.value().is_contiguous() ? item.value() : item.value().to(Device::cpu()).contiguous());
  } else {
    const json j = parse_json(layout, "the state layout received from the root");
    for (const auto& e : j) {
      const auto sizes = e[2].get<std::vector<int64_t>>();
      out.insert(e[0].get<std::string>(), empty(sizes, static_cast<DType>(e[1].get<int>())));
    }
  }
  std::vector<Tensor> payload;
  for (const auto& item : out)
    if (item.value().numel() > 0) payload.push_back(item.value());
  if (!payload.empty()) pg.broadcast(payload, root)->wait();
  return out;
}

// Sorts "state.<i>.<name>" keys by parameter index, keeping each parameter's names in their order
// (the order an unsharded optimizer's state_dict gives).
OrderedDict<std::string, Tensor> sorted_by_index(const OrderedDict<std::string, Tensor>& in) {
  std::vector<std::tuple<int64_t, size_t, std::string, Tensor>> items;
  size_t n = 0;
  for (const auto& item : in) {
    int64_t index = 0;
    std::string field;
    parse_state_key(item.key(), index, field);
    items.emplace_back(index, n++, item.key(), item.value());
  }
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    return std::get<0>(a) != std::get<0>(b) ? std::get<0>(a) < std::get<0>(b) : std::get<1>(a) < std::get<1>(b);
  });
  OrderedDict<std::string, Tensor> out;
  for (auto& [i, k, key, t] : items) out.insert(key, t);
  return out;
}

std::filesystem::path index_path(const std::string& prefix) { return std::filesystem::path(prefix + ".index.json"); }

std::string shard_name(const std::string& prefix, const std::string& id, int rank, int world) {
  return dp::detail::str(std::filesystem::path(prefix).filename().string(), ".", id, ".shard-", rank, "-of-", world, ".safetensors");
}

std::string read_text(const std::filesystem::path& path, const char* op) {
  std::ifstream in(path, std::ios::binary);
  DP_CHECK(in.good(), IOError, op, ": cannot open '", path.string(), "': ", std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  DP_CHECK(!in.bad(), IOError, op, ": cannot read '", path.string(), "'");
  return s.str();
}

// The index of a sharded checkpoint, checked.
struct ShardIndex {
  json j;
  int world = 0;
  std::string save_id;
  std::vector<std::string> shards;
  std::vector<std::vector<int64_t>> partition;
  std::filesystem::path dir;
};

ShardIndex read_index(const std::string& prefix, const char* op) {
  ShardIndex idx;
  const std::filesystem::path path = index_path(prefix);
  const std::string ctx = dp::detail::str(op, ": the index '", path.string(), "'");
  idx.j = parse_json(read_text(path, op), ctx);
  const json& j = idx.j;
  DP_CHECK(j.is_object() && j.value("format", "") == kIndexFormat, ValueError, ctx, " is not a ZeroRedundancyOptimizer sharded checkpoint (format '",
           j.is_object() ? j.value("format", "") : "", "')");
  try {
    idx.world = j.at("world_size").get<int>();
    idx.save_id = j.at("save_id").get<std::string>();
    idx.shards = j.at("shards").get<std::vector<std::string>>();
    idx.partition = j.at("partition").get<std::vector<std::vector<int64_t>>>();
    (void)j.at("param_groups").get<std::string>();
    (void)j.at("optimizer").get<std::string>();
    (void)j.at("fingerprint").get<std::string>();
  } catch (const json::exception& e) {
    throw ValueError(dp::detail::str(ctx, " lacks a field or has one of the wrong type: ", e.what()));
  }
  DP_CHECK(idx.world >= 1 && idx.shards.size() == static_cast<size_t>(idx.world) && idx.partition.size() == static_cast<size_t>(idx.world),
           ValueError, ctx, " names ", idx.shards.size(), " shards and ", idx.partition.size(), " partitions for world size ", idx.world);
  for (const std::string& s : idx.shards)
    DP_CHECK(!s.empty() && s.find('/') == std::string::npos && s != "." && s != "..", ValueError, ctx, " names a shard file '", s,
             "' that is not a plain file name");
  idx.dir = path.parent_path();
  return idx;
}

// Shard `s` of the index: its tensors whose parameter index passes `keep`, checked against the index.
template <typename Keep>
void read_shard(const ShardIndex& idx, int s, Keep&& keep, OrderedDict<std::string, Tensor>& out, const char* op) {
  const std::filesystem::path path = idx.dir / idx.shards[static_cast<size_t>(s)];
  SafetensorsFile file = load_file(path.string());
  auto meta = [&](const char* key) {
    auto it = file.metadata.find(key);
    return it == file.metadata.end() ? std::string() : it->second;
  };
  DP_CHECK(meta("format") == kShardFormat, ValueError, op, ": '", path.string(), "' is not a ZeroRedundancyOptimizer shard (format '",
           meta("format").substr(0, 64), "')");
  DP_CHECK(meta("zero.save_id") == idx.save_id && meta("zero.rank") == std::to_string(s), ValueError, op, ": '", path.string(), "' is shard ",
           meta("zero.rank").substr(0, 16), " of save ", meta("zero.save_id").substr(0, 32), ", but the index expects shard ", s, " of save ",
           idx.save_id, " (a save was interrupted or files were mixed)");
  for (const auto& item : file.tensors) {
    int64_t index = 0;
    std::string field;
    DP_CHECK(parse_state_key(item.key(), index, field), ValueError, op, ": '", path.string(), "' holds an unexpected tensor '",
             item.key().substr(0, 100), "'");
    if (keep(index)) out.insert(item.key(), item.value());
  }
}

}  // namespace

// ---------------------------------------------------------------- consolidate / state_dict

OrderedDict<std::string, Tensor> ZeroRedundancyOptimizer::shard_state_global() const {
  OrderedDict<std::string, Tensor> out;
  if (!inner_) return out;
  const auto& mine = partition_[static_cast<size_t>(group_->rank())];
  for (const auto& item : inner_->state_dict().tensors) {
    int64_t local = 0;
    std::string field;
    DP_CHECK(parse_state_key(item.key(), local, field) && local < static_cast<int64_t>(mine.size()), ValueError, kName, ": the inner ", inner_name_,
             "'s state has an unexpected key '", item.key(), "'");
    out.insert(dp::detail::str("state.", mine[static_cast<size_t>(local)], ".", field), item.value());
  }
  return out;
}

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  const int world = group_->size();
  DP_CHECK(to >= 0 && to < world, ValueError, kName, ".consolidate_state_dict: rank ", to, " is not a rank of the group (ranks 0 to ", world - 1,
           ")");
  wait_for_params();
  if (inner_) sync_options_into(*inner_);
  const OrderedDict<std::string, Tensor> mine = shard_state_global();
  const bool keep = group_->rank() == to;
  OrderedDict<std::string, Tensor> all;
  for (int r = 0; r < world; ++r) {
    OrderedDict<std::string, Tensor> got = world == 1 ? mine : broadcast_tensors(*group_, r, mine);
    if (!keep) continue;
    for (const auto& item : got) all.insert(item.key(), r == group_->rank() ? item.value().clone() : item.value());
  }
  consolidated_to_ = to;
  if (!keep) {
    consolidated_.reset();
    return;
  }
  optim::OptimizerState full;
  full.metadata = Optimizer::state_dict().metadata;  // the wrapper's groups: options and global indices
  full.metadata["optimizer"] = inner_name_;
  full.tensors = sorted_by_index(all);
  consolidated_ = std::move(full);
  consolidated_at_ = steps_;
}

optim::OptimizerState ZeroRedundancyOptimizer::state_dict() const {
  const int rank = group_->rank();
  DP_CHECK(consolidated_to_ >= 0, ValueError, kName, ".state_dict: the state is sharded over ", group_->size(),
           " ranks and has not been consolidated; call consolidate_state_dict(", rank,
           ") on every rank first (or save_sharded(prefix), which needs no gather)");
  DP_CHECK(consolidated_to_ == rank && consolidated_, ValueError, kName, ".state_dict: the state was consolidated on rank ", consolidated_to_,
           ", not on this rank (", rank, "); call state_dict() there, or consolidate_state_dict(", rank, ") on every rank");
  DP_CHECK(consolidated_at_ == steps_, ValueError, kName, ".state_dict: the consolidated state is stale: step() ran ", steps_ - consolidated_at_,
           " time(s) since consolidate_state_dict(", rank, "); call it again on every rank");
  return *consolidated_;
}

// ---------------------------------------------------------------- load a full state

void ZeroRedundancyOptimizer::load_state_dict(const optim::OptimizerState& state) { load_shard(state, "load_state_dict"); }

void ZeroRedundancyOptimizer::load_shard(const optim::OptimizerState& state, const std::string& op) {
  wait_for_params();
  const int rank = group_->rank();
  const std::string ctx = dp::detail::str(kName, ".", op);
  std::vector<std::unique_ptr<optim::OptimizerOptions>> options;
  std::unique_ptr<optim::Optimizer> fresh;
  const Outcome outcome = capture([&] {
    auto opt_it = state.metadata.find("optimizer");
    DP_CHECK(opt_it == state.metadata.end() || opt_it->second == inner_name_, ValueError, ctx, ": the state was saved by ",
             opt_it->second.substr(0, 100), ", not ", inner_name_);
    auto pg_it = state.metadata.find("param_groups");
    DP_CHECK(pg_it != state.metadata.end(), ValueError, ctx, ": metadata has no 'param_groups' entry");
    const json groups = parse_json(pg_it->second, ctx + ": metadata 'param_groups'");
    DP_CHECK(groups.is_array() && groups.size() == param_groups_.size(), ValueError, ctx, ": the loaded state has ",
             groups.is_array() ? groups.size() : 0, " parameter groups but this optimizer has ", param_groups_.size());
    // Saved parameter id -> global position (zipped group by group, as torch.optim does).
    std::map<int64_t, int64_t> position;
    int64_t base = 0;
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const json& jg = groups[gi];
      const size_t n = param_groups_[gi].params().size();
      DP_CHECK(jg.is_object() && jg.contains("params") && jg["params"].is_array() && jg["params"].size() == n, ValueError, ctx, ": param group ", gi,
               " of the loaded state has ", jg.is_object() && jg.contains("params") && jg["params"].is_array() ? jg["params"].size() : 0,
               " parameters but this optimizer's has ", n);
      for (size_t k = 0; k < n; ++k) {
        DP_CHECK(jg["params"][k].is_number_integer(), ValueError, ctx, ": param group ", gi, ": a parameter index is not an integer");
        DP_CHECK(position.emplace(jg["params"][k].get<int64_t>(), base + static_cast<int64_t>(k)).second, ValueError, ctx, ": param group ", gi,
                 ": parameter index ", jg["params"][k].get<int64_t>(), " is listed twice");
      }
      base += static_cast<int64_t>(n);
    }
    // Every tensor is checked against its parameter's shape on every rank; this rank keeps its shard's.
    const std::vector<Tensor> params = all_params();
    optim::OptimizerState local;
    for (const auto& item : state.tensors) {
      int64_t id = 0;
      std::string field;
      DP_CHECK(parse_state_key(item.key(), id, field), ValueError, ctx, ": unexpected key '", item.key().substr(0, 100),
               "' (expected state.<parameter index>.<name>)");
      auto it = position.find(id);
      DP_CHECK(it != position.end(), ValueError, ctx, ": key '", item.key(), "' refers to parameter ", id, ", which no saved param group lists");
      const Tensor& p = params[static_cast<size_t>(it->second)];
      const Tensor& t = item.value();
      DP_CHECK(t.defined() && (t.numel() == 1 || t.sizes() == p.sizes()), ShapeError, ctx, ": ", item.key(), " has shape ",
               t.defined() ? t.size_str() : std::string("(undefined)"), " but its parameter has shape ", p.size_str());
      if (owner_[static_cast<size_t>(it->second)] == rank)
        local.tensors.insert(dp::detail::str("state.", local_index_[static_cast<size_t>(it->second)], ".", field), t);
    }
    // The hyper-parameters, parsed and checked by an optimizer of the inner kind over every parameter.
    std::unique_ptr<optim::Optimizer> probe = factory_(param_groups_);
    optim::OptimizerState meta_only;
    meta_only.metadata = state.metadata;
    meta_only.metadata["optimizer"] = inner_name_;
    probe->load_state_dict(meta_only);
    for (const auto& g : probe->param_groups()) options.push_back(g.options().clone());
    // This rank's shard: the same groups with local indices.
    if (!partition_[static_cast<size_t>(rank)].empty()) {
      json jlocal = groups;
      for (auto& jg : jlocal) jg["params"] = json::array();
      std::vector<int64_t> group_of;
      for (size_t gi = 0; gi < param_groups_.size(); ++gi)
        group_of.insert(group_of.end(), param_groups_[gi].params().size(), static_cast<int64_t>(gi));
      for (int64_t global : partition_[static_cast<size_t>(rank)])
        jlocal[static_cast<size_t>(group_of[static_cast<size_t>(global)])]["params"].push_back(local_index_[static_cast<size_t>(global)]);
      local.metadata["param_groups"] = jlocal.dump();
      local.metadata["optimizer"] = inner_name_;
      std::vector<optim::OptimizerParamGroup> lg = local_groups();
      for (size_t gi = 0; gi < lg.size(); ++gi) lg[gi].set_options(options[gi]->clone());
      fresh = factory_(std::move(lg));
      fresh->load_state_dict(local);
    }
  });
  agree(*group_, outcome, op.c_str());
  // Every rank succeeded: commit.
  for (size_t gi = 0; gi < options.size(); ++gi) param_groups_[gi].set_options(std::move(options[gi]));
  inner_ = std::move(fresh);
  consolidated_.reset();
  consolidated_to_ = -1;
}

// ---------------------------------------------------------------- sharded save / load

void ZeroRedundancyOptimizer::save_sharded(const std::string& prefix) {
  DP_CHECK(!prefix.empty(), ValueError, kName, ".save_sharded: the path prefix is empty");
  wait_for_params();
  if (inner_) sync_options_into(*inner_);
  const int rank = group_->rank(), world = group_->size();
  // One save id for every rank's files: rank 0's random number.
  Tensor id_tensor = empty({1}, kInt64);
  if (rank == 0) {
    std::random_device rd;
    id_tensor.data_ptr<int64_t>()[0] = static_cast<int64_t>((static_cast<uint64_t>(rd()) << 32) ^ rd());
  }
  if (world > 1) group_->broadcast(id_tensor, 0)->wait();
  const std::string id = zero_detail::hex(static_cast<uint64_t>(id_tensor.data_ptr<int64_t>()[0]));
  const std::filesystem::path dir = std::filesystem::path(prefix).parent_path();
  const std::string groups_json = Optimizer::state_dict().metadata.at("param_groups");
  const std::string fp = zero_detail::hex(zero_detail::fingerprint(*this).hash);

  json owned = partition_[static_cast<size_t>(rank)];
  std::map<std::string, std::string> meta{{"format", kShardFormat},
                                          {"optimizer", inner_name_},
                                          {"param_groups", groups_json},
                                          {"zero.rank", std::to_string(rank)},
                                          {"zero.world_size", std::to_string(world)},
                                          {"zero.save_id", id},
                                          {"zero.owned", owned.dump()},
                                          {"zero.fingerprint", fp}};
  const std::string mine = shard_name(prefix, id, rank, world);
  agree(*group_, capture([&] { dp::save(shard_state_global(), (dir / mine).string(), meta); }), "save_sharded");

  // Every shard is complete: rank 0 commits the index (atomically), then removes the previous
  // save's shards.
  Outcome committed;
  if (rank == 0) {
    committed = capture([&] {
      std::vector<std::string> previous;
      try {
        previous = read_index(prefix, "save_sharded").shards;
      } catch (const std::exception&) {  // no previous index, or an unreadable one: nothing to remove
      }
      json j;
      j["format"] = kIndexFormat;
      j["version"] = 1;
      j["world_size"] = world;
      j["save_id"] = id;
      j["optimizer"] = inner_name_;
      j["fingerprint"] = fp;
      j["param_groups"] = groups_json;
      j["partition"] = partition_;
      std::vector<std::string> shards;
      for (int r = 0; r < world; ++r) shards.push_back(shard_name(prefix, id, r, world));
      j["shards"] = shards;
      dp::detail::write_file_atomic(index_path(prefix).string(), j.dump(1), "save_sharded");
      for (const std::string& old : previous)
        if (std::find(shards.begin(), shards.end(), old) == shards.end()) {
          std::error_code ec;
          std::filesystem::remove(dir / old, ec);
        }
    });
  }
  agree(*group_, committed, "save_sharded");
}

void ZeroRedundancyOptimizer::load_sharded(const std::string& prefix) {
  wait_for_params();
  const int rank = group_->rank();
  optim::OptimizerState state;
  const Outcome read = capture([&] {
    const ShardIndex idx = read_index(prefix, "load_sharded");
    const std::string fp = zero_detail::hex(zero_detail::fingerprint(*this).hash);
    DP_CHECK(idx.j["fingerprint"].get<std::string>() == fp, ValueError, "load_sharded: '", index_path(prefix).string(),
             "' was saved for other parameters (fingerprint ", idx.j["fingerprint"].get<std::string>(), ", this optimizer's ", fp,
             "): the groups' parameter shapes or dtypes differ");
    DP_CHECK(idx.j["optimizer"].get<std::string>() == inner_name_, ValueError, "load_sharded: '", index_path(prefix).string(),
             "' holds the state of ", idx.j["optimizer"].get<std::string>(), ", not ", inner_name_);
    // Which saved shard holds each of this rank's parameters: read only those files.
    std::map<int64_t, int> saved_owner;
    for (int s = 0; s < idx.world; ++s)
      for (int64_t i : idx.partition[static_cast<size_t>(s)]) saved_owner[i] = s;
    std::set<int64_t> wanted(partition_[static_cast<size_t>(rank)].begin(), partition_[static_cast<size_t>(rank)].end());
    std::set<int> files;
    for (int64_t i : wanted) {
      auto it = saved_owner.find(i);
      DP_CHECK(it != saved_owner.end(), ValueError, "load_sharded: '", index_path(prefix).string(), "' assigns parameter ", i, " to no shard");
      files.insert(it->second);
    }
    for (int s : files)
      read_shard(
          idx, s, [&](int64_t i) { return wanted.count(i) != 0; }, state.tensors, "load_sharded");
    state.metadata["param_groups"] = idx.j["param_groups"].get<std::string>();
    state.metadata["optimizer"] = inner_name_;
  });
  agree(*group_, read, "load_sharded");
  load_shard(state, "load_sharded");
}

optim::OptimizerState load_zero_shards(const std::string& prefix) {
  const ShardIndex idx = read_index(prefix, "load_zero_shards");
  optim::OptimizerState state;
  OrderedDict<std::string, Tensor> all;
  for (int s = 0; s < idx.world; ++s)
    read_shard(
        idx, s, [](int64_t) { return true; }, all, "load_zero_shards");
  state.tensors = sorted_by_index(all);
  state.metadata["param_groups"] = idx.j["param_groups"].get<std::string>();
  state.metadata["optimizer"] = idx.j["optimizer"].get<std::string>();
  return state;
}

}  // namespace dp::distributed
