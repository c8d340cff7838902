#include "engine/device_copy.h"

#include <cstring>
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

cudaStream_t ThreadStream() {
  thread_local cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    return s;
  }();
  return stream;
}

Status CudaCopy(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind) {
  cudaStream_t stream = ThreadStream();
  cudaError_t err = cudaMemcpyAsync(dst, src, n, kind, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) {
    return Internal(std::string("hfreduce: CUDA copy failed: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

}  // namespace

bool IsDevicePointer(const void* p) {
  if (p == nullptr || !CudaUsable()) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of an unknown host pointer
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

void RegisterHostMemory(void* p, std::size_t n) {
  if (CudaUsable() && cudaHostRegister(p, n, cudaHostRegisterPortable) != cudaSuccess) {
    cudaGetLastError();  // pinning is an optimisation; pageable copies still work
  }
}

void UnregisterHostMemory(void* p) {
  if (CudaUsable() && cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

Status CopyToHost(void* host_dst, const void* src, std::size_t n, bool src_on_device) {
  if (src_on_device) return CudaCopy(host_dst, src, n, cudaMemcpyDeviceToHost);
  std::memcpy(host_dst, src, n);
  return Status::Ok();
}

Status CopyFromHost(void* dst, const void* host_src, std::size_t n, bool dst_on_device) {
  if (dst_on_device) return CudaCopy(dst, host_src, n, cudaMemcpyHostToDevice);
  std::memcpy(dst, host_src, n);
  return Status::Ok();
}

#else  // no CUDA: every buffer is host memory

bool IsDevicePointer(const void*) {
  return false;
}
void RegisterHostMemory(void*, std::size_t) {}
void UnregisterHostMemory(void*) {}

Status CopyToHost(void* host_dst, const void* src, std::size_t n, bool) {
  std::memcpy(host_dst, src, n);
  return Status::Ok();
}

Status CopyFromHost(void* dst, const void* host_src, std::size_t n, bool) {
  std::memcpy(dst, host_src, n);
  return Status::Ok();
}

#endif

}  // namespace ff::hfreduce
