// The RocksDB engine of ProtoDb: prefix scans, and what a scan costs next to deleted records.
#include "common/proto_db.h"

#include <gtest/gtest.h>
#include <rocksdb/perf_context.h>
#include <rocksdb/perf_level.h>

#include "tests/support/subprocess.h"

namespace ff {
namespace {

std::string Key(const std::string& prefix, int i) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08d", i);
  return prefix + buf;
}

TEST(RocksProtoDb, AScanSeesOnlyItsPrefixAfterTheGivenKey) {
  test::TempDir dir;
  auto db = std::move(*ProtoDb::Open(dir.File("db")));
  for (const char* k : {"a/1", "s/1", "s/2", "s/3", "s0", "t/1"}) {
    ASSERT_TRUE(db->WriteRaw({{k, std::string("v") + k}}).ok());
  }
  ASSERT_TRUE(db->WriteRaw({{"s/2", std::nullopt}}).ok());
  auto rows = *db->ScanKeys("s/", "", 10);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].first, "s/1");
  EXPECT_EQ(rows[1].first, "s/3");
  EXPECT_EQ(rows[1].second, "vs/3");
  rows = *db->ScanKeys("s/", "s/1", 10);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].first, "s/3");
  EXPECT_EQ(db->ScanKeys("s/", "", 1)->size(), 1u);
  EXPECT_TRUE(db->ScanKeys("r/", "", 10)->empty());
  // A prefix whose last byte is 0xff, and one of 0xff bytes only.
  ASSERT_TRUE(db->WriteRaw({{std::string("x\xff") + "1", "a"}, {"y", "b"}}).ok());
  ASSERT_TRUE(db->WriteRaw({{std::string("\xff\xff") + "1", "c"}}).ok());
  EXPECT_EQ(db->ScanKeys(std::string("x\xff"), "", 10)->size(), 1u);
  EXPECT_EQ(db->ScanKeys(std::string("\xff\xff"), "", 10)->size(), 1u);
  auto view = db->Snapshot();
  EXPECT_EQ(view->ScanKeys("s/", "", 10)->size(), 2u);
}

// fs3-meta asks "is anything under s/<inode>?" for every unlink: sessions of later inodes, opened
// and closed by then, are deleted keys past that prefix. A scan must stop at its prefix's end,
// not walk every deleted key after it (which made unlinks 1 ms each after a few thousand
// creates).
TEST(RocksProtoDb, AScanDoesNotWalkTheDeletedKeysPastItsPrefix) {
  test::TempDir dir;
  auto db = std::move(*ProtoDb::Open(dir.File("db")));
  for (int i = 0; i < 5000; ++i)
    ASSERT_TRUE(db->WriteRaw({{Key("s/", i), ""}}).ok());
  for (int i = 0; i < 5000; ++i)
    ASSERT_TRUE(db->WriteRaw({{Key("s/", i), std::nullopt}}).ok());
  ASSERT_TRUE(db->WriteRaw({{"t/live", "x"}}).ok());
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
  rocksdb::get_perf_context()->Reset();
  auto rows = *db->ScanKeys(Key("s/", 10), "", 1);
  EXPECT_TRUE(rows.empty());
  auto view = db->Snapshot();
  EXPECT_TRUE(view->ScanKeys(Key("s/", 20), "", 1)->empty());
  const uint64_t skipped = rocksdb::get_perf_context()->internal_delete_skipped_count;
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
  EXPECT_LT(skipped, 10u) << "deleted keys walked by two scans of one key's prefix";
}

}  // namespace
}  // namespace ff
