// fs3 fsck --data's comparison of a chain's replicas (the listings their DumpMeta returns).
// The whole check against running storage services is in fsx_test.cc and storage_test.cc.
#include "fs3/replica_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ff::fs3 {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

fs3rpc::ChunkMetaRecord Record(uint64_t inode, uint32_t index, uint64_t version, uint32_t length,
                               uint32_t crc) {
  fs3rpc::ChunkMetaRecord r;
  r.mutable_id()->set_inode(inode);
  r.mutable_id()->set_index(index);
  r.set_committed_version(version);
  r.set_length(length);
  r.set_crc32c(crc);
  return r;
}

TEST(CompareReplicasTest, ReplicasThatAgreeHaveNoProblem) {
  const auto a = Record(7, 0, 3, 4096, 0xabc), b = Record(7, 1, 1, 10, 0x1);
  EXPECT_THAT(CompareReplicas({{11, {a, b}}, {21, {a, b}}, {31, {a, b}}}), IsEmpty());
  EXPECT_THAT(CompareReplicas({{11, {a}}}), IsEmpty());
  EXPECT_THAT(CompareReplicas({}), IsEmpty());
}

TEST(CompareReplicasTest, AnOlderVersionOnOneReplicaIsReportedWithEveryReplica) {
  const auto v3 = Record(7, 0, 3, 4096, 0xabc), v2 = Record(7, 0, 2, 4096, 0xdef);
  EXPECT_THAT(
      CompareReplicas({{11, {v3}}, {21, {v2}}, {31, {v3}}}),
      ElementsAre(Pair("7:0",
                       "target 11 has version 3 (4096 bytes, crc32c 0x00000abc), target 21 has "
                       "version 2 (4096 bytes, crc32c 0x00000def), target 31 has version 3 "
                       "(4096 bytes, crc32c 0x00000abc)")));
}

TEST(CompareReplicasTest, TheSameVersionWithOtherContentOrLengthIsReported) {
  const auto a = Record(7, 0, 3, 4096, 0xabc);
  EXPECT_THAT(CompareReplicas({{11, {a}}, {21, {Record(7, 0, 3, 4096, 0xabd)}}}),
              ElementsAre(Pair("7:0", ::testing::HasSubstr("crc32c 0x00000abd"))));
  EXPECT_THAT(CompareReplicas({{11, {a}}, {21, {Record(7, 0, 3, 4000, 0xabc)}}}),
              ElementsAre(Pair("7:0", ::testing::HasSubstr("4000 bytes"))));
}

TEST(CompareReplicasTest, AChunkMissingOnOneReplicaIsReported) {
  const auto a = Record(7, 0, 3, 4096, 0xabc), b = Record(9, 2, 1, 5, 0x5);
  EXPECT_THAT(CompareReplicas({{11, {a, b}}, {21, {b}}}),
              ElementsAre(Pair("7:0",
                               "target 11 has version 3 (4096 bytes, crc32c 0x00000abc), "
                               "target 21 has no committed version")));
  // A record with only a pending version (an abandoned write) holds nothing committed.
  auto pending = Record(7, 0, 0, 0, 0);
  pending.set_pending_version(1);
  EXPECT_THAT(CompareReplicas({{11, {a}}, {21, {pending}}}),
              ElementsAre(Pair("7:0", ::testing::_)));
  EXPECT_THAT(CompareReplicas({{11, {pending}}, {21, {}}}), IsEmpty());
}

}  // namespace
}  // namespace ff::fs3
