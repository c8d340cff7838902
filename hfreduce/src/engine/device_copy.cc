#include "engine/device_copy.h"

#include <cstring>
#include <map>
#include <string>

#ifdef FF_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ff::hfreduce {

#ifdef FF_WITH_CUDA
namespace {

bool CudaUsable() {
  static const bool usable = [] {
    int devices = 0;
    return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  }();
  return usable;
}

// The copying thread's own stream and completion event, per device. The stream is a blocking one
// (not cudaStreamNonBlocking): it waits for the work already queued on the legacy default
// stream, so a caller that named no stream still has its earlier cudaMemcpy (which may return
// before its DMA lands) and kernels ordered before our copy in. Found on an H100: a
// non-blocking stream read the buffer before the caller's cudaMemcpy had landed.
struct ThreadCuda {
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
};

ThreadCuda& ForDevice(int device) {
  thread_local std::map<int, ThreadCuda> per_device;
  ThreadCuda& t = per_device[device];
  if (t.done == nullptr) {
    cudaStreamCreateWithFlags(&t.stream, cudaStreamDefault);
    cudaEventCreateWithFlags(&t.done, cudaEventDisableTiming);
  }
  return t;
}

Status CudaCopy(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind, int device,
                void* caller_stream) {
  cudaError_t err = cudaSetDevice(device);
  ThreadCuda& t = ForDevice(device);
  cudaStream_t stream = caller_stream ? static_cast<cudaStream_t>(caller_stream) : t.stream;
  if (err == cudaSuccess) err = cudaMemcpyAsync(dst, src, n, kind, stream);
  // Wait for this copy only: later work the caller queues on its stream is not ours to wait for.
  if (err == cudaSuccess) err = cudaEventRecord(t.done, stream);
  if (err == cudaSuccess) err = cudaEventSynchronize(t.done);
  if (err != cudaSuccess) {
    return Internal(std::string("hfreduce: CUDA copy failed: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

}  // namespace

int DeviceOf(const void* p) {
  if (p == nullptr || !CudaUsable()) return -1;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of an unknown host pointer
    return -1;
  }
  bool device = attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
  return device ? attr.device : -1;
}

void RegisterHostMemory(void* p, std::size_t n) {
  if (CudaUsable() && cudaHostRegister(p, n, cudaHostRegisterPortable) != cudaSuccess) {
    cudaGetLastError();  // pinning is an optimisation; pageable copies still work
  }
}

void UnregisterHostMemory(void* p) {
  if (CudaUsable() && cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

Status CopyToHost(void* host_dst, const void* src, std::size_t n, int device, void* stream) {
  if (device >= 0) return CudaCopy(host_dst, src, n, cudaMemcpyDeviceToHost, device, stream);
  std::memcpy(host_dst, src, n);
  return Status::Ok();
}

Status CopyFromHost(void* dst, const void* host_src, std::size_t n, int device, void* stream) {
  if (device >= 0) return CudaCopy(dst, host_src, n, cudaMemcpyHostToDevice, device, stream);
  std::memcpy(dst, host_src, n);
  return Status::Ok();
}

#else  // no CUDA: every buffer is host memory

int DeviceOf(const void*) {
  return -1;
}
void RegisterHostMemory(void*, std::size_t) {}
void UnregisterHostMemory(void*) {}

Status CopyToHost(void* host_dst, const void* src, std::size_t n, int, void*) {
  std::memcpy(host_dst, src, n);
  return Status::Ok();
}

Status CopyFromHost(void* dst, const void* host_src, std::size_t n, int, void*) {
  std::memcpy(dst, host_src, n);
  return Status::Ok();
}

#endif

}  // namespace ff::hfreduce
