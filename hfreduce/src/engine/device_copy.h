// Copies between a caller's buffer and the node's shared memory. Host buffers use memcpy; where
// built with CUDA (FF_WITH_CUDA), device buffers are detected and copied with cudaMemcpyAsync,
// on the caller's stream when one is given (else on the copying thread's own stream), into and
// out of the registered shared memory. A copy in is ordered after the work already queued on the
// stream; a copy out is queued on the stream, so later work on it sees the result. Each call
// returns once its own copy is done (an event, not a stream synchronize), since the shared-memory
// slot is handed on at that point.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace ff::hfreduce {

// The CUDA device holding `p`, or -1 for host memory (always -1 without CUDA).
int DeviceOf(const void* p);
inline bool IsDevicePointer(const void* p) {
  return DeviceOf(p) >= 0;
}

// Registers [p, p + n) as pinned host memory with CUDA so device copies run at full speed
// (no-op without CUDA or without a device). Unregister before unmapping.
void RegisterHostMemory(void* p, std::size_t n);
void UnregisterHostMemory(void* p);

// dst <- src. `device` is DeviceOf() the caller's buffer (-1: host memory); `stream` a
// cudaStream_t or null.
Status CopyToHost(void* host_dst, const void* src, std::size_t n, int device,
                  void* stream = nullptr);
Status CopyFromHost(void* dst, const void* host_src, std::size_t n, int device,
                    void* stream = nullptr);

}  // namespace ff::hfreduce
