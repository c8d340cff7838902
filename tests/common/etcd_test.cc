// The etcd client and the leader election against real etcd members (Debian's etcd-server).
#include "common/etcd.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/leader_election.h"
#include "tests/support/etcd_cluster.h"

namespace ff {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using etcdserverpb::Compare;

std::unique_ptr<etcd::Client> Connect(const std::vector<std::string>& endpoints,
                                      std::chrono::milliseconds timeout = 3000ms) {
  auto c = etcd::Client::Make({.endpoints = endpoints, .call_timeout = timeout});
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

TEST(EtcdEndpoints, ParsesListsAndRefusesNonsense) {
  auto e = etcd::ParseEndpoints("http://127.0.0.1:2379, 10.0.0.2:2379/,[::1]:2379");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(*e, (std::vector<std::string>{"127.0.0.1:2379", "10.0.0.2:2379", "[::1]:2379"}));
  EXPECT_EQ(etcd::ParseEndpoints("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(etcd::ParseEndpoints("host-without-port").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(etcd::PrefixEnd("a/"), "a0");
  EXPECT_EQ(etcd::PrefixEnd(std::string("a\xff", 2)), "b");
}

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(etcd_.Start()); }
  test::TempDir dir_;
  test::EtcdCluster etcd_{dir_, 3};
};

TEST_F(EtcdTest, KeysRangesAndTransactions) {
  auto c = Connect(etcd_.endpoints());
  ASSERT_TRUE(c->Put("/t/a", "1").ok());
  ASSERT_TRUE(c->Put("/t/b", "2").ok());
  ASSERT_TRUE(c->Put("/u", "3").ok());
  auto a = c->Get("/t/a");
  ASSERT_TRUE(a.ok() && *a) << a.status();
  EXPECT_EQ((*a)->value, "1");
  EXPECT_EQ((*a)->version, 1);
  auto none = c->Get("/t/none");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);

  auto r = c->RangePrefix("/t/");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->kvs.size(), 2u);
  EXPECT_EQ(r->kvs[1].key, "/t/b");
  auto limited = c->RangePrefix("/t/", 1);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->kvs.size(), 1u);
  EXPECT_TRUE(limited->more);

  // A compare on the mod revision a read saw: succeeds once, fails after another write.
  etcdserverpb::TxnRequest txn;
  *txn.add_compare() = etcd::CompareMod("/t/a", Compare::EQUAL, (*a)->mod_revision);
  etcd::AddPut(&txn, "/t/a", "one");
  etcd::AddDelete(&txn, "/t/b");
  auto t1 = c->Txn(txn);
  ASSERT_TRUE(t1.ok()) << t1.status();
  EXPECT_TRUE(t1->succeeded());
  auto t2 = c->Txn(txn);
  ASSERT_TRUE(t2.ok());
  EXPECT_FALSE(t2->succeeded());
  EXPECT_EQ((*c->Get("/t/a"))->value, "one");
  EXPECT_FALSE(*c->Get("/t/b"));

  // A missing key compares as revision 0: "still absent" is a compare on its version.
  etcdserverpb::TxnRequest create;
  *create.add_compare() = etcd::CompareVersion("/t/new", Compare::EQUAL, 0);
  etcd::AddPut(&create, "/t/new", "x");
  EXPECT_TRUE(c->Txn(create)->succeeded());
  EXPECT_FALSE(c->Txn(create)->succeeded());

  // etcd refuses a txn that writes one key twice: a clear error, nothing applied.
  etcdserverpb::TxnRequest twice;
  etcd::AddPut(&twice, "/t/dup", "1");
  etcd::AddPut(&twice, "/t/dup", "2");
  auto dup = c->Txn(twice);
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument) << dup.status();
  EXPECT_FALSE(*c->Get("/t/dup"));

  EXPECT_EQ(*c->Delete("/t/", etcd::PrefixEnd("/t/")), 2);
  EXPECT_TRUE(c->RangePrefix("/t/")->kvs.empty());
}

TEST_F(EtcdTest, LeasesExpireTheirKeysAndRenewalsKeepThem) {
  auto c = Connect(etcd_.endpoints());
  auto kept = c->GrantLease(2);
  auto dropped = c->GrantLease(2);
  ASSERT_TRUE(kept.ok() && dropped.ok()) << kept.status() << dropped.status();
  ASSERT_TRUE(c->Put("/l/kept", "k", *kept).ok());
  ASSERT_TRUE(c->Put("/l/dropped", "d", *dropped).ok());
  const auto until = Clock::now() + 4s;
  while (Clock::now() < until) {
    auto ttl = c->KeepAlive(*kept);
    ASSERT_TRUE(ttl.ok()) << ttl.status();
    EXPECT_GT(*ttl, 0);
    std::this_thread::sleep_for(500ms);
  }
  EXPECT_TRUE(*c->Get("/l/kept"));
  EXPECT_FALSE(*c->Get("/l/dropped"));
  EXPECT_EQ(c->KeepAlive(*dropped).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(c->RevokeLease(*kept).ok());
  EXPECT_FALSE(*c->Get("/l/kept"));
}

TEST_F(EtcdTest, WaitForChangesSeesAWriteAndTimesOutWithoutOne) {
  auto c = Connect(etcd_.endpoints());
  int64_t rev = 0;
  ASSERT_TRUE(c->Get("/w/k", 0, &rev).ok());
  auto start = Clock::now();
  auto quiet = c->WaitForChanges("/w/k", "", rev + 1, 300ms);
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  EXPECT_TRUE(quiet->empty());
  EXPECT_GE(Clock::now() - start, 250ms);

  std::thread writer([&] {
    std::this_thread::sleep_for(200ms);
    auto w = Connect(etcd_.endpoints());
    EXPECT_TRUE(w->Put("/w/k", "v").ok());
  });
  auto events = c->WaitForChanges("/w/k", "", rev + 1, 5s);
  writer.join();
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].kv().value(), "v");
}

TEST_F(EtcdTest, CallsGoOnWhenAMemberDiesAndStopCleanlyWithoutAQuorum) {
  auto c = Connect(etcd_.endpoints(), 8000ms);
  ASSERT_TRUE(c->Put("/f/k", "0").ok());  // member 0 is now the one in use
  etcd_.Kill(0);
  for (int i = 1; i <= 5; ++i) {
    auto put = c->Put("/f/k", std::to_string(i));
    ASSERT_TRUE(put.ok()) << "write " << i << " after member 0 died: " << put.status();
  }
  EXPECT_EQ((*c->Get("/f/k"))->value, "5");

  // No majority: calls fail within their deadline with kUnavailable or kDeadlineExceeded, and
  // nothing acknowledged is lost when the majority is back.
  etcd_.Kill(1);
  auto short_client = Connect(etcd_.endpoints(), 2000ms);
  const auto start = Clock::now();
  auto get = short_client->Get("/f/k");
  EXPECT_FALSE(get.ok());
  EXPECT_TRUE(get.status().code() == StatusCode::kUnavailable ||
              get.status().code() == StatusCode::kDeadlineExceeded)
      << get.status();
  EXPECT_LT(Clock::now() - start, 5s);
  ASSERT_TRUE(etcd_.StartMember(0));
  ASSERT_TRUE(etcd_.StartMember(1));
  ASSERT_TRUE(etcd_.WaitHealthy());
  auto after = c->Get("/f/k");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ((*after)->value, "5");
}

// Two replicas; samples every few milliseconds that never both think they lead.
class LeaderWatch {
 public:
  LeaderWatch(LeaderElection* a, LeaderElection* b) : a_(a), b_(b) {
    thread_ = std::thread([this] {
      while (!stop_) {
        if (a_->IsLeader() && b_->IsLeader()) both_ = true;
        std::this_thread::sleep_for(2ms);
      }
    });
  }
  ~LeaderWatch() {
    stop_ = true;
    thread_.join();
  }
  bool both() const { return both_; }

 private:
  LeaderElection *a_, *b_;
  std::atomic<bool> stop_{false}, both_{false};
  std::thread thread_;
};

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return cond();
}

TEST_F(EtcdTest, OneLeaderAtATimeAndAResignationHandsOverAtOnce) {
  auto ca = Connect(etcd_.endpoints());
  auto cb = Connect(etcd_.endpoints());
  ElectionOptions oa{.key = "/e/leader", .value = "a:1", .ttl_s = 5};
  ElectionOptions ob = oa;
  ob.value = "b:1";
  std::atomic<int> a_changes{0};
  LeaderElection a(ca.get(), oa, [&](bool) { ++a_changes; });
  LeaderElection b(cb.get(), ob);
  LeaderWatch watch(&a, &b);
  a.Start();
  ASSERT_TRUE(WaitFor([&] { return a.IsLeader(); }, 5s));
  b.Start();
  ASSERT_TRUE(WaitFor([&] { return b.Leader() == "a:1"; }, 5s)) << b.Leader();
  std::this_thread::sleep_for(6s);  // longer than the TTL: the leader renews
  EXPECT_TRUE(a.IsLeader());
  EXPECT_FALSE(b.IsLeader());
  EXPECT_EQ(a.Terms(), 1u);

  // A fenced write by the leader goes through.
  etcdserverpb::TxnRequest w;
  *w.add_compare() = a.Fence();
  etcd::AddPut(&w, "/e/state", "by a");
  EXPECT_TRUE(ca->Txn(w)->succeeded());
  // The follower's fence fails.
  etcdserverpb::TxnRequest wb;
  *wb.add_compare() = b.Fence();
  etcd::AddPut(&wb, "/e/state", "by b");
  EXPECT_FALSE(cb->Txn(wb)->succeeded());

  const auto resigned = Clock::now();
  a.Resign();
  EXPECT_FALSE(a.IsLeader());
  EXPECT_EQ(a_changes, 2);  // became leader, stopped
  ASSERT_TRUE(WaitFor([&] { return b.IsLeader(); }, 3s));
  EXPECT_LT(Clock::now() - resigned, 2500ms) << "a resignation should not wait for the TTL (5 s)";
  EXPECT_EQ(b.Leader(), "b:1");
  // The old leader's fence (taken while it led) fails now.
  EXPECT_FALSE(ca->Txn(w)->succeeded());
  EXPECT_EQ((*ca->Get("/e/state"))->value, "by a");
  EXPECT_FALSE(watch.both());
}

// A member that does not lead Raft (by its index in `etcd`): the one a test stops. Stopping the
// Raft leader itself would meet an etcd 3.4 bug (etcd-io/etcd#15247, fixed in 3.4.28): resumed,
// the old leader revokes every lease it thinks expired before it learns it no longer leads, and
// its revocations are forwarded to the new leader and applied, live leases included.
std::size_t AFollower(const test::EtcdCluster& etcd) {
  auto probe = etcd::Client::Make({.endpoints = etcd.endpoints()});
  EXPECT_TRUE(probe.ok()) << probe.status();
  if (!probe.ok()) return 0;
  uint64_t leader = 0;
  std::vector<etcd::MemberStatus> members = (*probe)->Members();
  for (const etcd::MemberStatus& m : members) {
    if (m.leader != 0) leader = m.leader;
  }
  for (const etcd::MemberStatus& m : members) {
    if (m.member_id == 0 || m.member_id == leader) continue;
    for (std::size_t i = 0; i < etcd.endpoints().size(); ++i) {
      if (etcd.endpoint(i) == m.endpoint) return i;
    }
  }
  ADD_FAILURE() << "no member that follows";
  return 0;
}

// The leader talks to one member only, and that member is cut off (stopped): the leader stops
// leading before its lease can expire, the other replica takes over within about the TTL, and the
// old leader's writes are refused when its member comes back.
TEST_F(EtcdTest, ALeaderCutOffFromEtcdStepsDownBeforeItsSuccessorIsElected) {
  const std::size_t cut_member = AFollower(etcd_);
  auto ca = Connect({etcd_.endpoint(cut_member)}, 1000ms);
  std::vector<std::string> rest;
  for (std::size_t i = 0; i < 3; ++i) {
    if (i != cut_member) rest.push_back(etcd_.endpoint(i));
  }
  auto cb = Connect(rest);
  ElectionOptions oa{.key = "/p/leader", .value = "a:1", .ttl_s = 2};
  ElectionOptions ob = oa;
  ob.value = "b:1";
  LeaderElection a(ca.get(), oa);
  a.Start();
  ASSERT_TRUE(WaitFor([&] { return a.IsLeader(); }, 5s));
  LeaderElection b(cb.get(), ob);
  b.Start();
  ASSERT_TRUE(WaitFor([&] { return b.Leader() == "a:1"; }, 5s));
  const etcdserverpb::Compare old_fence = a.Fence();
  LeaderWatch watch(&a, &b);

  const auto cut = Clock::now();
  etcd_.Pause(cut_member);
  ASSERT_TRUE(WaitFor([&] { return !a.IsLeader(); }, 3s));
  const auto stepped_down = Clock::now() - cut;
  ASSERT_TRUE(WaitFor([&] { return b.IsLeader(); }, 6s));
  const auto took_over = Clock::now() - cut;
  EXPECT_LE(stepped_down, 2s);
  // The TTL, plus a loaded machine's slack.
  EXPECT_LE(took_over, 6s) << "failover should take about the TTL";
  EXPECT_FALSE(watch.both());

  etcd_.Resume(cut_member);
  ASSERT_TRUE(etcd_.WaitHealthy());
  etcdserverpb::TxnRequest late;
  *late.add_compare() = old_fence;
  etcd::AddPut(&late, "/p/state", "late write by a");
  auto r = ca->Txn(late);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->succeeded()) << "a deposed leader's write went through";
  EXPECT_FALSE(*cb->Get("/p/state"));
  // Healed: exactly one leader, and it stays b (a campaigns again and follows).
  std::this_thread::sleep_for(3s);
  EXPECT_TRUE(b.IsLeader());
  EXPECT_FALSE(a.IsLeader());
  EXPECT_EQ(a.Leader(), "b:1");
  EXPECT_FALSE(watch.both());
}

// The member the leading replica talks to stalls (stopped) until the replica can no longer be
// sure of its lease, but not as long as the lease's TTL on etcd's side. The replica stops leading
// (its callback says so), yet keeps its lease and key; when the member answers again it leads
// again under the same fence: no failover, no second term, its fenced writes still go through.
// (Revoking the lease at the stall, as a leader once did, handed leadership to whichever replica
// campaigned first once etcd answered: after any etcd blip, every control plane's leader moved.)
TEST_F(EtcdTest, ALeaderWhoseLeaseOutlivesAnEtcdStallLeadsAgainUnderTheSameFence) {
  const std::size_t member = AFollower(etcd_);
  // Calls that give up quickly; a wide margin, so that the replica stops being sure of its lease
  // (2.2 s after a renewal) well before etcd can expire it (6 s after).
  auto ca = Connect({etcd_.endpoint(member)}, 500ms);
  auto other = Connect(etcd_.endpoints());
  std::atomic<int> became{0}, stopped{0};
  LeaderElection a(ca.get(), {.key = "/s/leader", .value = "a:1", .ttl_s = 6, .margin = 3800ms},
                   [&](bool leader) { ++(leader ? became : stopped); });
  a.Start();
  ASSERT_TRUE(WaitFor([&] { return a.IsLeader(); }, 5s));
  const etcdserverpb::Compare fence = a.Fence();
  const int64_t created = (*other->Get("/s/leader"))->create_revision;
  EXPECT_EQ(a.FenceRevision(), created);

  etcd_.Pause(member);
  const bool stood_down = WaitFor([&] { return stopped == 1; }, 5s);
  EXPECT_FALSE(a.IsLeader());
  EXPECT_EQ(a.FenceRevision(), 0) << "no fence while it does not lead";
  etcd_.Resume(member);
  ASSERT_TRUE(stood_down) << "renewals failed past the lease's end on a's clock";
  ASSERT_TRUE(WaitFor([&] { return a.IsLeader(); }, 3s)) << "the lease lived on; a should lead";
  EXPECT_EQ(became, 2);
  EXPECT_EQ(stopped, 1);
  auto key = other->Get("/s/leader");
  ASSERT_TRUE(key.ok() && *key) << key.status();
  EXPECT_EQ((*key)->create_revision, created) << "a new term, not the old one resumed";
  EXPECT_EQ(a.Terms(), 1u);
  // What a daemon compares to know it leads again rather than anew (hai-server keeps the replica
  // quorums it decided: nobody else can have decided any meanwhile).
  EXPECT_EQ(a.FenceRevision(), created);
  etcdserverpb::TxnRequest w;
  *w.add_compare() = fence;
  etcd::AddPut(&w, "/s/state", "by a, after the stall");
  auto r = ca->Txn(w);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->succeeded()) << "the fence taken before the stall should hold";
}

}  // namespace
}  // namespace ff
