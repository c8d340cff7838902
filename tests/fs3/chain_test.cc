// The target state machine: every row of 3FS's transition table, and whole chains through
// failures and recoveries.
#include "fs3/chain.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ff::fs3 {
namespace {

using L = LocalState;
using P = PublicState;
using ::testing::ElementsAre;

struct Row {
  L local;
  P current;
  std::optional<P> predecessor;
  P next;
  // Whether a target before it holds the chain's data; by default, whether the predecessor does.
  std::optional<bool> data_before = std::nullopt;
};

TEST(TargetStateTest, EveryRowOfTheTransitionTable) {
  const std::optional<P> none;
  const std::vector<Row> rows = {
      // up-to-date
      {L::kUpToDate, P::kServing, P::kSyncing, P::kServing},
      {L::kUpToDate, P::kServing, none, P::kServing},
      {L::kUpToDate, P::kSyncing, P::kServing, P::kServing},
      {L::kUpToDate, P::kSyncing, P::kOffline, P::kServing},
      {L::kUpToDate, P::kWaiting, P::kServing, P::kWaiting},
      {L::kUpToDate, P::kWaiting, none, P::kWaiting},
      {L::kUpToDate, P::kLastSrv, none, P::kServing},
      {L::kUpToDate, P::kOffline, P::kServing, P::kWaiting},
      // online
      {L::kOnline, P::kServing, P::kWaiting, P::kServing},
      {L::kOnline, P::kServing, none, P::kServing},
      {L::kOnline, P::kSyncing, P::kServing, P::kSyncing},
      {L::kOnline, P::kSyncing, P::kSyncing, P::kWaiting},
      {L::kOnline, P::kSyncing, none, P::kWaiting},
      {L::kOnline, P::kWaiting, P::kServing, P::kSyncing},
      {L::kOnline, P::kWaiting, P::kLastSrv, P::kWaiting},
      {L::kOnline, P::kWaiting, none, P::kWaiting},
      {L::kOnline, P::kLastSrv, none, P::kServing},
      {L::kOnline, P::kOffline, P::kServing, P::kWaiting},
      // offline
      {L::kOffline, P::kServing, none, P::kLastSrv},
      {L::kOffline, P::kServing, P::kServing, P::kOffline},
      {L::kOffline, P::kServing, P::kOffline, P::kOffline, true},
      // The last target holding the data is lastsrv, whatever waits or syncs ahead of it.
      {L::kOffline, P::kServing, P::kOffline, P::kLastSrv, false},
      {L::kOffline, P::kServing, P::kWaiting, P::kLastSrv},
      {L::kOffline, P::kServing, P::kSyncing, P::kLastSrv},
      {L::kOffline, P::kServing, P::kLastSrv, P::kOffline},
      {L::kOffline, P::kSyncing, P::kServing, P::kOffline},
      {L::kOffline, P::kSyncing, none, P::kOffline},
      {L::kOffline, P::kWaiting, P::kServing, P::kOffline},
      {L::kOffline, P::kLastSrv, none, P::kLastSrv},
      {L::kOffline, P::kLastSrv, P::kServing, P::kLastSrv},
      {L::kOffline, P::kOffline, none, P::kOffline},
  };
  for (const Row& r : rows) {
    const bool data_before =
        r.data_before.value_or(r.predecessor == P::kServing || r.predecessor == P::kLastSrv);
    EXPECT_EQ(NextPublicState(r.local, r.current, r.predecessor, data_before), r.next)
        << Name(r.local) << " " << Name(r.current) << " pred "
        << (r.predecessor ? Name(*r.predecessor) : "none");
  }
}

TEST(TargetStateTest, NamesRoundTrip) {
  for (P s : {P::kServing, P::kSyncing, P::kWaiting, P::kLastSrv, P::kOffline}) {
    EXPECT_EQ(ParsePublicState(Name(s)), s);
  }
  for (L s : {L::kUpToDate, L::kOnline, L::kOffline}) {
    EXPECT_EQ(ParseLocalState(Name(s)), s);
  }
  EXPECT_FALSE(ParsePublicState("up"));
  EXPECT_FALSE(ParseLocalState("serving"));
}

Chain Abc() {
  return Chain{1, 1, {{1, P::kServing}, {2, P::kServing}, {3, P::kServing}}};
}

std::vector<std::pair<TargetId, P>> View(const Chain& c) {
  std::vector<std::pair<TargetId, P>> v;
  for (const ChainTarget& t : c.targets)
    v.emplace_back(t.target, t.state);
  return v;
}

TEST(ChainTest, NothingChangesWhileAllAreUp) {
  Chain c = Abc();
  EXPECT_FALSE(UpdateChain(c, {{1, L::kUpToDate}, {2, L::kUpToDate}, {3, L::kUpToDate}}));
  EXPECT_EQ(c.version, 1u);
  EXPECT_EQ(c.Head(), 0);
  EXPECT_EQ(c.Tail(), 2);
  EXPECT_THAT(c.Readable(), ElementsAre(1, 2, 3));
}

TEST(ChainTest, AFailedTargetMovesToTheEndAndReturnsThroughSyncing) {
  for (TargetId failed : {1, 2, 3}) {  // head, middle, tail
    Chain c = Abc();
    std::map<TargetId, L> local = {{1, L::kUpToDate}, {2, L::kUpToDate}, {3, L::kUpToDate}};
    local[failed] = L::kOffline;
    ASSERT_TRUE(UpdateChain(c, local));
    EXPECT_EQ(c.version, 2u);
    EXPECT_EQ(c.targets.back().target, failed);
    EXPECT_EQ(c.targets.back().state, P::kOffline);
    EXPECT_EQ(c.Readable().size(), 2u);
    // It comes back (its service restarted): it rejoins at the tail, waiting; the next pass
    // makes it sync from its serving predecessor.
    local[failed] = L::kOnline;
    ASSERT_TRUE(UpdateChain(c, local));
    EXPECT_EQ(c.version, 3u);
    EXPECT_EQ(c.targets.back().target, failed);
    EXPECT_EQ(c.targets.back().state, P::kWaiting);
    EXPECT_EQ(c.Tail(), 1);  // not written to yet
    ASSERT_TRUE(UpdateChain(c, local));
    EXPECT_EQ(c.version, 4u);
    EXPECT_EQ(c.targets.back().state, P::kSyncing);
    EXPECT_EQ(c.Tail(), 2);               // writes reach it while it syncs
    EXPECT_EQ(c.Readable().size(), 2u);   // reads do not
    EXPECT_FALSE(UpdateChain(c, local));  // stable while it syncs
    // Recovery done.
    local[failed] = L::kUpToDate;
    ASSERT_TRUE(UpdateChain(c, local));
    EXPECT_EQ(c.targets.back().state, P::kServing);
    EXPECT_EQ(c.Readable().size(), 3u);
  }
}

TEST(ChainTest, WhenEveryTargetFailsTheFirstIsLastServingAndMustReturnFirst) {
  Chain c = Abc();
  ASSERT_TRUE(UpdateChain(c, {}));  // every service's lease expired
  EXPECT_THAT(View(c), ElementsAre(std::pair<TargetId, P>{1, P::kLastSrv},
                                   std::pair<TargetId, P>{2, P::kOffline},
                                   std::pair<TargetId, P>{3, P::kOffline}));
  EXPECT_EQ(c.Head(), -1);  // no writes until the last serving target is back
  // Target 3 returns first: it may have missed writes, so it waits for target 1.
  ASSERT_TRUE(UpdateChain(c, {{3, L::kOnline}}));
  EXPECT_THAT(View(c), ElementsAre(std::pair<TargetId, P>{3, P::kWaiting},
                                   std::pair<TargetId, P>{1, P::kLastSrv},
                                   std::pair<TargetId, P>{2, P::kOffline}));
  EXPECT_TRUE(c.Readable().empty());
  // Target 1 returns: it serves again, and target 3 syncs from it.
  ASSERT_TRUE(UpdateChain(c, {{1, L::kOnline}, {3, L::kOnline}}));
  EXPECT_THAT(View(c), ElementsAre(std::pair<TargetId, P>{1, P::kServing},
                                   std::pair<TargetId, P>{3, P::kSyncing},
                                   std::pair<TargetId, P>{2, P::kOffline}));
}

// Found by the model checker (fs3/model/chain.pml): the only serving target fails while a
// returning target syncs ahead of it in the sorted chain. It must be lastsrv, or no target would
// ever serve the chain again.
TEST(ChainTest, TheLastServingTargetIsFoundEvenBehindAWaitingOne) {
  Chain c = Abc();
  ASSERT_TRUE(UpdateChain(c, {{1, L::kUpToDate}}));                   // 2 and 3 fail
  ASSERT_TRUE(UpdateChain(c, {{1, L::kUpToDate}, {2, L::kOnline}}));  // 2 returns: waiting
  ASSERT_TRUE(UpdateChain(c, {{1, L::kUpToDate}, {2, L::kOnline}}));  // ... then syncing
  ASSERT_THAT(View(c), ElementsAre(std::pair<TargetId, P>{1, P::kServing},
                                   std::pair<TargetId, P>{2, P::kSyncing},
                                   std::pair<TargetId, P>{3, P::kOffline}));
  ASSERT_TRUE(UpdateChain(c, {{2, L::kOnline}}));  // 1 fails before the sync finished
  EXPECT_THAT(View(c), ElementsAre(std::pair<TargetId, P>{2, P::kWaiting},
                                   std::pair<TargetId, P>{1, P::kLastSrv},
                                   std::pair<TargetId, P>{3, P::kOffline}));
  // 1 returns: it serves again and 2 syncs from it.
  ASSERT_TRUE(UpdateChain(c, {{1, L::kOnline}, {2, L::kOnline}}));
  EXPECT_THAT(View(c), ElementsAre(std::pair<TargetId, P>{1, P::kServing},
                                   std::pair<TargetId, P>{2, P::kSyncing},
                                   std::pair<TargetId, P>{3, P::kOffline}));
}

TEST(ChainTest, TwoServingTargetsFailingTogetherLeaveOneLastServing) {
  Chain c = Abc();
  ASSERT_TRUE(UpdateChain(c, {{1, L::kUpToDate}, {2, L::kUpToDate}}));  // 3 fails
  ASSERT_TRUE(UpdateChain(c, {{1, L::kUpToDate}, {2, L::kUpToDate}, {3, L::kOnline}}));
  ASSERT_EQ(c.targets.back().state, P::kWaiting);
  ASSERT_TRUE(UpdateChain(c, {{3, L::kOnline}}));  // 1 and 2 fail at once
  EXPECT_THAT(View(c), ElementsAre(std::pair<TargetId, P>{3, P::kWaiting},
                                   std::pair<TargetId, P>{1, P::kLastSrv},
                                   std::pair<TargetId, P>{2, P::kOffline}));
}

TEST(TargetStateTest, AServiceResyncsATargetThatIsNotServing) {
  EXPECT_EQ(LocalAfterRouting(L::kOnline, P::kServing), L::kUpToDate);
  EXPECT_EQ(LocalAfterRouting(L::kUpToDate, P::kOffline), L::kOnline);
  EXPECT_EQ(LocalAfterRouting(L::kUpToDate, P::kLastSrv), L::kOnline);
  // Its routing may skip the offline version and show it waiting: up-to-date + waiting would
  // stay waiting for ever.
  EXPECT_EQ(LocalAfterRouting(L::kUpToDate, P::kWaiting), L::kOnline);
  EXPECT_EQ(LocalAfterRouting(L::kOnline, P::kWaiting), L::kOnline);
  EXPECT_EQ(LocalAfterRouting(L::kUpToDate, P::kSyncing), L::kUpToDate);  // synced, not yet serving
  EXPECT_EQ(LocalAfterRouting(L::kOnline, P::kSyncing), L::kOnline);
}

TEST(ChainTest, TwoFailuresInARowKeepTheOrderOfData) {
  Chain c = Abc();
  ASSERT_TRUE(UpdateChain(c, {{2, L::kUpToDate}, {3, L::kUpToDate}}));  // head fails
  ASSERT_TRUE(UpdateChain(c, {{3, L::kUpToDate}}));                     // then the new head
  // The later failure (2, with the more recent data) stays ahead of the earlier one (1).
  EXPECT_THAT(View(c), ElementsAre(std::pair<TargetId, P>{3, P::kServing},
                                   std::pair<TargetId, P>{2, P::kOffline},
                                   std::pair<TargetId, P>{1, P::kOffline}));
  EXPECT_EQ(c.version, 3u);
}

}  // namespace
}  // namespace ff::fs3
