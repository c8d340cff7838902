// The rendezvous store over real gRPC on loopback.
#include "hfreduce/store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

namespace ff::hfreduce {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = StoreServer::Start("127.0.0.1:0");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = std::make_unique<StoreClient>(server_->address(), 5s);
  }
  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<StoreClient> client_;
};

TEST_F(StoreTest, SetThenGet) {
  ASSERT_TRUE(client_->Set("a", "1").ok());
  ASSERT_TRUE(client_->Set("a", "2").ok());  // overwrite
  auto v = client_->Get("a", 1s);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "2");
}

TEST_F(StoreTest, GetWaitsForAKeySetLater) {
  std::thread setter([&] {
    std::this_thread::sleep_for(200ms);
    StoreClient other(server_->address(), 5s);
    ASSERT_TRUE(other.Set("late", "here").ok());
  });
  auto v = client_->Get(std::vector<std::string>{"late"}, 10s);
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->front(), "here");
}

TEST_F(StoreTest, GetTimesOutNamingTheMissingKeys) {
  ASSERT_TRUE(client_->Set("present", "x").ok());
  auto start = std::chrono::steady_clock::now();
  auto v = client_->Get(std::vector<std::string>{"present", "rank/3", "rank/5"}, 300ms);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(v.status().message(), HasSubstr("keys not set in time: rank/3, rank/5"));
  // An answer from the server, not retried until the client's own deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST_F(StoreTest, AddCountsAndRejectsNonIntegers) {
  EXPECT_EQ(*client_->Add("joined", 1), 1);
  EXPECT_EQ(*client_->Add("joined", 1), 2);
  EXPECT_EQ(*client_->Add("joined", -2), 0);
  ASSERT_TRUE(client_->Set("text", "abc").ok());
  auto bad = client_->Add("text", 1);
  EXPECT_EQ(bad.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(*client_->Get("text", 1s), "abc");  // unchanged
}

TEST_F(StoreTest, BadKeysAndValuesAreRefused) {
  EXPECT_EQ(client_->Set("", "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Set(std::string(2000, 'k'), "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Set("big", std::string((1 << 20) + 1, 'v')).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(client_->Get("big", 100ms).ok());  // nothing was stored
}

TEST(StoreClientTest, WaitsForAServerThatStartsLate) {
  // Ranks may start before rank 0 serves the store.
  auto probe = StoreServer::Start("127.0.0.1:0");
  ASSERT_TRUE(probe.ok());
  std::string address = (*probe)->address();
  probe->reset();
  std::unique_ptr<StoreServer> late;
  std::thread starter([&] {
    std::this_thread::sleep_for(500ms);
    auto s = StoreServer::Start(address);
    ASSERT_TRUE(s.ok()) << s.status();
    late = std::move(*s);
  });
  StoreClient client(address, 10s);
  Status st = client.Set("k", "v");
  starter.join();
  EXPECT_TRUE(st.ok()) << st;
}

TEST(StoreClientTest, NoServerIsAClearErrorAfterTheTimeout) {
  StoreClient client("127.0.0.1:1", 500ms);
  Status st = client.Set("k", "v");
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("hfreduce store 127.0.0.1:1 Set"));
}

}  // namespace
}  // namespace ff::hfreduce
