// A ChunkTransport that passes chunk transfers to a real one (gRPC by default), with faults a test
// arms: a transfer refused before it is sent, one whose answer is lost after the far side applied
// it, one held back for a while, one abandoned (the caller told it failed while it goes on). The
// storage client and the storage services take it through their transport parameter, so a test can
// break one hop of a chain without killing a process.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "fs3/transport.h"

namespace ff::test {

class FaultyTransport final : public fs3::ChunkTransport {
 public:
  explicit FaultyTransport(
      std::shared_ptr<fs3::ChunkTransport> inner = std::make_shared<fs3::GrpcTransport>())
      : inner_(std::move(inner)) {}
  ~FaultyTransport() override {
    std::vector<std::thread> sending;
    {
      std::lock_guard lock(mu_);
      sending.swap(abandoned_);
    }
    for (std::thread& t : sending)
      t.join();
  }

  // The next `n` writes fail with `status` and are not sent.
  void FailWrites(int n, Status status = Unavailable("injected: connection refused")) {
    std::lock_guard lock(mu_);
    fail_writes_ = n;
    fail_status_ = std::move(status);
  }
  // The next `n` writes are sent and applied, and their answers lost: the caller sees UNAVAILABLE.
  void LoseWriteAnswers(int n) {
    std::lock_guard lock(mu_);
    lose_answers_ = n;
  }
  // The next `n` writes wait `delay` before they are sent.
  void DelayWrites(int n, std::chrono::milliseconds delay) {
    std::lock_guard lock(mu_);
    delay_writes_ = n;
    delay_ = delay;
  }
  // The next `n` writes are sent, and their callers told at once that the connection broke
  // (UNAVAILABLE) while the far side goes on with them: what a client sees when a connection
  // resets after its request went out.
  void AbandonWrites(int n) {
    std::lock_guard lock(mu_);
    abandon_writes_ = n;
  }
  // The next `n` reads fail with UNAVAILABLE and are not sent.
  void FailReads(int n) {
    std::lock_guard lock(mu_);
    fail_reads_ = n;
  }
  int writes_sent() const {
    std::lock_guard lock(mu_);
    return writes_sent_;
  }
  int faults() const {
    std::lock_guard lock(mu_);
    return faults_;
  }

  Status Write(const std::string& address, const fs3rpc::WriteRequest& req,
               fs3rpc::WriteResponse* resp, std::chrono::milliseconds deadline) override {
    bool lose = false;
    std::chrono::milliseconds delay{0};
    {
      std::lock_guard lock(mu_);
      if (fail_writes_ > 0) {
        --fail_writes_;
        ++faults_;
        return fail_status_;
      }
      if (delay_writes_ > 0) {
        --delay_writes_;
        ++faults_;
        delay = delay_;
      }
      if (lose_answers_ > 0) {
        --lose_answers_;
        ++faults_;
        lose = true;
      }
      ++writes_sent_;
      if (abandon_writes_ > 0) {
        --abandon_writes_;
        ++faults_;
        abandoned_.emplace_back([inner = inner_, address, req, deadline] {
          fs3rpc::WriteResponse ignored;
          (void)inner->Write(address, req, &ignored, deadline);
        });
        return Unavailable("injected: the connection broke after the request was sent");
      }
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    Status st = inner_->Write(address, req, resp, deadline);
    if (lose && st.ok()) return Unavailable("injected: the answer was lost");
    return st;
  }

  Status Read(const std::string& address, const fs3rpc::ReadRequest& req,
              fs3rpc::ReadResponse* resp, std::chrono::milliseconds deadline) override {
    {
      std::lock_guard lock(mu_);
      if (fail_reads_ > 0) {
        --fail_reads_;
        ++faults_;
        return Unavailable("injected: connection refused");
      }
    }
    return inner_->Read(address, req, resp, deadline);
  }

 private:
  const std::shared_ptr<fs3::ChunkTransport> inner_;
  mutable std::mutex mu_;
  int fail_writes_ = 0, lose_answers_ = 0, delay_writes_ = 0, fail_reads_ = 0, abandon_writes_ = 0;
  std::vector<std::thread> abandoned_;  // writes still going on after their caller was told
  Status fail_status_ = Status::Ok();
  std::chrono::milliseconds delay_{0};
  int writes_sent_ = 0, faults_ = 0;
};

}  // namespace ff::test
