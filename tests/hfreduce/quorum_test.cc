// The replica quorum of fault-tolerant jobs: the decision rules, and the Quorum RPC of the store
// server over real gRPC on loopback. Each replica group is a thread here.
#include "hfreduce/quorum.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <thread>

#include "common/replicas.h"
#include "hfreduce/store.h"

namespace ff::hfreduce {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

QuorumRequest Ask(const std::string& replica, int64_t step, int min_replicas = 2,
                  int replicas = 3) {
  QuorumRequest r;
  r.job = "job7";
  r.replica_id = replica;
  r.step = step;
  r.min_replicas = min_replicas;
  r.replicas = replicas;
  r.join_timeout = 2s;  // far above how long a decision "at once" may take on a loaded machine
  return r;
}

// Every asker joins at once (threads); returns each one's quorum in the order asked.
std::vector<Result<Quorum>> Round(ReplicaQuorum& quorum, const std::vector<QuorumRequest>& asks,
                                  std::chrono::milliseconds deadline = 10s) {
  std::vector<std::future<Result<Quorum>>> futures;
  for (const QuorumRequest& ask : asks) {
    futures.push_back(std::async(std::launch::async, [&quorum, ask, deadline] {
      return quorum.Join(ask, Clock::now() + deadline);
    }));
  }
  std::vector<Result<Quorum>> out;
  for (auto& f : futures)
    out.push_back(f.get());
  return out;
}

// Until `group` waits in job7's next round (a thread started to ask may not have asked yet on a
// loaded machine: a sleep is no proof).
void UntilWaiting(ReplicaQuorum& quorum, const std::string& group) {
  const auto until = Clock::now() + 10s;
  while (Clock::now() < until) {
    std::vector<std::string> waiting = quorum.Waiting("job7");
    if (std::find(waiting.begin(), waiting.end(), group) != waiting.end()) return;
    std::this_thread::sleep_for(5ms);
  }
  ADD_FAILURE() << "group " << group << " never asked";
}

std::vector<std::string> Ids(const Quorum& q) {
  std::vector<std::string> ids;
  for (const QuorumMember& m : q.members)
    ids.push_back(m.replica_id);
  return ids;
}

TEST(ReplicaQuorumTest, EveryGroupPresentIsDecidedAtOnceAndKeepsItsId) {
  ReplicaQuorum quorum("e1");
  auto start = Clock::now();
  auto first = Round(quorum, {Ask("b", 0), Ask("a", 0), Ask("c", 0)});
  EXPECT_LT(Clock::now() - start, 1500ms) << "waited for the join timeout with everyone there";
  for (std::size_t i = 0; i < first.size(); ++i) {
    ASSERT_TRUE(first[i].ok()) << first[i].status();
    EXPECT_EQ(Ids(*first[i]), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_FALSE(first[i]->healing());
  }
  EXPECT_EQ(first[0]->replica_rank, 1);  // "b"
  EXPECT_EQ(first[1]->replica_rank, 0);  // "a"
  auto second = Round(quorum, {Ask("a", 1), Ask("b", 1), Ask("c", 1)});
  ASSERT_TRUE(second[0].ok());
  EXPECT_EQ(second[0]->id, first[0]->id) << "same members: no need to re-form";
  EXPECT_EQ(second[0]->store_prefix, first[0]->store_prefix);
  EXPECT_EQ(second[0]->max_step, 1);
}

TEST(ReplicaQuorumTest, AMissingGroupIsLeftOutAfterTheJoinTimeoutAndRejoinsBehind) {
  ReplicaQuorum quorum("e1");
  auto all = Round(quorum, {Ask("a", 4), Ask("b", 4), Ask("c", 4)});
  ASSERT_TRUE(all[0].ok());
  // "c" is gone: the others wait the join timeout (2 s), then go on without it.
  auto start = Clock::now();
  auto two = Round(quorum, {Ask("a", 5), Ask("b", 5)});
  EXPECT_GE(Clock::now() - start, 1990ms);
  ASSERT_TRUE(two[0].ok()) << two[0].status();
  EXPECT_EQ(Ids(*two[0]), (std::vector<std::string>{"a", "b"}));
  EXPECT_NE(two[0]->id, all[0]->id);
  EXPECT_NE(two[0]->store_prefix, all[0]->store_prefix);
  // "c" comes back at step 5 while the others are at 6: decided at once (every previous member
  // is there), it is behind, and rank 0 ("a") has the state. (It asks first: had "a" and "b"
  // both asked before it, their round would be decided without it.)
  auto c = std::async(std::launch::async,
                      [&quorum] { return quorum.Join(Ask("c", 5), Clock::now() + 10s); });
  UntilWaiting(quorum, "c");
  start = Clock::now();
  auto ab = Round(quorum, {Ask("a", 6), Ask("b", 6)});
  std::vector<Result<Quorum>> back = {std::move(ab[0]), c.get(), std::move(ab[1])};
  EXPECT_LT(Clock::now() - start, 1500ms);
  for (const auto& q : back) {
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ(Ids(*q), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_TRUE(q->healing());
    EXPECT_EQ(q->max_step, 6);
    EXPECT_EQ(q->recover_from, 0);
    EXPECT_NE(q->id, two[0]->id);
  }
  EXPECT_EQ(back[1]->replica_rank, 2);
  // What people are told (hai show): who formed, left and joined, at which step, from whom.
  std::vector<std::string> told;
  for (const QuorumEvent& e : quorum.Events("job7", 0))
    told.push_back(Describe(e));
  EXPECT_EQ(told, (std::vector<std::string>{
                      "groups a, b, c formed the quorum at step 4",
                      "group c left the quorum at step 5",
                      "group c joined the quorum at step 6, taking group a's state",
                  }));
  std::vector<QuorumEvent> later = quorum.Events("job7", 2);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].seq, 3u);
  EXPECT_TRUE(quorum.Events("another job", 0).empty());
}

TEST(ReplicaQuorumTest, ASilentGroupIsNotWaitedForButAHeartbeatingOneIs) {
  ReplicaQuorum quorum("e1");
  auto with = [](QuorumRequest r) {
    r.join_timeout = 4s;
    r.heartbeat_timeout = 200ms;
    return r;
  };
  auto all = Round(quorum, {with(Ask("a", 0)), with(Ask("b", 0)), with(Ask("c", 0))});
  ASSERT_TRUE(all[0].ok()) << all[0].status();
  // "c" keeps heartbeating but does not ask (a slow step): waited for the join timeout. "a" and
  // "b" heartbeat throughout, as live groups do: one that did not, 200 ms after its last ask,
  // would be left out of a round that the others reached first.
  std::atomic<bool> beating{true}, alive{true};
  std::thread heart([&] {
    while (alive) {
      for (const char* id : {"a", "b", "c"}) {
        if (std::string(id) == "c" && !beating) continue;
        ASSERT_TRUE(quorum.Heartbeat("job7", id).ok());
      }
      std::this_thread::sleep_for(20ms);
    }
  });
  struct Stop {  // however the test ends
    std::atomic<bool>& alive;
    std::thread& heart;
    ~Stop() {
      alive = false;
      heart.join();
    }
  } stop{alive, heart};
  auto start = Clock::now();
  auto slow = Round(quorum, {with(Ask("a", 1)), with(Ask("b", 1))});
  EXPECT_GE(Clock::now() - start, 3990ms);
  ASSERT_TRUE(slow[0].ok()) << slow[0].status();
  EXPECT_EQ(Ids(*slow[0]), (std::vector<std::string>{"a", "b"}));
  beating = false;
  // "c" comes back (it asks first: had "a" and "b", the previous members, both asked before it,
  // their round would be decided without it), then goes silent (killed): after the heartbeat
  // timeout, not the join timeout.
  auto c_back = std::async(std::launch::async, [&quorum, &with] {
    return quorum.Join(with(Ask("c", 1)), Clock::now() + 10s);
  });
  UntilWaiting(quorum, "c");
  auto back = Round(quorum, {with(Ask("a", 2)), with(Ask("b", 2))});
  ASSERT_TRUE(c_back.get().ok());
  ASSERT_TRUE(back[0].ok()) << back[0].status();
  EXPECT_EQ(Ids(*back[0]), (std::vector<std::string>{"a", "b", "c"}));
  start = Clock::now();
  auto without = Round(quorum, {with(Ask("a", 3)), with(Ask("b", 3))});
  EXPECT_LT(Clock::now() - start, 3s);  // the heartbeat timeout (0.2 s), not the join timeout
  ASSERT_TRUE(without[0].ok()) << without[0].status();
  EXPECT_EQ(Ids(*without[0]), (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(quorum.Heartbeat("", "c").ok());
  // With a heartbeat timeout of 2 s: "d" dies; the others' collectives fail and they ask to
  // re-form: "d" is not waited for once it missed three heartbeats (0.6 s), not the full 2 s.
  auto slow_beat = [](QuorumRequest r) {
    r.join_timeout = 8s;
    r.heartbeat_timeout = 2s;
    return r;
  };
  // ("d" asks first: had "a" and "b", the previous members, both asked before it, their round
  // would be decided without it.)
  const auto d_asked = Clock::now();  // (the last "d" is heard of)
  auto d = std::async(std::launch::async, [&quorum, &slow_beat] {
    return quorum.Join(slow_beat(Ask("d", 4)), Clock::now() + 10s);
  });
  UntilWaiting(quorum, "d");
  auto with_d = Round(quorum, {slow_beat(Ask("a", 4)), slow_beat(Ask("b", 4))});
  ASSERT_TRUE(d.get().ok());
  ASSERT_TRUE(with_d[0].ok()) << with_d[0].status();
  ASSERT_EQ(Ids(*with_d[0]), (std::vector<std::string>{"a", "b", "d"}));
  QuorumRequest a = slow_beat(Ask("a", 5)), b = slow_beat(Ask("b", 5));
  a.reform = b.reform = true;
  start = Clock::now();
  auto reformed = Round(quorum, {a, b});
  ASSERT_TRUE(reformed[0].ok()) << reformed[0].status();
  EXPECT_EQ(Ids(*reformed[0]), (std::vector<std::string>{"a", "b"}));
  EXPECT_GE(Clock::now() - d_asked, 590ms);
  EXPECT_LT(Clock::now() - start, 1900ms);
}

TEST(ReplicaQuorumTest, AGroupWhoseCollectivesFailedGetsANewQuorumId) {
  ReplicaQuorum quorum("e1");
  auto first = Round(quorum, {Ask("a", 0), Ask("b", 0), Ask("c", 0)});
  QuorumRequest broken = Ask("b", 0);
  broken.reform = true;
  auto second = Round(quorum, {Ask("a", 0), broken, Ask("c", 0)});
  ASSERT_TRUE(first[0].ok() && second[0].ok());
  EXPECT_NE(second[0]->id, first[0]->id);
  EXPECT_EQ(Ids(*second[0]), Ids(*first[0]));
}

TEST(ReplicaQuorumTest, FewerThanMinReplicasTimesOutAndIsNotCountedLater) {
  ReplicaQuorum quorum("e1");
  auto alone = Round(quorum, {Ask("a", 0, /*min_replicas=*/2)}, 500ms);
  ASSERT_FALSE(alone[0].ok());
  EXPECT_EQ(alone[0].status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(alone[0].status().message(), HasSubstr("1 of at least 2"));
  // "a" left: "b" and "c" form a quorum without it.
  auto later = Round(quorum, {Ask("b", 0), Ask("c", 0)});
  ASSERT_TRUE(later[0].ok()) << later[0].status();
  EXPECT_EQ(Ids(*later[0]), (std::vector<std::string>{"b", "c"}));
}

TEST(ReplicaQuorumTest, BadRequestsAreRefused) {
  ReplicaQuorum quorum("e1");
  QuorumRequest no_job = Ask("a", 0);
  no_job.job = "";
  QuorumRequest slash = Ask("a/b", 0);
  QuorumRequest min_above = Ask("a", 0, 4, 3);
  QuorumRequest negative = Ask("a", -1);
  for (const QuorumRequest& bad : {no_job, slash, min_above, negative}) {
    auto q = quorum.Join(bad, Clock::now() + 1s);
    ASSERT_FALSE(q.ok());
    EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument) << q.status();
  }
}

TEST(ReplicaQuorumTest, ServedByTheStoreServerOverGrpc) {
  auto server = StoreServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::future<Result<Quorum>>> groups;
  for (const char* id : {"0", "1"}) {
    groups.push_back(std::async(std::launch::async, [&, id] {
      StoreClient client((*server)->address(), 5s);
      return client.JoinQuorum(Ask(id, 3, 2, 2), 5s);
    }));
  }
  for (int i = 0; i < 2; ++i) {
    auto q = groups[i].get();
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ(q->replica_rank, i);
    EXPECT_EQ(q->replica_world(), 2);
    EXPECT_EQ(q->max_step, 3);
    EXPECT_THAT(q->store_prefix, HasSubstr("job7"));
    EXPECT_THAT(q->stores, IsEmpty()) << "not told any";
  }
  StoreClient client((*server)->address(), 5s);
  // Told every server of the service, it names them in each quorum (a client adds those it was
  // not given).
  (*server)->SetStores((*server)->address() + ", 10.0.0.2:7000");
  auto told = client.JoinQuorum(Ask("0", 4, 1, 1), 5s);
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_THAT(told->stores, ElementsAre((*server)->address(), "10.0.0.2:7000"));
  QuorumRequest bad = Ask("0", 0, 3, 2);
  auto refused = client.JoinQuorum(bad, 1s);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status();
}

// hai-server's replicas each run a store server; only the leader's serves. A client given every
// address follows the one that serves, through a change of leader and the old one's death.
TEST(ReplicaQuorumTest, AClientOfSeveralServersFollowsTheOneServing) {
  std::atomic<int> serving{0};
  auto serve_if = [&serving](int me) {
    return [&serving, me] {
      return serving.load() == me ? Status::Ok() : NotLeader("quorums", std::to_string(me), "");
    };
  };
  auto a = StoreServer::Start("127.0.0.1:0", serve_if(0));
  auto b = StoreServer::Start("127.0.0.1:0", serve_if(1));
  ASSERT_TRUE(a.ok() && b.ok());
  StoreClient client((*a)->address() + "," + (*b)->address(), 5s);
  ASSERT_TRUE(client.Set("k", "on a").ok());
  serving = 1;
  ASSERT_TRUE(client.Set("k", "on b").ok());
  auto q = client.JoinQuorum(Ask("0", 3, 1, 1), 5s);
  ASSERT_TRUE(q.ok()) << q.status();
  StoreClient direct_b((*b)->address(), 2s);
  EXPECT_EQ(direct_b.Get("k", 1s).value_or(""), "on b");
  StoreClient direct_a((*a)->address(), 2s);
  auto refused = direct_a.Get("k", 1s);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status();
  // The serving one dies; the other serves again, in a new epoch: nothing of before is reused.
  b->reset();
  serving = 0;
  (*a)->quorum().NewEpoch("later");
  auto again = client.JoinQuorum(Ask("0", 4, 1, 1), 5s);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->store_prefix, q->store_prefix);
  EXPECT_THAT(again->store_prefix, HasSubstr(".later."));
}

TEST(ReplicaQuorumTest, ANewEpochFailsTheWaitersAndForgetsTheMembers) {
  ReplicaQuorum quorum("e1");
  ASSERT_TRUE(Round(quorum, {Ask("a", 1), Ask("b", 1)})[0].ok());
  auto waiting = std::async(std::launch::async,
                            [&quorum] { return quorum.Join(Ask("a", 2), Clock::now() + 10s); });
  UntilWaiting(quorum, "a");
  quorum.NewEpoch("e2");
  auto q = waiting.get();
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kAborted) << q.status();
  // "b" is no longer a previous member to wait for: "a" and "c" form at once (all present).
  auto fresh = Round(quorum, {Ask("a", 2), Ask("c", 2, 2, 2)});
  ASSERT_TRUE(fresh[0].ok()) << fresh[0].status();
  EXPECT_EQ(Ids(*fresh[0]), (std::vector<std::string>{"a", "c"}));
  EXPECT_THAT(fresh[0]->store_prefix, HasSubstr(".e2."));
}

}  // namespace
}  // namespace ff::hfreduce
