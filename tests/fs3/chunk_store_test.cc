// A target's chunk store on a real directory and RocksDB.
#include "fs3/chunk_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "fs3/crc32c.h"
#include "tests/support/subprocess.h"

namespace ff::fs3 {
namespace {

using ::testing::HasSubstr;

fs3rpc::ChunkId Id(uint64_t inode, uint32_t index) {
  fs3rpc::ChunkId id;
  id.set_inode(inode);
  id.set_index(index);
  return id;
}

std::string Random(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s)
    c = static_cast<char>(rng());
  return s;
}

TEST(Crc32cTest, KnownValuesAndContinuation) {
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  std::string data = Random(10000, 1);
  EXPECT_EQ(
      Crc32c(std::string_view(data).substr(3000), Crc32c(std::string_view(data).substr(0, 3000))),
      Crc32c(data));
}

class ChunkStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = ChunkStore::Open(dir_.File("target"));
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
  }
  test::TempDir dir_;
  std::unique_ptr<ChunkStore> store_;
};

TEST_F(ChunkStoreTest, PrepareCommitReadAndVersions) {
  auto id = Id(7, 0);
  EXPECT_EQ(store_->Meta(id).status().code(), StatusCode::kNotFound);
  std::string first = Random(10000, 2);
  ASSERT_TRUE(store_->Prepare(id, 1, 0, first, false, 3).ok());
  // Pending is not committed: reads see nothing yet, the pending read sees it.
  EXPECT_EQ(store_->Meta(id)->committed_version(), 0u);
  EXPECT_EQ(*store_->Read(id, 0, 10000, /*pending=*/true), first);
  ASSERT_TRUE(store_->Commit(id, 1).ok());
  ASSERT_TRUE(store_->Commit(id, 1).ok());  // idempotent
  auto meta = store_->Meta(id);
  EXPECT_EQ(meta->committed_version(), 1u);
  EXPECT_EQ(meta->length(), 10000u);
  EXPECT_EQ(meta->crc32c(), Crc32c(first));
  EXPECT_EQ(meta->chain_version(), 3u);
  EXPECT_EQ(*store_->Read(id, 0, 20000), first);                   // cut at the end
  EXPECT_EQ(*store_->Read(id, 4090, 20), first.substr(4090, 20));  // across a block boundary
  // An update over the committed version, past its end (the gap reads as zeros).
  ASSERT_TRUE(store_->Prepare(id, 2, 12000, "tail", false, 3).ok());
  ASSERT_TRUE(store_->Commit(id, 2).ok());
  std::string want = first + std::string(2000, '\0') + "tail";
  EXPECT_EQ(*store_->Read(id, 0, 1 << 20), want);
  // An update for the wrong base version is refused and changes nothing.
  auto bad = store_->Prepare(id, 5, 0, "x", false, 3);
  EXPECT_EQ(bad.status().code(), StatusCode::kStaleVersion);
  EXPECT_THAT(bad.status().message(), HasSubstr("version mismatch"));
  EXPECT_EQ(store_->Meta(id)->committed_version(), 2u);
  EXPECT_EQ(store_->Commit(id, 9).code(), StatusCode::kFailedPrecondition);
  // A full replace at any version (resync).
  ASSERT_TRUE(store_->Prepare(id, 9, 0, "whole", true, 4).ok());
  ASSERT_TRUE(store_->Commit(id, 9).ok());
  EXPECT_EQ(*store_->Read(id, 0, 100), "whole");
}

TEST_F(ChunkStoreTest, CorruptionIsDetectedNotReturned) {
  auto id = Id(1, 3);
  std::string data = Random(3 * kBlockSize, 3);
  ASSERT_TRUE(store_->Prepare(id, 1, 0, data, false, 1).ok());
  ASSERT_TRUE(store_->Commit(id, 1).ok());
  // Flip a byte in the second block on disk.
  std::string path = dir_.File("target/chunks/0000000000000001-00000003.c");
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.is_open());
  f.seekp(kBlockSize + 10);
  f.put(static_cast<char>(data[kBlockSize + 10] ^ 1));
  f.close();
  EXPECT_EQ(*store_->Read(id, 0, 100), data.substr(0, 100));  // the first block is fine
  auto r = store_->Read(id, kBlockSize, 100);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("fails its checksum at byte 4096"));
}

TEST_F(ChunkStoreTest, ChunksOfAFileFormOneRangeAndSurviveReopening) {
  for (uint32_t i : {5u, 0u, 300u, 2u}) {
    ASSERT_TRUE(store_->Prepare(Id(42, i), 1, 0, "c" + std::to_string(i), false, 1).ok());
    ASSERT_TRUE(store_->Commit(Id(42, i), 1).ok());
  }
  ASSERT_TRUE(store_->Prepare(Id(43, 0), 1, 0, "other", false, 1).ok());
  ASSERT_TRUE(store_->Commit(Id(43, 0), 1).ok());
  ASSERT_TRUE(store_->Extent(42).ok());
  EXPECT_EQ(store_->Extent(42)->last->id().index(), 300u);
  ASSERT_TRUE(store_->Extent(44).ok());
  EXPECT_FALSE(store_->Extent(44)->last.has_value());
  store_.reset();
  auto again = ChunkStore::Open(dir_.File("target"));
  ASSERT_TRUE(again.ok());
  auto list = (*again)->List();
  ASSERT_EQ(list->size(), 5u);
  EXPECT_EQ((*list)[0].id().index(), 0u);  // sorted by (inode, index)
  EXPECT_EQ((*list)[3].id().index(), 300u);
  EXPECT_EQ((*list)[4].id().inode(), 43u);
  ASSERT_TRUE((*again)->Remove(Id(42, 300)).ok());
  ASSERT_TRUE((*again)->Extent(42).ok());
  EXPECT_EQ((*again)->Extent(42)->last->id().index(), 5u);
}

// What a chunk's file takes on the disk (st_blocks, in bytes).
uint64_t OnDisk(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/chunks")) {
    struct stat st {};
    EXPECT_EQ(stat(e.path().c_str(), &st), 0);
    bytes += uint64_t{static_cast<uint64_t>(st.st_blocks)} * 512;
  }
  return bytes;
}

// Holes are holes: a small write into an empty chunk stores its block, not the chunk up to it;
// the rest reads as zeros, checksums cover it, and the record says what is stored. (Before, four
// 4 KiB writes at 0, 1, 2 and 3.9 MiB of empty 4 MiB chunks took 7,080 KiB.)
TEST_F(ChunkStoreTest, ASmallWriteIntoAnEmptyChunkStoresOnlyItsBlock) {
  const std::string data = Random(kBlockSize, 9);
  uint32_t index = 0;
  for (uint32_t offset : {0u, 1u << 20, 2u << 20, (4u << 20) - 100 * 1024}) {
    const auto id = Id(50, index++);
    ASSERT_TRUE(store_->Prepare(id, 1, offset, data, false, 1).ok());
    ASSERT_TRUE(store_->Commit(id, 1).ok());
    auto meta = store_->Meta(id);
    ASSERT_TRUE(meta.ok());
    EXPECT_EQ(meta->length(), offset + kBlockSize);
    EXPECT_EQ(meta->stored_bytes(), kBlockSize) << "offset " << offset;
    EXPECT_EQ(*store_->Read(id, offset, kBlockSize), data);
    // Before the write: zeros (the hole), checked against the checksums like any block.
    EXPECT_EQ(*store_->Read(id, 0, 64), offset == 0 ? data.substr(0, 64) : std::string(64, '\0'));
  }
  // One block per write on the disk (a file system may round up to its own block: 4 KiB on
  // ext4 and tmpfs), and in the target's usage and the file's extent.
  EXPECT_LE(OnDisk(store_->dir()), 4u * kBlockSize);
  EXPECT_EQ(store_->usage().bytes, 4u * kBlockSize);
  EXPECT_EQ(store_->Extent(50)->stored_bytes, 4u * kBlockSize);
  // A later write into the hole of one chunk stores that block too, and keeps the first.
  const auto id = Id(50, 1);
  ASSERT_TRUE(store_->Prepare(id, 2, 100, data, false, 1).ok());
  ASSERT_TRUE(store_->Commit(id, 2).ok());
  EXPECT_EQ(store_->Meta(id)->stored_bytes(), 3u * kBlockSize);  // [100, 4196) spans two blocks
  EXPECT_EQ(*store_->Read(id, 1u << 20, kBlockSize), data);
  EXPECT_EQ(*store_->Read(id, 100, kBlockSize), data);
  // A write of zeros stores nothing: zeros are what a hole reads as.
  ASSERT_TRUE(store_->Prepare(Id(51, 0), 1, 0, std::string(1 << 20, '\0'), false, 1).ok());
  ASSERT_TRUE(store_->Commit(Id(51, 0), 1).ok());
  EXPECT_EQ(store_->Meta(Id(51, 0))->stored_bytes(), 0u);
  EXPECT_EQ(*store_->Read(Id(51, 0), 4096, 10), std::string(10, '\0'));
}

// Removing a chunk drops its record before its files: a crash between leaves files without a
// record, which the next open removes (as it does a write's temporary file); never a record
// whose file is gone.
TEST_F(ChunkStoreTest, OpenRemovesFilesThatNoRecordNames) {
  ASSERT_TRUE(store_->Prepare(Id(60, 0), 1, 0, "kept", false, 1).ok());
  ASSERT_TRUE(store_->Commit(Id(60, 0), 1).ok());
  const std::string dir = store_->dir();
  store_.reset();
  const std::string leftover = dir + "/chunks/000000000000003d-00000000.c";
  const std::string tmp = dir + "/chunks/000000000000003c-00000000.p.tmp";
  for (const std::string& path : {leftover, tmp}) {
    std::ofstream(path) << std::string(10000, 'x');
  }
  auto again = ChunkStore::Open(dir);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(std::filesystem::exists(leftover));
  EXPECT_FALSE(std::filesystem::exists(tmp));
  EXPECT_EQ(*(*again)->Read(Id(60, 0), 0, 4), "kept");
}

TEST_F(ChunkStoreTest, NewVersionsHoldExactlyTheirBytesWhateverWasWrittenBefore) {
  // Versions are assembled in reused aligned buffers and written with O_DIRECT in whole 4 KiB
  // blocks: what an earlier, larger write left in a buffer must never show through.
  for (uint32_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(store_->Prepare(Id(5, i), 1, 0, Random(64 * 1024, 10 + i), true, 1).ok());
  }
  // A new chunk written at an offset: zeros before it, nothing after it.
  ASSERT_TRUE(store_->Prepare(Id(6, 0), 1, 5000, "xyz", false, 1).ok());
  ASSERT_TRUE(store_->Commit(Id(6, 0), 1).ok());
  EXPECT_EQ(*store_->Read(Id(6, 0), 0, 1 << 20), std::string(5000, '\0') + "xyz");
  // A truncate up: zeros past the old end.
  ASSERT_TRUE(store_->PrepareTruncate(Id(6, 0), 2, 9000, 1).ok());
  ASSERT_TRUE(store_->Commit(Id(6, 0), 2).ok());
  EXPECT_EQ(*store_->Read(Id(6, 0), 0, 1 << 20),
            std::string(5000, '\0') + "xyz" + std::string(3997, '\0'));
  // The file holds the content's length exactly (not rounded up to the block), and its checksum
  // covers just that.
  struct stat st {};
  ASSERT_EQ(stat(dir_.File("target/chunks/0000000000000006-00000000.c").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 9000);
  EXPECT_EQ(store_->Meta(Id(6, 0))->crc32c(),
            Crc32c(std::string(5000, '\0') + "xyz" + std::string(3997, '\0')));
  // On tmpfs too (which may refuse O_DIRECT: then the store writes through the page cache).
  if (access("/dev/shm", W_OK) == 0) {
    char tmpl[] = "/dev/shm/chunk-store-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    {
      auto shm = ChunkStore::Open(std::string(tmpl) + "/target");
      ASSERT_TRUE(shm.ok()) << shm.status();
      const std::string data = Random(10001, 20);
      ASSERT_TRUE((*shm)->Prepare(Id(1, 0), 1, 0, data, false, 1).ok());
      ASSERT_TRUE((*shm)->Commit(Id(1, 0), 1).ok());
      EXPECT_EQ(*(*shm)->Read(Id(1, 0), 0, 1 << 20), data);
    }
    std::filesystem::remove_all(tmpl);
  }
}

// Usage is what the chunks store on the disk: their data's 4 KiB blocks (holes left out).
TEST_F(ChunkStoreTest, UsageCountsWhatTheTargetHoldsAndSurvivesReopening) {
  auto usage = [](const ChunkStore& s) {
    return std::make_pair(s.usage().chunks, s.usage().bytes);
  };
  constexpr uint64_t kB = kBlockSize;
  EXPECT_EQ(usage(*store_), std::make_pair(uint64_t{0}, uint64_t{0}));
  ASSERT_TRUE(store_->Prepare(Id(1, 0), 1, 0, Random(10000, 4), false, 1).ok());
  // A pending version is on disk too (10,000 bytes: three blocks).
  EXPECT_EQ(usage(*store_), std::make_pair(uint64_t{1}, 3 * kB));
  ASSERT_TRUE(store_->Commit(Id(1, 0), 1).ok());
  EXPECT_EQ(usage(*store_), std::make_pair(uint64_t{1}, 3 * kB));
  // An update: the committed and the pending contents are both held until the commit.
  ASSERT_TRUE(store_->Prepare(Id(1, 0), 2, 10000, "tail", false, 1).ok());
  EXPECT_EQ(usage(*store_), std::make_pair(uint64_t{1}, 6 * kB));
  // A pending version replaced by another (an abandoned write) is not counted twice.
  ASSERT_TRUE(store_->Prepare(Id(1, 0), 2, 0, "x", false, 1).ok());
  EXPECT_EQ(usage(*store_), std::make_pair(uint64_t{1}, 6 * kB));
  ASSERT_TRUE(store_->Commit(Id(1, 0), 2).ok());
  ASSERT_TRUE(store_->Commit(Id(1, 0), 2).ok());  // a repeated commit changes nothing
  EXPECT_EQ(usage(*store_), std::make_pair(uint64_t{1}, 3 * kB));
  ASSERT_TRUE(store_->PrepareTruncate(Id(1, 0), 3, 100, 1).ok());
  ASSERT_TRUE(store_->Commit(Id(1, 0), 3).ok());
  ASSERT_TRUE(store_->Prepare(Id(2, 7), 1, 0, "abc", false, 1).ok());
  ASSERT_TRUE(store_->Commit(Id(2, 7), 1).ok());
  EXPECT_EQ(usage(*store_), std::make_pair(uint64_t{2}, 2 * kB));
  // A version refused changes nothing.
  EXPECT_FALSE(store_->Prepare(Id(2, 7), 5, 0, "no", false, 1).ok());
  EXPECT_EQ(usage(*store_), std::make_pair(uint64_t{2}, 2 * kB));
  // Counted again from the records at open.
  store_.reset();
  auto again = ChunkStore::Open(dir_.File("target"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(usage(**again), std::make_pair(uint64_t{2}, 2 * kB));
  ASSERT_TRUE((*again)->Remove(Id(1, 0)).ok());
  ASSERT_TRUE((*again)->Remove(Id(1, 0)).ok());  // absent is fine, and not subtracted twice
  ASSERT_TRUE((*again)->Remove(Id(9, 9)).ok());
  EXPECT_EQ(usage(**again), std::make_pair(uint64_t{1}, kB));
}

}  // namespace
}  // namespace ff::fs3
