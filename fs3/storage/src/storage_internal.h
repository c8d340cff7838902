// Inside fs3-storage, shared by the files that implement StorageService (storage_service.cc:
// options, lifecycle, membership (routing, heartbeats, leases), reads and queries;
// storage_write.cc: the chain write; storage_resync.cc: resync of a successor).
#pragma once

#include <random>
#include <string>

#include "storage_service.h"

namespace ff::fs3 {
namespace storage_detail {

using Clock = std::chrono::steady_clock;

inline Status Stale(uint32_t chain, uint64_t have, uint64_t got) {
  return Status(StatusCode::kAborted, "stale chain version: chain " + std::to_string(chain) +
                                          " is at v" + std::to_string(have) +
                                          ", the request has v" + std::to_string(got));
}

inline uint64_t RandomId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

}  // namespace storage_detail

using namespace storage_detail;

}  // namespace ff::fs3
