// The chain write's rules on their own (fs3/storage/src/chain_write.cc): fs3-storage's table of
// applied writes (request id -> what the write did: retries within the retention are answered from
// it; it forgets by age, and past its size the oldest first), when a write may go on mid-chain, and
// which chunks a resync sends.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "storage_service.h"

namespace ff::fs3 {
namespace {

using namespace std::chrono_literals;
using Clock = RecentWrites::Clock;

TEST(RecentWrites, RemembersWithinTheRetentionAndForgetsAfter) {
  RecentWrites w(10s, 1000);
  const Clock::time_point t0{};
  w.Add(1, {5, 100}, t0);
  w.Add(0, {6, 100}, t0);  // no request id: nothing to remember
  ASSERT_TRUE(w.Find(1).has_value());
  EXPECT_EQ(w.Find(1)->version, 5u);
  EXPECT_EQ(w.Find(1)->length, 100u);
  EXPECT_FALSE(w.Find(0).has_value());
  w.Add(2, {7, 1}, t0 + 9s);
  EXPECT_TRUE(w.Find(1).has_value());  // 9 s old
  w.Add(3, {8, 1}, t0 + 10s);
  EXPECT_FALSE(w.Find(1).has_value());  // 10 s old: gone
  EXPECT_TRUE(w.Find(2).has_value());
  EXPECT_EQ(w.size(), 2u);
  EXPECT_EQ(w.evicted_early(), 0u);
}

TEST(RecentWrites, PastItsSizeTheOldestGoFirstNeverTheNewest) {
  RecentWrites w(1h, 100000);
  const Clock::time_point t0{};
  for (uint64_t id = 1; id <= 100001; ++id)
    w.Add(id, {id, 0}, t0 + std::chrono::milliseconds(id));
  EXPECT_EQ(w.size(), 100000u);
  EXPECT_FALSE(w.Find(1).has_value());
  EXPECT_TRUE(w.Find(2).has_value());
  EXPECT_TRUE(w.Find(100001).has_value());  // the write applied just now
  EXPECT_EQ(w.evicted_early(), 1u);
}

TEST(RecentWrites, AnIdAddedAgainKeepsItsNewerEntry) {
  RecentWrites w(10s, 1000);
  const Clock::time_point t0{};
  w.Add(1, {1, 0}, t0);
  w.Add(1, {2, 0}, t0 + 8s);
  w.Add(9, {3, 0}, t0 + 12s);  // the first entry of id 1 expires; its newer one stays
  ASSERT_TRUE(w.Find(1).has_value());
  EXPECT_EQ(w.Find(1)->version, 2u);
  w.Add(9, {3, 0}, t0 + 18s);
  EXPECT_FALSE(w.Find(1).has_value());
}

TEST(RecentWrites, RetriesOfOneIdDoNotGrowItWithoutBound) {
  RecentWrites w(1h, 4);
  const Clock::time_point t0{};
  for (int i = 0; i < 1000; ++i)
    w.Add(7, {static_cast<uint64_t>(i), 0}, t0 + std::chrono::milliseconds(i));
  EXPECT_EQ(w.size(), 1u);
  ASSERT_TRUE(w.Find(7).has_value());
  EXPECT_EQ(w.Find(7)->version, 999u);
}

}  // namespace
}  // namespace ff::fs3

// ---- rules the model checker found missing (fs3/model/chain.pml) ----------------------------

namespace ff::fs3 {
namespace {

TEST(LeaseRoutingTest, ARenewalServesOnlyWithRoutingAsNewAsItReported) {
  LeaseRouting lease;
  EXPECT_TRUE(lease.RoutingCurrent(0));
  // The service paused past its lease; mgmtd dropped its target (routing v7) and then heard the
  // service again: the renewal says v7, the service still holds v5, where it serves.
  lease.Renewed(7);
  EXPECT_FALSE(lease.RoutingCurrent(5));
  EXPECT_EQ(lease.required_routing(), 7u);
  EXPECT_TRUE(lease.RoutingCurrent(7));
  EXPECT_TRUE(lease.RoutingCurrent(8));
  lease.Renewed(6);  // an older answer never lowers it
  EXPECT_FALSE(lease.RoutingCurrent(6));
}

TEST(MayContinueWriteTest, AHeadThatLostItsPlaceDoesNotCommitAlone) {
  // Came back as the syncing tail: writable, but not the head the client sent the write to.
  Status st = MayContinueWrite(PublicState::kSyncing, /*head=*/false, /*forwarded=*/false, 7);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), ::testing::HasSubstr("no longer the head"));
  EXPECT_EQ(MayContinueWrite(PublicState::kWaiting, true, false, 7).code(),
            StatusCode::kUnavailable);
  EXPECT_TRUE(MayContinueWrite(PublicState::kServing, true, false, 7).ok());
  // A replica forwarded to goes on down the new chain from where it is.
  EXPECT_TRUE(MayContinueWrite(PublicState::kServing, false, true, 7).ok());
  EXPECT_TRUE(MayContinueWrite(PublicState::kSyncing, false, true, 7).ok());
}

TEST(ResyncTest, SendsEachChunkTheSuccessorDoesNotHoldAsCommittedHere) {
  fs3rpc::ChunkMetaRecord ours;
  ours.set_committed_version(4);
  ours.set_crc32c(0xabc);
  EXPECT_FALSE(SuccessorHoldsCommitted(ours, nullptr));  // it has no such chunk
  fs3rpc::ChunkMetaRecord theirs = ours;
  EXPECT_TRUE(SuccessorHoldsCommitted(ours, &theirs));
  theirs.set_committed_version(3);  // older
  EXPECT_FALSE(SuccessorHoldsCommitted(ours, &theirs));
  theirs.set_committed_version(5);  // newer than ours: ours is what the chain holds
  EXPECT_FALSE(SuccessorHoldsCommitted(ours, &theirs));
  theirs = ours;
  theirs.set_crc32c(0xabd);  // same version, other bytes
  EXPECT_FALSE(SuccessorHoldsCommitted(ours, &theirs));
  theirs = ours;
  theirs.set_pending_version(5);  // a half-done write there
  EXPECT_FALSE(SuccessorHoldsCommitted(ours, &theirs));
}

}  // namespace
}  // namespace ff::fs3
