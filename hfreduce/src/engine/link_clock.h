// The counters behind ProcessLinkTimes (hfreduce/communicator.h): one set per neighbouring node's
// label, process-wide, never freed, so a network thread holds a plain pointer to its edge's.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace ff::hfreduce {

struct LinkCounters {
  std::atomic<uint64_t> frames{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> wait_ns{0};
  std::atomic<uint64_t> move_ns{0};

  void Add(uint64_t payload, uint64_t wait, uint64_t move) {
    frames.fetch_add(1, std::memory_order_relaxed);
    bytes.fetch_add(payload, std::memory_order_relaxed);
    wait_ns.fetch_add(wait, std::memory_order_relaxed);
    move_ns.fetch_add(move, std::memory_order_relaxed);
  }
};

// The counters of the neighbour called `peer` (created on first use; stable for the process).
LinkCounters* LinkCountersOf(const std::string& peer);

}  // namespace ff::hfreduce
