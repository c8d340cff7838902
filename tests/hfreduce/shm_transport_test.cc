// The shared-memory transport of point-to-point (transport/shm.h), both ends in this process on
// two threads: a byte stream that stays in order across the ring's wrap, with the ring copies and
// with direct reads, reads of any size against sends of any size; Shutdown ends blocked calls on
// both sides; what is not the transport's memory is refused.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "transport/shm.h"

namespace ff::hfreduce {
namespace {

using namespace std::chrono_literals;

struct Pair {
  std::unique_ptr<ShmConnection> a, b;  // a made the memory, b opened it
};

Pair Connect(std::size_t direct_bytes) {
  auto a = ShmConnection::Create(direct_bytes);
  EXPECT_TRUE(a.ok()) << a.status();
  auto b = ShmConnection::Open((*a)->path(), direct_bytes);
  EXPECT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE((*a)->Established().ok());
  return {std::move(*a), std::move(*b)};
}

uint8_t ByteAt(std::size_t i) {
  return static_cast<uint8_t>((i * 2654435761u) >> 13);
}

// 40 MiB (ten times the ring) in sends of random sizes, read in reads of other random sizes.
void StreamInOrder(Pair& p) {
  const std::size_t total = std::size_t{40} << 20;
  std::thread sender([&] {
    std::mt19937_64 rng(7);
    std::vector<uint8_t> buf;
    for (std::size_t sent = 0; sent < total;) {
      std::size_t n = std::min<std::size_t>(total - sent, 1 + rng() % (3 << 20));
      buf.resize(n);
      for (std::size_t i = 0; i < n; ++i)
        buf[i] = ByteAt(sent + i);
      ASSERT_TRUE(p.a->Send(buf.data(), n).ok());
      sent += n;
    }
  });
  std::mt19937_64 rng(11);
  std::vector<uint8_t> buf;
  for (std::size_t got = 0; got < total;) {
    std::size_t n = std::min<std::size_t>(total - got, 1 + rng() % (5 << 20));
    buf.assign(n, 0);
    ASSERT_TRUE(p.b->WaitReadable(std::chrono::steady_clock::now() + 10s).ok());
    ASSERT_TRUE(p.b->Recv(buf.data(), n).ok());
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(buf[i], ByteAt(got + i)) << "byte " << got + i;
    }
    got += n;
  }
  sender.join();
}

TEST(ShmTransportTest, BytesArriveInOrderThroughTheRing) {
  Pair p = Connect(0);
  EXPECT_FALSE(p.a->direct());
  StreamInOrder(p);
}

TEST(ShmTransportTest, BytesArriveInOrderWithDirectReads) {
  Pair p = Connect(64 << 10);  // sends of 64 KiB and more are read from the sender's buffer
  // (This process can always read its own memory.)
  EXPECT_TRUE(p.a->direct());
  EXPECT_TRUE(p.b->direct());
  StreamInOrder(p);
}

TEST(ShmTransportTest, BothDirectionsAtOnce) {
  Pair p = Connect(0);
  std::vector<uint8_t> out_a(6 << 20, 0xa5), out_b(6 << 20, 0x5a), in_a(6 << 20), in_b(6 << 20);
  // Each side sends more than the ring holds before it reads: the sends must not wait on each
  // other's reads forever (each direction has its own ring).
  std::thread t([&] {
    ASSERT_TRUE(p.b->Send(out_b.data(), out_b.size()).ok());
    ASSERT_TRUE(p.b->Recv(in_b.data(), in_b.size()).ok());
  });
  std::thread u([&] { ASSERT_TRUE(p.a->Recv(in_a.data(), in_a.size()).ok()); });
  ASSERT_TRUE(p.a->Send(out_a.data(), out_a.size()).ok());
  t.join();
  u.join();
  EXPECT_EQ(in_a, out_b);
  EXPECT_EQ(in_b, out_a);
}

TEST(ShmTransportTest, ShutdownEndsBlockedCallsAndDeliversWhatWasSent) {
  Pair p = Connect(0);
  const char hello[] = "hello";
  ASSERT_TRUE(p.a->Send(hello, sizeof hello).ok());
  // A receive of more than was sent blocks; the sender's Shutdown ends it.
  std::thread closer([&] {
    std::this_thread::sleep_for(100ms);
    p.a->Shutdown();
  });
  char got[sizeof hello] = {};
  ASSERT_TRUE(p.b->Recv(got, sizeof got).ok());  // sent before the shutdown: delivered
  EXPECT_STREQ(got, hello);
  Status st = p.b->Recv(got, 1);
  closer.join();
  EXPECT_EQ(st.code(), StatusCode::kAborted) << st;
  EXPECT_TRUE(p.b->PeerGone());
  // A send blocked on a full ring ends too, and later ones fail at once.
  Pair q = Connect(0);
  std::vector<char> big(8 << 20);
  std::thread shut([&] {
    std::this_thread::sleep_for(100ms);
    q.b->Shutdown();
  });
  st = q.a->Send(big.data(), big.size());
  shut.join();
  EXPECT_EQ(st.code(), StatusCode::kAborted) << st;
  EXPECT_EQ(q.a->Send(big.data(), 1).code(), StatusCode::kAborted);
}

TEST(ShmTransportTest, WaitReadableTimesOut) {
  Pair p = Connect(0);
  const auto start = std::chrono::steady_clock::now();
  Status st = p.b->WaitReadable(start + 150ms);
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st;
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_FALSE(p.b->PeerGone());
}

TEST(ShmTransportTest, WhatIsNotItsMemoryIsRefused) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("shm-transport-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "small") << "not shared memory";
  ASSERT_EQ(mkfifo((dir / "fifo").c_str(), 0600), 0);
  for (const char* name : {"small", "fifo", "missing"}) {
    auto c = ShmConnection::Open((dir / name).string(), 0);  // a FIFO must not block
    EXPECT_FALSE(c.ok()) << name;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ff::hfreduce
