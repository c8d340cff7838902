// Waiting across processes on a shared-memory word: a futex-backed "doorbell".
//
// Publishers change shared state, then Ring(); waiters loop { read Value(); check their
// condition; Wait(old value, timeout) }. Wait returns on a ring, on timeout, or spuriously, so
// callers always recheck. The word lives in a MAP_SHARED mapping and works across processes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ff::hfreduce {

struct Doorbell {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> waiters{0};

  uint32_t Value() const { return value.load(std::memory_order_acquire); }
  // Wakes every waiter. Cheap (no syscall) when nobody waits.
  void Ring();
  // Sleeps while value == seen, for at most `timeout`.
  void Wait(uint32_t seen, std::chrono::microseconds timeout);
};

static_assert(std::atomic<uint32_t>::is_always_lock_free);

}  // namespace ff::hfreduce
