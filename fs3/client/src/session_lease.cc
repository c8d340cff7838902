#include "fs3/session_lease.h"

#include <spdlog/spdlog.h>

#include <random>
#include <vector>

namespace ff::fs3 {

namespace {

uint64_t NewClientNumber() {
  std::random_device rd;
  uint64_t n = 0;
  while (n == 0)
    n = (uint64_t{rd()} << 32) | rd();
  return n;
}

}  // namespace

SessionLease::SessionLease(MetaClient* meta) : meta_(meta) {
  {
    MutexLock lock(&mu_);
    client_ = NewClientNumber();
  }
  thread_ = std::thread([this] { Loop(); });
  closer_ = std::thread([this] { CloseLoop(); });
}

SessionLease::~SessionLease() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  closer_.join();  // what EndSoon queued is sent first, under the lease
  thread_.join();
}

OpenedSession SessionLease::Open(uint64_t ino) {
  UniqueLock lock(&mu_);
  cv_.wait_for(lock, std::chrono::seconds(5), [&] {
    mu_.AssertHeld();
    return settled_ || stopping_;
  });
  const uint64_t client = settled_ ? client_ : 0;
  const uint64_t handle = ++next_handle_;
  open_[handle] = Held{ino, client};
  return {client, handle};
}

void SessionLease::Refresh() {
  UniqueLock lock(&mu_);
  const uint64_t start = rounds_;
  refresh_ = true;
  cv_.notify_all();
  cv_.wait_for(lock, std::chrono::seconds(5), [&] {
    mu_.AssertHeld();
    return stopping_ || (!refresh_ && rounds_ > start);
  });
}

void SessionLease::Bind(uint64_t handle, uint64_t ino) {
  MutexLock lock(&mu_);
  if (auto it = open_.find(handle); it != open_.end()) it->second.ino = ino;
}

OpenedSession SessionLease::Closing(uint64_t handle) {
  MutexLock lock(&mu_);
  auto it = open_.find(handle);
  if (it == open_.end()) return {client_, handle};  // gone: closing names no session
  OpenedSession s{it->second.client, handle};
  open_.erase(it);
  return s;
}

void SessionLease::Reopen(uint64_t client) {
  std::vector<std::pair<uint64_t, uint64_t>> held;  // handle, ino
  {
    MutexLock lock(&mu_);
    for (auto& [handle, h] : open_) {
      if (h.client != 0 && h.ino != 0) held.emplace_back(handle, h.ino);
    }
  }
  std::size_t reopened = 0;
  for (const auto& [handle, ino] : held) {
    fs3rpc::InoRequest r;
    r.set_ino(ino);
    r.set_client(client);
    r.set_handle(handle);
    fs3rpc::Inode out;
    if (meta_->Open(r, &out).ok()) ++reopened;
    MutexLock lock(&mu_);
    if (auto it = open_.find(handle); it != open_.end()) it->second.client = client;
  }
  if (!held.empty()) {
    spdlog::warn("fs3: this client's lease had expired; {} of {} open files' sessions opened again",
                 reopened, held.size());
  }
}

Status SessionLease::End(uint64_t handle, fs3rpc::CloseRequest& close) {
  const OpenedSession s = Closing(handle);
  close.set_client(s.client);
  close.set_handle(s.handle);
  return CloseOne(close);
}

namespace {
// fs3-meta was not reached (the close may be sent again), rather than answering.
bool Unreached(const Status& st) {
  return st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded;
}
}  // namespace

Status SessionLease::CloseOne(const fs3rpc::CloseRequest& close) {
  fs3rpc::Empty out;
  Status st = meta_->Close(close, &out);
  // The session would stay open at fs3-meta as long as this client lives (an unlinked file's data
  // kept, the length not settled).
  if (Unreached(st)) {
    spdlog::warn("fs3: inode {}: close not taken ({}); sent again once fs3-meta answers",
                 close.ino(), st.ToString());
    CloseLater(close);
  }
  return st;
}

void SessionLease::EndSoon(uint64_t handle, fs3rpc::CloseRequest close) {
  const OpenedSession s = Closing(handle);
  close.set_client(s.client);
  close.set_handle(s.handle);
  if (s.client == 0) {  // an anonymous session is a count: closed once, in order
    SendCloses({std::move(close)});
    return;
  }
  {
    MutexLock lock(&mu_);
    soon_.push_back(std::move(close));
  }
  cv_.notify_all();
}

void SessionLease::CloseLoop() {
  UniqueLock lock(&mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      mu_.AssertHeld();
      return !soon_.empty() || stopping_;
    });
    if (soon_.empty()) return;  // stopping, and everything sent
    // The others that come meanwhile go in the same call (each close would otherwise be a call
    // of its own, fs3-meta's CPU and this client's, on a busy mount most of what a create costs
    // beyond its own two calls).
    cv_.wait_for(lock, kCloseGathering, [&] {
      mu_.AssertHeld();
      return stopping_ || soon_.size() >= kMaxCloseBatch;
    });
    std::vector<fs3rpc::CloseRequest> batch;
    batch.swap(soon_);
    lock.unlock();
    SendCloses(std::move(batch));
    lock.lock();
  }
}

void SessionLease::SendCloses(std::vector<fs3rpc::CloseRequest> batch) {
  bool many = false;
  {
    MutexLock lock(&mu_);
    // A session opened under a lease that expired since ended with it (registering again opened
    // the files still open under the new number): nothing to close.
    std::erase_if(batch, [&](const fs3rpc::CloseRequest& c) {
      mu_.AssertHeld();
      return c.client() != 0 && c.client() != client_;
    });
    many = batch.size() > 1 && !no_close_many_;
  }
  if (many) {
    fs3rpc::CloseBatch r;
    for (fs3rpc::CloseRequest& close : batch)
      *r.add_closes() = std::move(close);
    fs3rpc::Empty out;
    const Status st = meta_->CloseMany(r, &out);
    const bool predates_close_many = st.code() == StatusCode::kUnimplemented;
    if (predates_close_many) {  // an older fs3-meta: one Close each, from now on
      MutexLock lock(&mu_);
      no_close_many_ = true;
      batch.assign(r.closes().begin(), r.closes().end());
    } else {
      if (Unreached(st)) {
        spdlog::warn("fs3: {} closes not taken ({}); sent again once fs3-meta answers",
                     r.closes_size(), st.ToString());
        for (const fs3rpc::CloseRequest& close : r.closes())
          CloseLater(close);
      } else if (!st.ok()) {
        spdlog::warn("fs3: a close of {} failed: {}", r.closes_size(), st.ToString());
      }
      return;
    }
  }
  for (const fs3rpc::CloseRequest& close : batch)
    (void)CloseOne(close);  // a failure is logged or kept for later there
}

void SessionLease::CloseLater(const fs3rpc::CloseRequest& close) {
  MutexLock lock(&mu_);
  closes_.push_back(close);
}

void SessionLease::SendPendingCloses(uint64_t client) {
  std::vector<fs3rpc::CloseRequest> pending;
  {
    MutexLock lock(&mu_);
    pending.swap(closes_);
  }
  std::vector<fs3rpc::CloseRequest> again;
  for (fs3rpc::CloseRequest& close : pending) {
    if (close.client() != 0 && close.client() != client) continue;  // ended with its lease
    fs3rpc::Empty out;
    Status st = meta_->Close(close, &out);
    if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded) {
      again.push_back(std::move(close));
    } else if (!st.ok()) {
      spdlog::warn("fs3: closing inode {} again: {}", close.ino(), st.ToString());
    }
  }
  MutexLock lock(&mu_);
  for (fs3rpc::CloseRequest& close : again)
    closes_.push_back(std::move(close));
}

void SessionLease::Loop() {
  bool first = true;
  bool reopen = false;
  for (;;) {
    fs3rpc::ClientRequest r;
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
      r.set_client(client_);
      refresh_ = false;  // this round answers it
    }
    r.set_first(first);
    fs3rpc::ClientReply reply;
    Status st = meta_->KeepClient(r, &reply);
    std::chrono::milliseconds pause(1000);
    if (st.ok()) {
      first = false;
      if (reopen) {
        Reopen(r.client());
        reopen = false;
      }
      {
        MutexLock lock(&mu_);
        settled_ = true;
      }
      SendPendingCloses(r.client());
      pause = std::chrono::milliseconds(std::max<uint32_t>(reply.lease_s(), 1) * 1000 / 3);
    } else if (st.code() == StatusCode::kNotFound) {  // our lease expired: a new number
      MutexLock lock(&mu_);
      client_ = NewClientNumber();
      settled_ = false;  // opens wait for the registration (and the sessions reopened)
      first = true;
      reopen = true;
      continue;
    } else if (st.code() == StatusCode::kUnimplemented) {  // an fs3-meta without leases
      {
        MutexLock lock(&mu_);
        settled_ = true;
        client_ = 0;
        ++rounds_;
      }
      cv_.notify_all();
      return;
    } else if (!first) {
      spdlog::warn("fs3: renewing this client's lease: {}", st.message());
    }
    UniqueLock lock(&mu_);
    ++rounds_;
    cv_.notify_all();
    cv_.wait_for(lock, pause, [&] {
      mu_.AssertHeld();
      return stopping_ || refresh_;
    });
    if (stopping_) return;
  }
}

}  // namespace ff::fs3
