// Copies between a caller's buffer and the node's shared memory. Host buffers use memcpy; where
// built with CUDA (FF_WITH_CUDA), device buffers are detected and copied with cudaMemcpyAsync on
// the copying thread's own stream into the (registered) shared memory.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace ff::hfreduce {

// True when `p` is CUDA device memory (always false without CUDA).
bool IsDevicePointer(const void* p);

// Registers [p, p + n) as pinned host memory with CUDA so device copies run at full speed
// (no-op without CUDA or without a device). Unregister before unmapping.
void RegisterHostMemory(void* p, std::size_t n);
void UnregisterHostMemory(void* p);

// dst <- src; `device` says which side is device memory (the caller's buffer).
Status CopyToHost(void* host_dst, const void* src, std::size_t n, bool src_on_device);
Status CopyFromHost(void* dst, const void* host_src, std::size_t n, bool dst_on_device);

}  // namespace ff::hfreduce
