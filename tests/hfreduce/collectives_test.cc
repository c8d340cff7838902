// HFReduce collectives with every rank a separate process: real shared memory, real sockets.
// Several "nodes" share this machine through HFREDUCE_NODE_ID.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/net.h"
#include "tests/support/subprocess.h"

namespace ff {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

struct RankResult {
  int exit_code;
  std::string stderr_text;
};

// Runs `scenario` on nodes x local ranks processes; returns each rank's exit code and stderr.
std::vector<RankResult> Launch(int nodes, int local, const std::string& scenario,
                               std::map<std::string, std::string> extra_env = {},
                               std::chrono::seconds timeout = 240s) {
  const int world = nodes * local;
  const std::string port = std::to_string(FindFreePort().value_or(29500));
  std::vector<test::Subprocess> ranks;
  for (int r = 0; r < world; ++r) {
    test::Subprocess::Options options;
    options.env = extra_env;
    options.env["RANK"] = std::to_string(r);
    options.env["WORLD_SIZE"] = std::to_string(world);
    options.env["MASTER_ADDR"] = "127.0.0.1";
    options.env["MASTER_PORT"] = port;
    options.env["HFREDUCE_NODE_ID"] = "node" + std::to_string(r / local);
    auto proc = test::Subprocess::Start({FF_HFREDUCE_RANK_PATH, scenario}, options);
    EXPECT_TRUE(proc.ok()) << proc.status();
    ranks.push_back(std::move(*proc));
  }
  std::vector<RankResult> results;
  auto until = std::chrono::steady_clock::now() + timeout;
  for (auto& p : ranks) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    auto code = p.Wait(std::max(left, std::chrono::milliseconds(1)));
    results.push_back({code.value_or(-1), p.Stderr()});
  }
  return results;
}

void ExpectAllPassed(const std::vector<RankResult>& results) {
  for (std::size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].exit_code, 0)
        << "rank " << r << " exit code (-1: still running at the timeout):\n"
        << results[r].stderr_text;
  }
}

struct Layout {
  int nodes;
  int local;
};

class LayoutTest : public ::testing::TestWithParam<Layout> {};

TEST_P(LayoutTest, AllreduceEveryTypeOpAndCountMatchesReference) {
  ExpectAllPassed(Launch(GetParam().nodes, GetParam().local, "allreduce"));
}

TEST_P(LayoutTest, BroadcastFromEveryRootAndBarrier) {
  ExpectAllPassed(Launch(GetParam().nodes, GetParam().local, "broadcast"));
}

TEST_P(LayoutTest, ReduceScatterAndAllgatherMatchReference) {
  ExpectAllPassed(Launch(GetParam().nodes, GetParam().local, "scatter-gather"));
}

// Whether this machine lets one process read another's memory (process_vm_readv; containers
// may forbid it): where not, same-node point-to-point copies through the shared memory instead.
bool CrossMemoryAttachWorks() {
  static const bool works = [] {
    static volatile uint64_t word = 0x5eed5eedull;
    const pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
      uint64_t got = 0;
      iovec local{&got, sizeof got};
      iovec remote{const_cast<uint64_t*>(&word), sizeof got};
      _exit(process_vm_readv(parent, &local, 1, &remote, 1, 0) == sizeof got && got == word ? 0
                                                                                            : 1);
    }
    int status = 0;
    return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
  }();
  return works;
}

TEST_P(LayoutTest, PointToPointRingAndAllPairs) {
  ExpectAllPassed(
      Launch(GetParam().nodes, GetParam().local, "p2p", {{"HFREDUCE_TEST_P2P_PATH", "shm"}}));
}

TEST_P(LayoutTest, ManyAsyncOperationsInFlight) {
  ExpectAllPassed(Launch(GetParam().nodes, GetParam().local, "async"));
}

std::string LayoutName(const ::testing::TestParamInfo<Layout>& info) {
  return std::to_string(info.param.nodes) + "x" + std::to_string(info.param.local);
}

// World sizes 1..8 in the layouts the issue names: 1xN, Nx1, 2x4, 3x2.
INSTANTIATE_TEST_SUITE_P(Layouts, LayoutTest,
                         ::testing::Values(Layout{1, 1}, Layout{1, 2}, Layout{1, 4}, Layout{2, 1},
                                           Layout{3, 1}, Layout{5, 1}, Layout{8, 1}, Layout{2, 4},
                                           Layout{3, 2}, Layout{1, 8}, Layout{7, 1}, Layout{6, 1}),
                         LayoutName);

// The same exchanges with the other ways a pair of one node can talk: sends of 1 MiB and more
// read direct from the sender's memory (off by default), and loopback TCP.

TEST(HfreducePointToPointTest, LargeSendsReadDirect) {
  ExpectAllPassed(
      Launch(2, 3, "p2p",
             {{"HFREDUCE_P2P_DIRECT_BYTES", "1048576"},
              {"HFREDUCE_TEST_P2P_PATH", CrossMemoryAttachWorks() ? "shm-direct" : "shm"}}));
}

TEST(HfreducePointToPointTest, OverLoopbackTcp) {
  ExpectAllPassed(
      Launch(1, 3, "p2p", {{"HFREDUCE_P2P_SHM", "0"}, {"HFREDUCE_TEST_P2P_PATH", "tcp"}}));
}

// Trees built leaf by leaf: nodes whose leaves alternate in rank order (as a replacement node or
// a placement by name leaves them), read from a cluster.toml (HFREDUCE_TOPOLOGY, nodes named by
// their node id here), give every collective the same results as rank order, crossing the
// leaves once per tree.
TEST(HfreduceTopologyTest, TreesFollowTheLeavesOfClusterToml) {
  const std::string dir = ::testing::TempDir() + "/hfreduce-topology-" + std::to_string(getpid());
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  const std::string toml = dir + "/cluster.toml";
  FILE* f = std::fopen(toml.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(
      "name = \"t\"\nnode_link_gbps = 100\ncross_zone_gbps = 100\n"
      "[[zones]]\nname = \"A\"\n"
      "  [[zones.leaves]]\n  name = \"even\"\n  node_names = [\"node0\", \"node2\", \"node4\"]\n"
      "  uplink_gbps = 100\n"
      "  [[zones.leaves]]\n  name = \"odd\"\n  node_names = [\"node1\", \"node3\"]\n"
      "  uplink_gbps = 100\n",
      f);
  ASSERT_EQ(std::fclose(f), 0);
  for (const char* scenario : {"allreduce", "scatter-gather", "broadcast"}) {
    SCOPED_TRACE(scenario);
    ExpectAllPassed(Launch(5, 1, scenario,
                           {{"HFREDUCE_TOPOLOGY", toml},
                            {"HFREDUCE_TEST_TREE_LAYOUT",
                             "leaf order: 2 leaves, 1+1 edges cross leaves (rank order: 2+3)"}}));
  }
  // 2 nodes x 2 ranks, leaves from HFREDUCE_LEAF; rank order on request.
  ExpectAllPassed(
      Launch(2, 2, "allreduce",
             {{"HFREDUCE_LEAF", "A/l0"},
              {"HFREDUCE_TEST_TREE_LAYOUT", "rank order: 1 leaf, 0+0 edges cross leaves"}}));
  ExpectAllPassed(
      Launch(5, 1, "allreduce",
             {{"HFREDUCE_TOPOLOGY", toml},
              {"HFREDUCE_TREES", "rank"},
              {"HFREDUCE_TEST_TREE_LAYOUT", "rank order: 2 leaves, 2+3 edges cross leaves"}}));
  ExpectAllPassed(
      Launch(3, 1, "allreduce", {{"HFREDUCE_TEST_TREE_LAYOUT", "rank order (leaves unknown)"}}));
  // A node missing from the file, and a bad tree order, are clear errors on every rank.
  for (const auto& [env, message] :
       std::vector<std::pair<std::map<std::string, std::string>, std::string>>{
           {{{"HFREDUCE_TOPOLOGY", toml}, {"HFREDUCE_NODE_LABEL", "elsewhere"}},
            "node 'elsewhere' is not in " + toml},
           {{{"HFREDUCE_TREES", "random"}}, "must be 'leaf' or 'rank', not 'random'"},
           {{{"HFREDUCE_TOPOLOGY", dir + "/missing.toml"}}, "HFREDUCE_TOPOLOGY"}}) {
    for (const RankResult& r : Launch(2, 1, "allreduce", env, 60s)) {
      EXPECT_EQ(r.exit_code, 2);
      EXPECT_THAT(r.stderr_text, HasSubstr(message));
    }
  }
  ASSERT_EQ(system(("rm -rf " + dir).c_str()), 0);
}

TEST(HfreduceLargeTest, SixtyFourMiBTwoNodesByFour) {
  // Small chunks so the 64 MiB runs through many pipeline slots and both trees.
  ExpectAllPassed(Launch(2, 4, "large", {{"HFREDUCE_CHUNK_BYTES", "262144"}}));
}

TEST(HfreduceMetricsTest, EveryRankExportsCollectiveCounters) {
  ExpectAllPassed(Launch(2, 2, "metrics"));
}

TEST(HfreduceTransportTest, AutoFallsBackToTcpWithoutAnRdmaDevice) {
  ExpectAllPassed(Launch(2, 2, "transport", {{"HFREDUCE_TRANSPORT", "auto"}}));
}

TEST(HfreduceTransportTest, VerbsWithoutAnRdmaDeviceIsAClearError) {
  // This machine (and CI's) has no RDMA device: asking for verbs must fail at once, on every rank.
  auto results = Launch(2, 1, "transport", {{"HFREDUCE_TRANSPORT", "verbs"}}, 60s);
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
    EXPECT_THAT(r.stderr_text, HasSubstr("transport 'verbs' asked for, but"));
  }
}

TEST(HfreduceSetupTest, BadEnvironmentIsAClearError) {
  auto results = Launch(1, 2, "transport", {{"HFREDUCE_PIPELINE_DEPTH", "1"}}, 60s);
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.stderr_text, HasSubstr("HFREDUCE_PIPELINE_DEPTH='1' is not an integer in 2..64"));
  }
  // Both ranks claim LOCAL_RANK 0: rank 1 is told why; rank 0, left waiting, gives up at the
  // rendezvous timeout.
  results = Launch(1, 2, "transport", {{"LOCAL_RANK", "0"}, {"HFREDUCE_TIMEOUT_MS", "3000"}}, 60s);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[1].exit_code, 2);
  EXPECT_THAT(results[1].stderr_text, HasSubstr("LOCAL_RANK is 0 but rank 1 is local rank 1"));
  EXPECT_EQ(results[0].exit_code, 2);
  EXPECT_THAT(results[0].stderr_text, HasSubstr("DeadlineExceeded"));
}

TEST(HfreduceFailureTest, MismatchedCountsFailOnEveryRank) {
  for (Layout layout : {Layout{1, 3}, Layout{3, 1}, Layout{2, 2}}) {
    auto results =
        Launch(layout.nodes, layout.local, "mismatch", {{"HFREDUCE_TIMEOUT_MS", "20000"}});
    for (std::size_t r = 0; r < results.size(); ++r) {
      EXPECT_EQ(results[r].exit_code, 0)
          << layout.nodes << "x" << layout.local << " rank " << r << ":\n"
          << results[r].stderr_text;
    }
    // Where the disagreement is seen (same node, or across nodes), it is named.
    bool named = false;
    for (const auto& r : results) {
      named = named || r.stderr_text.find("disagree on operation 1") != std::string::npos;
    }
    EXPECT_TRUE(named) << layout.nodes << "x" << layout.local << ": " << results[0].stderr_text;
  }
}

TEST(HfreduceFailureTest, KilledRankMakesTheOthersFailWithinTheTimeout) {
  for (Layout layout : {Layout{1, 3}, Layout{3, 1}, Layout{2, 2}}) {
    auto start = std::chrono::steady_clock::now();
    auto results =
        Launch(layout.nodes, layout.local, "kill", {{"HFREDUCE_TIMEOUT_MS", "15000"}}, 60s);
    auto elapsed = std::chrono::steady_clock::now() - start;
    ASSERT_EQ(results.back().exit_code, 42);
    for (std::size_t r = 0; r + 1 < results.size(); ++r) {
      EXPECT_EQ(results[r].exit_code, 0)
          << layout.nodes << "x" << layout.local << " rank " << r << ":\n"
          << results[r].stderr_text;
      EXPECT_THAT(results[r].stderr_text, HasSubstr("error after"));
    }
    EXPECT_LT(elapsed, 45s) << "the survivors took too long to notice";
  }
}

TEST(HfreduceFailureTest, ReceiveFromAnySourceTimesOutAloneAndTheRestGoesOn) {
  for (Layout layout : {Layout{1, 3}, Layout{3, 1}}) {
    auto results =
        Launch(layout.nodes, layout.local, "any-source-timeout", {{"HFREDUCE_TIMEOUT_MS", "2000"}});
    for (std::size_t r = 0; r < results.size(); ++r) {
      EXPECT_EQ(results[r].exit_code, 0)
          << layout.nodes << "x" << layout.local << " rank " << r << ":\n"
          << results[r].stderr_text;
    }
  }
}

// The same on one node, where small allreduces take the latency path (no leader's reducer): the
// leader sees its local rank die and aborts the node, well before the timeout.
TEST(HfreduceFailureTest, KilledRankFailsTheLatencyPathOnItsNode) {
  auto start = std::chrono::steady_clock::now();
  auto results = Launch(1, 3, "kill-small", {{"HFREDUCE_TIMEOUT_MS", "60000"}}, 60s);
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(results.back().exit_code, 42);
  for (std::size_t r = 0; r + 1 < results.size(); ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << ":\n" << results[r].stderr_text;
    EXPECT_THAT(results[r].stderr_text, HasSubstr("exited during a collective"));
  }
  EXPECT_LT(elapsed, 30s) << "the survivors waited for the timeout";
}

// Point-to-point with a rank of the same node that died: a receive fails within seconds, and
// so does a send through shared memory (copies or direct reads), naming the process, as over
// TCP; the timeout (60 s) is never what ends them.
TEST(HfreduceFailureTest, KilledRankFailsPointToPointWithItAtOnce) {
  for (const char* direct : {"4194304", "0"}) {
    for (const char* shm : {"1", "0"}) {
      SCOPED_TRACE(std::string("HFREDUCE_P2P_SHM=") + shm + " HFREDUCE_P2P_DIRECT_BYTES=" + direct);
      auto start = std::chrono::steady_clock::now();
      auto results = Launch(1, 2, "kill-p2p",
                            {{"HFREDUCE_TIMEOUT_MS", "60000"},
                             {"HFREDUCE_P2P_SHM", shm},
                             {"HFREDUCE_P2P_DIRECT_BYTES", direct}},
                            60s);
      EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
      ASSERT_EQ(results[1].exit_code, 42) << results[1].stderr_text;
      EXPECT_EQ(results[0].exit_code, 0) << results[0].stderr_text;
      EXPECT_THAT(results[0].stderr_text, HasSubstr("recv error after"));
      if (std::string(shm) == "1") {
        // Through shared memory the send cannot complete: it fails, naming the dead process.
        EXPECT_THAT(
            results[0].stderr_text,
            ::testing::ContainsRegex("send ended after [0-9.]+ s: Aborted: hfreduce: rank 1 "
                                     "\\(shared memory\\) \\(pid [0-9]+\\) exited"));
      }
    }
  }
}

TEST(HfreduceMembershipTest, AbortFailsEveryPendingCollectiveAtOnceOnEveryNode) {
  // 2 nodes x 2 ranks; rank 3 hangs, rank 0 aborts after 0.3 s. The timeout is 60 s: the others
  // must fail within a few seconds, naming the abort's reason, the other node included.
  auto start = std::chrono::steady_clock::now();
  auto results = Launch(2, 2, "abort", {{"HFREDUCE_TIMEOUT_MS", "60000"}}, 50s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  for (std::size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << "rank " << r << ":\n" << results[r].stderr_text;
    EXPECT_THAT(results[r].stderr_text, HasSubstr("rank 3 was declared lost")) << "rank " << r;
  }
  for (std::size_t r = 0; r + 1 < results.size(); ++r) {
    double seconds = 99;
    auto at = results[r].stderr_text.find("error after ");
    if (at != std::string::npos) seconds = std::stod(results[r].stderr_text.substr(at + 12));
    EXPECT_LT(seconds, 3.0) << "rank " << r << ":\n" << results[r].stderr_text;
  }
}

TEST(HfreduceMembershipTest, SurvivorsShrinkThenGrowWithANewlyStartedRank) {
  // 2 nodes x 2 ranks; rank 1 dies; ranks 0, 2, 3 shrink to 3 ranks and reduce; a new process
  // started as rank 1 joins them in a 4-rank communicator and gets rank 0's state.
  const std::string port = std::to_string(FindFreePort().value_or(29500));
  auto env_of = [&](int rank) {
    test::Subprocess::Options options;
    options.env["RANK"] = std::to_string(rank);
    options.env["WORLD_SIZE"] = "4";
    options.env["MASTER_ADDR"] = "127.0.0.1";
    options.env["MASTER_PORT"] = port;
    options.env["HFREDUCE_NODE_ID"] = "node" + std::to_string(rank / 2);
    options.env["HFREDUCE_TIMEOUT_MS"] = "60000";
    return options;
  };
  std::vector<test::Subprocess> ranks;
  for (int r = 0; r < 4; ++r) {
    auto proc = test::Subprocess::Start({FF_HFREDUCE_RANK_PATH, "shrink-grow"}, env_of(r));
    ASSERT_TRUE(proc.ok()) << proc.status();
    ranks.push_back(std::move(*proc));
  }
  auto died = ranks[1].Wait(60s);
  ASSERT_EQ(died.value_or(-1), 42) << ranks[1].Stderr();
  auto joiner = test::Subprocess::Start({FF_HFREDUCE_RANK_PATH, "join"}, env_of(1));
  ASSERT_TRUE(joiner.ok()) << joiner.status();
  for (int r : {0, 2, 3}) {
    EXPECT_EQ(ranks[r].Wait(90s).value_or(-1), 0) << "rank " << r << ":\n" << ranks[r].Stderr();
  }
  EXPECT_EQ(joiner->Wait(30s).value_or(-1), 0) << "joiner:\n" << joiner->Stderr();
}

TEST(HfreduceMembershipTest, ShrinkRefusesABadSetWithAClearError) {
  auto results = Launch(1, 2, "shrink-bad", {{"HFREDUCE_TIMEOUT_MS", "20000"}});
  ExpectAllPassed(results);
}

}  // namespace
}  // namespace ff
