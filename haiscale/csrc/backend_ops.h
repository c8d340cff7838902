// Helpers shared by the files of the hfreduce backend's operations (hfreduce_backend.cc holds
// their definitions; backend_reductions.cc and backend_movement.cc the operations). Internal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hfreduce_backend.h"

namespace ff::haiscale::detail {

namespace hf = ff::hfreduce;

// User tags of send/recv are non-negative ints; collectives built from point-to-point messages
// use tags with the top bit set.
constexpr uint32_t kCollectiveTagBit = 0x80000000u;

std::string TypeName(const at::Tensor& t);
// The HFReduce element type a reduction of `t` runs in (bool travels as uint8); raises for types
// no reduction takes.
hf::DataType ReductionType(const at::Tensor& t, const char* op);

// What a torch ReduceOp becomes: an HFReduce op, and for PREMUL_SUM the factor applied first.
struct Reduction {
  hf::ReduceOp op = hf::ReduceOp::kSum;
  bool premul = false;
  double factor = 1.0;
  at::Tensor tensor_factor;
  void Scale(at::Tensor& t) const;  // multiplies by the PREMUL_SUM factor, if any
};
Reduction ReductionOf(const c10d::ReduceOp& reduce_op, const at::Tensor& t, const char* what);

// The one-line errors of refused input, naming the op: a sparse (any non-strided) tensor; more
// or fewer than one tensor; types that differ.
void CheckDense(const at::Tensor& t, const char* op);
void CheckSingle(const std::vector<at::Tensor>& tensors, const char* op);
void CheckSameType(const at::Tensor& a, const at::Tensor& b, const char* op);
std::size_t Bytes(const at::Tensor& t);

// A tensor the communicator can work on in place, or a contiguous host copy of it. CUDA tensors
// go to HFReduce's CUDA path directly where this extension is built against a CUDA torch and
// HFReduce with CUDA (FF_TORCH_CUDA); elsewhere through the host copy.
#ifdef FF_TORCH_CUDA
constexpr bool kCudaPath = true;
#else
constexpr bool kCudaPath = false;
#endif

struct Stager {
  static bool Direct(const at::Tensor& t) {
    return t.is_contiguous() && (t.device().is_cpu() || (kCudaPath && t.device().is_cuda()));
  }
  // copy_in: the communicator reads the tensor; copy_out: it writes the result back.
  template <typename Staged>
  static Staged Stage(const at::Tensor& t, bool copy_in, bool copy_out) {
    if (Direct(t)) return Staged{t, t, false};
    at::Tensor buf = copy_in ? t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true,
                                    at::MemoryFormat::Contiguous)
                             : at::empty(t.sizes(), t.options().device(at::kCPU));
    return Staged{t, buf, copy_out};
  }
};

}  // namespace ff::haiscale::detail
