#include "shm/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace ff::hfreduce {
namespace {

long Futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* timeout) {
  // Not FUTEX_PRIVATE: the word is shared between processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, timeout, nullptr, 0);
}

}  // namespace

void Doorbell::Ring() {
  value.fetch_add(1, std::memory_order_acq_rel);
  if (waiters.load(std::memory_order_acquire) > 0) Futex(&value, FUTEX_WAKE, INT_MAX, nullptr);
}

void Doorbell::Wait(uint32_t seen, std::chrono::microseconds timeout) {
  waiters.fetch_add(1, std::memory_order_acq_rel);
  if (value.load(std::memory_order_acquire) == seen) {
    timespec ts;
    ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000);
    ts.tv_nsec = static_cast<long>((timeout.count() % 1000000) * 1000);
    Futex(&value, FUTEX_WAIT, seen, &ts);
  }
  waiters.fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace ff::hfreduce
