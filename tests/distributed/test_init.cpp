// init_process_group and its environment: read_environment with a fake getenv for each launcher's
// variables and each error, local_address_towards on loopback, and init_process_group for a world
// of one (no store needed) and of two ranks (threads) through a TCPStore on 127.0.0.1.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <functional>
#include <map>
#include <thread>
#include "dp/distributed/errors.h"
#include "dp/distributed/init.h"
#include "dp/dp.h"
#include "support/temp_files.h"

namespace dp::distributed {
namespace {

using Vars = std::map<std::string, std::string>;

std::optional<Environment> read(const Vars& vars) {
  return read_environment([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

// The ValueError's message for vars (failing the test when there is none).
std::string error_of(const Vars& vars) {
  try {
    read(vars);
  } catch (const ValueError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ValueError";
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ReadEnvironment, NoLauncherVariablesMeansNoEnvironment) {
  EXPECT_FALSE(read({}).has_value());
  EXPECT_FALSE(read({{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}}).has_value());
}

TEST(ReadEnvironment, TorchrunVariables) {
  auto e = read(
      {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->source, "torchrun");
  EXPECT_EQ(e->rank, 3);
  EXPECT_EQ(e->world_size, 8);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->local_world_size, 2);
  EXPECT_EQ(e->master_addr, "10.0.0.1");
  EXPECT_EQ(e->master_port, 29500);
  EXPECT_FALSE(e->store_hosted);
}

TEST(ReadEnvironment, HandExportedRankAndWorldSizeMeanOneMachine) {
  auto e = read({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"DP_STORE_HOSTED", "1"}});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->local_world_size, 2);
  EXPECT_TRUE(e->store_hosted);
  EXPECT_EQ(e->master_addr, "");
  EXPECT_EQ(e->master_port, 0);
}

TEST(ReadEnvironment, OpenMpiVariables) {
  auto e = read({{"OMPI_COMM_WORLD_RANK", "5"},
                 {"OMPI_COMM_WORLD_SIZE", "6"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                 {"MASTER_ADDR", "node0"},
                 {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->source, "mpirun");
  EXPECT_EQ(e->rank, 5);
  EXPECT_EQ(e->world_size, 6);
  EXPECT_EQ(e->local_rank, 2);
  EXPECT_EQ(e->local_world_size, 3);
  EXPECT_EQ(e->master_addr, "node0");
  EXPECT_EQ(e->master_port, 1234);
}

TEST(ReadEnvironment, SlurmVariablesWithTheLaunchNodeAsMaster) {
  auto e = read({{"SLURM_PROCID", "4"},
                 {"SLURM_NTASKS", "6"},
                 {"SLURM_LOCALID", "1"},
                 {"SLURM_NTASKS_PER_NODE", "2(x3)"},
                 {"SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3"},
                 {"MASTER_PORT", "29400"}});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->source, "srun");
  EXPECT_EQ(e->rank, 4);
  EXPECT_EQ(e->world_size, 6);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->local_world_size, 2);
  EXPECT_EQ(e->master_addr, "10.1.2.3");
  // MASTER_ADDR, when set, wins over the launch node.
  auto m = read({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3"}, {"MASTER_ADDR", "10.9.9.9"}});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->master_addr, "10.9.9.9");
}

TEST(ReadEnvironment, TorchrunNamesWinOverMpiAndSlurm) {
  auto e = read({{"SLURM_PROCID", "1"},
                 {"SLURM_NTASKS", "2"},
                 {"OMPI_COMM_WORLD_RANK", "0"},
                 {"OMPI_COMM_WORLD_SIZE", "4"},
                 {"RANK", "2"},
                 {"WORLD_SIZE", "3"}});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->source, "torchrun");
  EXPECT_EQ(e->rank, 2);
  EXPECT_EQ(e->world_size, 3);
  auto m = read({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->source, "mpirun");
}

TEST(ReadEnvironment, MissingOrMalformedVariablesAreNamed) {
  EXPECT_TRUE(contains(error_of({{"RANK", "0"}}), "WORLD_SIZE is not set")) << error_of({{"RANK", "0"}});
  EXPECT_TRUE(contains(error_of({{"WORLD_SIZE", "2"}}), "RANK is not set"));
  EXPECT_TRUE(contains(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), "RANK='x' is not an integer"));
  EXPECT_TRUE(contains(error_of({{"RANK", "1"}, {"WORLD_SIZE", "2.0"}}), "WORLD_SIZE='2.0' is not an integer"));
  EXPECT_TRUE(contains(error_of({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}), "RANK='-1'"));
  EXPECT_TRUE(contains(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), "WORLD_SIZE='0'"));
  EXPECT_TRUE(contains(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), "RANK=2 is not below WORLD_SIZE=2"));
  EXPECT_TRUE(contains(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
                       "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"));
  EXPECT_TRUE(contains(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}), "MASTER_PORT='70000'"));
  EXPECT_TRUE(contains(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "http"}}), "MASTER_PORT='http'"));
  EXPECT_TRUE(contains(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"DP_STORE_HOSTED", "yes"}}), "DP_STORE_HOSTED='yes' is not 0 or 1"));
  EXPECT_TRUE(contains(error_of({{"OMPI_COMM_WORLD_RANK", "0"}}), "OMPI_COMM_WORLD_SIZE is not set"));
  EXPECT_TRUE(contains(error_of({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "2"}}), "SLURM_PROCID=3 is not below SLURM_NTASKS=2"));
  EXPECT_TRUE(contains(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NTASKS_PER_NODE", "many"}}), "SLURM_NTASKS_PER_NODE='many'"));
}

TEST(LocalAddressTowards, LoopbackRoutesFromLoopback) {
  EXPECT_EQ(local_address_towards("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(local_address_towards("localhost").rfind("127.", 0) == 0 || local_address_towards("localhost") == "::1", true);
  try {
    local_address_towards("");
    ADD_FAILURE() << "an empty host resolved";
  } catch (const DistributedError& e) {
    EXPECT_TRUE(contains(e.what(), "cannot resolve ''")) << e.what();
  }
}

// The launcher variables of the test's own environment are cleared for the init tests.
class InitProcessGroup : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
          "SLURM_PROCID", "SLURM_NTASKS", "DP_STORE_HOSTED", "DP_STORE_PREFIX", "DP_STORE_TOKEN", "DP_STORE_TOKEN_FILE", "DP_STORE_INSECURE"}) {
      if (const char* v = std::getenv(name)) saved_.emplace_back(name, v);
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST_F(InitProcessGroup, AWorldOfOneNeedsNoMasterAddress) {
  InitOptions o;
  o.world_size = 1;
  auto pg = init_process_group(o);
  EXPECT_EQ(pg->rank(), 0);
  EXPECT_EQ(pg->size(), 1);
  Tensor t = full({2}, 4.0, kFloat32);
  pg->allreduce(t)->wait();
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(2, 4.0f));
  // The same from the environment.
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  auto from_env = init_process_group();
  EXPECT_EQ(from_env->size(), 1);
}

TEST_F(InitProcessGroup, WithoutRankAndWorldSizeItSaysWhatToSet) {
  try {
    init_process_group();
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "set RANK and WORLD_SIZE")) << e.what();
  }
  InitOptions o;
  o.rank = 0;
  o.world_size = 2;
  try {
    init_process_group(o);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "MASTER_ADDR is not set")) << e.what();
  }
  o.master_addr = "127.0.0.1";
  try {
    init_process_group(o);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "MASTER_PORT is not set")) << e.what();
  }
  InitOptions bad;
  bad.backend = "nccl";
  try {
    init_process_group(bad);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "backend 'nccl'")) << e.what();
  }
}

// Two ranks as threads: rank 0 hosts the TCPStore at MASTER_ADDR:MASTER_PORT (given as options).
TEST_F(InitProcessGroup, TwoRanksMeetThroughATcpStoreHostedByRankZero) {
  // A free port: the server of a throwaway TCPStoreServer, released again (the kernel does not hand
  // it out again at once).
  uint16_t port = 0;
  {
    TCPStoreServerOptions open;
    open.insecure = true;
    TCPStoreServer probe("127.0.0.1", 0, open);
    port = probe.port();
  }
  std::vector<std::string> errors(2);
  std::vector<float> results(2);
  std::vector<std::string> binds(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        InitOptions o;
        o.rank = r;
        o.world_size = 2;
        o.master_addr = "127.0.0.1";
        o.master_port = port;
        o.store_token = "init-test-token-0123456789abcdef";
        o.group.timeout = std::chrono::seconds(10);
        auto pg = init_process_group(o);
        Tensor t = full({3}, double(r + 1), kFloat32);
        pg->allreduce(t)->wait();
        results[static_cast<size_t>(r)] = t.to_vector<float>()[2];
        binds[static_cast<size_t>(r)] = pg->options().bind_address;
        pg->barrier()->wait();  // rank 0 keeps the store up until rank 1 is done with it
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    EXPECT_EQ(results[static_cast<size_t>(r)], 3.0f) << "rank " << r;
    EXPECT_EQ(binds[static_cast<size_t>(r)], "127.0.0.1") << "rank " << r;
  }
}

// Two ranks as threads, rank 0 hosting the store on a free port of 127.0.0.1; `configure` adds the
// token options. The ranks' errors ("" when none), after an allreduce.
std::vector<std::string> two_ranks(const std::function<void(InitOptions&)>& configure) {
  uint16_t port = 0;
  {
    TCPStoreServerOptions open;
    open.insecure = true;
    TCPStoreServer probe("127.0.0.1", 0, open);
    port = probe.port();
  }
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        InitOptions o;
        o.rank = r;
        o.world_size = 2;
        o.master_addr = "127.0.0.1";
        o.master_port = port;
        o.group.timeout = std::chrono::seconds(10);
        configure(o);
        auto pg = init_process_group(o);
        Tensor t = full({1}, double(r + 1), kFloat64);
        pg->allreduce(t)->wait();
        if (t.item<double>() != 3.0) errors[static_cast<size_t>(r)] = "wrong sum";
        pg->barrier()->wait();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST_F(InitProcessGroup, WithoutATokenTheStoreIsRefusedAndTheMessageSaysHowToGiveOne) {
  InitOptions o;
  o.rank = 0;
  o.world_size = 2;
  o.master_addr = "127.0.0.1";
  o.master_port = 29999;
  try {
    init_process_group(o);
    ADD_FAILURE() << "a store open to anyone was started";
  } catch (const ValueError& e) {
    for (const char* part : {"no store token", "127.0.0.1:29999", "dp-run", "DP_STORE_TOKEN", "DP_STORE_TOKEN_FILE", "DP_STORE_INSECURE=1"})
      EXPECT_TRUE(contains(e.what(), part)) << part << ": " << e.what();
  }
  // A token too short to be a secret is refused, and never quoted.
  o.store_token = "short-secret";
  try {
    init_process_group(o);
    ADD_FAILURE() << "a 12-byte token was accepted";
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "a token of 12 bytes")) << e.what();
    EXPECT_FALSE(contains(e.what(), "short-secret")) << e.what();
  }
}

TEST_F(InitProcessGroup, TheTokenFromTheEnvironmentIsUsedAndRemovedFromIt) {
  ::setenv("DP_STORE_TOKEN", "env-token-0123456789abcdef0123", 1);
  const std::vector<std::string> errors = two_ranks([](InitOptions&) {});
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  // Read once, then gone: programs this process starts do not inherit it.
  EXPECT_EQ(std::getenv("DP_STORE_TOKEN"), nullptr);
  EXPECT_EQ(store_token_from_environment(), "env-token-0123456789abcdef0123");
}

TEST_F(InitProcessGroup, RankZeroWritesATokenFileThatTheOtherRanksRead) {
  test::TempDir dir;
  const std::string path = dir.file("job.token");
  const std::vector<std::string> errors = two_ranks([&](InitOptions& o) { o.store_token_file = path; });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string token = read_store_token_file(path);
  EXPECT_EQ(token.size(), 64u);
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
  // The next job finds the file and uses its token; a file others may read is refused by mode.
  EXPECT_EQ(two_ranks([&](InitOptions& o) { o.store_token_file = path; }), (std::vector<std::string>{"", ""}));
  ::chmod(path.c_str(), 0644);
  const std::vector<std::string> refused = two_ranks([&](InitOptions& o) { o.store_token_file = path; });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(contains(refused[static_cast<size_t>(r)], "can be read by others (mode 0644): chmod 600")) << refused[r];
}

TEST_F(InitProcessGroup, AnOpenStoreIsAnExplicitChoice) {
  EXPECT_EQ(two_ranks([](InitOptions& o) { o.insecure_store = true; }), (std::vector<std::string>{"", ""}));
  ::setenv("DP_STORE_INSECURE", "1", 1);
  EXPECT_EQ(two_ranks([](InitOptions&) {}), (std::vector<std::string>{"", ""}));
  ::unsetenv("DP_STORE_INSECURE");
}

// A store made by the caller (a launcher-hosted server): the transport binds towards its host.
TEST_F(InitProcessGroup, ACallersTcpStoreIsUsedAndSetsTheBindAddress) {
  TCPStoreServerOptions server_options;
  server_options.token = "init-test-token-0123456789abcdef";
  TCPStoreServer server("127.0.0.1", 0, server_options);
  std::vector<std::string> errors(2);
  std::vector<double> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        InitOptions o;
        o.rank = r;
        o.world_size = 2;
        TCPStoreOptions so;
        so.timeout = std::chrono::seconds(10);
        so.token = server_options.token;
        o.store = std::make_shared<PrefixStore>("job7", std::make_shared<TCPStore>("127.0.0.1", server.port(), so));
        o.group.timeout = std::chrono::seconds(10);
        auto pg = init_process_group(o);
        EXPECT_EQ(pg->options().bind_address, "127.0.0.1");
        Tensor t = full({1}, double(10 * (r + 1)), kFloat64);
        pg->allreduce(t, ReduceOp::Max)->wait();
        results[static_cast<size_t>(r)] = t.item<double>();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    EXPECT_EQ(results[static_cast<size_t>(r)], 20.0) << "rank " << r;
  }
}

// DP_STORE_PREFIX (a launcher's restart attempt) puts every key of the group under the prefix: a
// second attempt on the same store does not see the first one's.
TEST_F(InitProcessGroup, StorePrefixFromTheEnvironmentSeparatesAttempts) {
  auto shared = std::make_shared<HashStore>(std::chrono::seconds(10));
  for (const char* attempt : {"run9/attempt0", "run9/attempt1"}) {
    ::setenv("DP_STORE_PREFIX", attempt, 1);
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        try {
          InitOptions o;
          o.rank = r;
          o.world_size = 2;
          o.store = shared;
          o.group.timeout = std::chrono::seconds(10);
          auto pg = init_process_group(o);
          Tensor t = full({1}, double(r + 1), kFloat64);
          pg->allreduce(t)->wait();
          EXPECT_EQ(t.item<double>(), 3.0);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << attempt << " rank " << r;
    // The group's keys are under the attempt's prefix, and each attempt is generation 0 of its own
    // key space (without the prefix the second would have been generation 1 of the first's).
    EXPECT_TRUE(shared->check({std::string(attempt) + "/default/0/arrived/0", std::string(attempt) + "/default/0/arrived/1"})) << attempt;
  }
  ::unsetenv("DP_STORE_PREFIX");
}

}  // namespace
}  // namespace dp::distributed
