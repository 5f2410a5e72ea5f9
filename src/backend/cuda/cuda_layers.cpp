// CUDA backend, part 2: the GEMM-shaped layers — matmul (cuBLASLt, with the GELU, GELU-gradient
// and bias-gradient epilogues), bias and layernorm gradients (deterministic column reductions),
// flash attention and the fused cross-entropy.
#ifdef STRATA_HAVE_CUDA
#include <cstring>

#include "attention.cuh"
#include "backend/cuda/cublaslt_gemm.h"
#include "backend/cuda/cuda_args.h"
#include "backend/cuda/cuda_backend.h"
#include "cross_entropy.cuh"
#include "elementwise.cuh"
#include "embedding.cuh"
#include "layernorm.cuh"
#include "reduce.cuh"

namespace strata::cuda {

void CudaBackend::matmul(Tensor out, Tensor a, Tensor b, Tensor bias, bool trans_a, bool trans_b, bool accumulate) {
  const char* op = "matmul";
  require_device(op, {&out, &a, &b, &bias});
  const GemmProblem p = make_gemm_problem(op, out, a, b, bias, trans_a, trans_b, accumulate);
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) {  // an empty product: out is bias (plus out when accumulating)
    if (bias.defined()) {
      CUDA_CHECK(add_row_bias(out.data, p.out_type, bias.data, p.out_type, p.m, p.n, accumulate, stream_));
    } else if (!accumulate) {
      CUDA_CHECK(cudaMemsetAsync(out.data, 0, out.bytes(), stream_));
    }
    return;
  }
  GemmPointers ptrs;
  ptrs.a = a.data;
  ptrs.b = b.data;
  ptrs.out = out.data;
  ptrs.bias = bias.data;
  gemm_->run(p, ptrs);
}

// A GEMM with one of the GELU epilogues, whose GELU input pre_gelu has out's shape and dtype.
void CudaBackend::gelu_epilogue_gemm(const char* op, GemmEpilogue epilogue, Tensor out, Tensor pre_gelu, Tensor a,
                                     Tensor b, Tensor bias, bool trans_a, bool trans_b) {
  require_device(op, {&out, &pre_gelu, &a, &b, &bias});
  require(pre_gelu.defined(), op, "pre_gelu is required");
  GemmProblem p = make_gemm_problem(op, out, a, b, bias, trans_a, trans_b, false);
  require(pre_gelu.dtype == out.dtype && pre_gelu.numel() == out.numel(), op,
          "pre_gelu " + pre_gelu.shape_string() + " must match out " + out.shape_string());
  require(p.k > 0, op, "the inner dimension is empty");
  if (p.m == 0 || p.n == 0) return;
  p.epilogue = epilogue;
  GemmPointers ptrs;
  ptrs.a = a.data;
  ptrs.b = b.data;
  ptrs.out = out.data;
  ptrs.bias = bias.data;
  ptrs.pre_gelu = pre_gelu.data;
  gemm_->run(p, ptrs);
}

void CudaBackend::matmul_gelu(Tensor out, Tensor pre_gelu, Tensor a, Tensor b, Tensor bias, bool trans_a,
                              bool trans_b) {
  require(bias.defined(), "matmul_gelu", "bias is required");
  gelu_epilogue_gemm("matmul_gelu", GemmEpilogue::GeluBias, out, pre_gelu, a, b, bias, trans_a, trans_b);
}

void CudaBackend::matmul_dgelu(Tensor out, Tensor pre_gelu, Tensor a, Tensor b, bool trans_a, bool trans_b) {
  gelu_epilogue_gemm("matmul_dgelu", GemmEpilogue::DGelu, out, pre_gelu, a, b, Tensor(), trans_a, trans_b);
}

void CudaBackend::linear_gelu_forward(Tensor out, Tensor pre, Tensor inp, Tensor weight, Tensor bias) {
  if (out.dtype == DType::F32 || !bias.defined()) {
    Backend::linear_gelu_forward(out, pre, inp, weight, bias);
    return;
  }
  matmul_gelu(out, pre, inp, weight, bias, false, false);
}

void CudaBackend::linear_backward_gelu(Tensor dpre, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                       Tensor weight, Tensor pre) {
  if (dpre.dtype == DType::F32) {
    Backend::linear_backward_gelu(dpre, dweight, dbias, dout, inp, weight, pre);
    return;
  }
  matmul_dgelu(dpre, pre, dout, weight, false, /*trans_b=*/true);
  linear_backward(Tensor(), dweight, dbias, dout, inp, weight);
}

void CudaBackend::linear_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight) {
  const char* op = "linear_backward";
  const bool fusable = dbias.defined() && dout.dtype != DType::F32 && dbias.dtype == dweight.dtype;
  if (!fusable) {
    Backend::linear_backward(dinp, dweight, dbias, dout, inp, weight);
    return;
  }
  require_device(op, {&dinp, &dweight, &dbias, &dout, &inp, &weight});
  if (dinp.defined()) matmul(dinp, dout, weight, Tensor(), false, /*trans_b=*/true, false);
  GemmProblem p = make_gemm_problem(op, dweight, inp, dout, Tensor(), /*trans_a=*/true, false, /*accumulate=*/true);
  require(dbias.numel() == p.n, op, "dbias " + dbias.shape_string() + " for dout " + dout.shape_string());
  if (p.m == 0 || p.n == 0) return;
  if (p.k > 0) {
    // The epilogue overwrites its vector, and dbias accumulates: the sums land in scratch first.
    Tensor column_sums(scratch(dbias.bytes()), dbias.dtype, {p.n}, Device::CUDA);
    p.epilogue = GemmEpilogue::BiasGrad;
    GemmPointers ptrs;
    ptrs.a = inp.data;
    ptrs.b = dout.data;
    ptrs.out = dweight.data;
    ptrs.bias_grad = column_sums.data;
    if (gemm_->run_if_offered(p, ptrs)) {
      add(dbias, dbias, column_sums);
      return;
    }
  }
  matmul(dweight, inp, dout, Tensor(), /*trans_a=*/true, false, /*accumulate=*/true);
  bias_backward(dbias, dout);
}

void CudaBackend::bias_backward(Tensor dbias, Tensor dout) {
  const char* op = "bias_backward";
  require_device(op, {&dbias, &dout});
  const int64_t n = cols_of(dout), m = rows_of(dout);
  require(dbias.numel() == n, op, "dbias " + dbias.shape_string() + " for dout " + dout.shape_string());
  auto* partials = static_cast<double*>(scratch(column_reduce_workspace_bytes(m, n, 1)));
  CUDA_CHECK(cuda::bias_backward(dbias.data, elem_type_of(dbias, op, "dbias"), dout.data, elem_type_of(dout, op, "dout"),
                                 m, n, partials, stream_));
}

void CudaBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias) {
  const char* op = "layernorm_forward";
  require_device(op, {&out, &mean, &rstd, &inp, &weight, &bias});
  const int64_t n = rows_of(inp), c = cols_of(inp);
  require(out.numel() == inp.numel() && weight.numel() == c && bias.numel() == c, op,
          "out " + out.shape_string() + ", inp " + inp.shape_string() + ", weight " + weight.shape_string() +
              ", bias " + bias.shape_string());
  require((!mean.defined() || mean.numel() == n) && (!rstd.defined() || rstd.numel() == n), op,
          "mean/rstd must have " + std::to_string(n) + " elements");
  const ElemType type = common_elem_type(op, {&inp, &out, &weight, &bias});
  CUDA_CHECK(cuda::layernorm_forward(out.data, f32_or_null(mean, op, "mean"), f32_or_null(rstd, op, "rstd"), inp.data,
                                     weight.data, bias.data, type, n, c, stream_));
}

void CudaBackend::residual_layernorm_forward(Tensor residual, Tensor out, Tensor mean, Tensor rstd, Tensor a, Tensor b,
                                             Tensor weight, Tensor bias) {
  const char* op = "residual_layernorm_forward";
  require_device(op, {&residual, &out, &mean, &rstd, &a, &b, &weight, &bias});
  const int64_t n = rows_of(residual), c = cols_of(residual);
  require(a.numel() == residual.numel() && b.numel() == residual.numel() && out.numel() == residual.numel() &&
              weight.numel() == c && bias.numel() == c,
          op, "residual " + residual.shape_string() + ", a " + a.shape_string() + ", b " + b.shape_string() +
                  ", out " + out.shape_string() + ", weight " + weight.shape_string());
  require((!mean.defined() || mean.numel() == n) && (!rstd.defined() || rstd.numel() == n), op,
          "mean/rstd must have " + std::to_string(n) + " elements");
  const ElemType type = common_elem_type(op, {&residual, &out, &a, &b, &weight, &bias});
  CUDA_CHECK(cuda::residual_layernorm_forward(residual.data, out.data, f32_or_null(mean, op, "mean"),
                                              f32_or_null(rstd, op, "rstd"), a.data, b.data, weight.data, bias.data,
                                              type, n, c, stream_));
}

void CudaBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                                     Tensor mean, Tensor rstd) {
  const char* op = "layernorm_backward";
  require_device(op, {&dinp, &dweight, &dbias, &dout, &inp, &weight, &mean, &rstd});
  const int64_t n = rows_of(inp), c = cols_of(inp);
  require(dinp.numel() == inp.numel() && dout.numel() == inp.numel() && weight.numel() == c && dweight.numel() == c &&
              dbias.numel() == c && mean.numel() == n && rstd.numel() == n,
          op, "dinp " + dinp.shape_string() + ", dout " + dout.shape_string() + ", inp " + inp.shape_string());
  const ElemType type = common_elem_type(op, {&inp, &dinp, &dout, &weight});
  const float* mean_f = f32_or_null(mean, op, "mean");
  const float* rstd_f = f32_or_null(rstd, op, "rstd");
  require(mean_f && rstd_f, op, "mean and rstd are required");
  auto* partials = static_cast<double*>(scratch(layernorm_backward_workspace_bytes(n, c)));
  CUDA_CHECK(cuda::layernorm_backward(dinp.data, dweight.data, elem_type_of(dweight, op, "dweight"), dbias.data,
                                      elem_type_of(dbias, op, "dbias"), dout.data, inp.data, weight.data, mean_f, rstd_f,
                                      type, n, c, partials, stream_));
}

void CudaBackend::attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_head) {
  const char* op = "attention_forward";
  require_device(op, {&out, &lse, &qkv});
  const AttentionShape s = attention_shape(op, qkv, n_head);
  require(out.numel() == s.batch * s.seq * s.channels && lse.numel() == s.batch * s.heads * s.seq, op,
          "out " + out.shape_string() + " / lse " + lse.shape_string() + " for qkv " + qkv.shape_string());
  const ElemType type = common_elem_type(op, {&qkv, &out});
  float* lse_f = f32_or_null(lse, op, "lse");
  require(lse_f != nullptr, op, "lse is required");
  CUDA_CHECK(cuda::attention_forward(out.data, lse_f, qkv.data, type, s.batch, s.seq, s.heads, s.head_dim,
                                     attention_bf16_operands_, stream_));
}

void CudaBackend::attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_head) {
  const char* op = "attention_backward";
  require_device(op, {&dqkv, &dout, &qkv, &out, &lse});
  const AttentionShape s = attention_shape(op, qkv, n_head);
  require(dqkv.numel() == qkv.numel() && dout.numel() == s.batch * s.seq * s.channels && out.numel() == dout.numel() &&
              lse.numel() == s.batch * s.heads * s.seq,
          op, "dqkv " + dqkv.shape_string() + ", dout " + dout.shape_string() + ", lse " + lse.shape_string());
  const ElemType type = common_elem_type(op, {&qkv, &dqkv, &dout, &out});
  const float* lse_f = f32_or_null(lse, op, "lse");
  require(lse_f != nullptr, op, "lse is required");
  auto* delta = static_cast<float*>(scratch(attention_backward_workspace_bytes(s.batch, s.heads, s.seq)));
  CUDA_CHECK(cuda::attention_backward(dqkv.data, dout.data, qkv.data, out.data, lse_f, type, s.batch, s.seq, s.heads,
                                      s.head_dim, attention_bf16_operands_, delta, stream_));
}

void CudaBackend::softmax_cross_entropy(Tensor logits, Tensor losses, Tensor targets, int vocab_size,
                                        bool write_dlogits, float dloss) {
  const char* op = "softmax_cross_entropy";
  require_device(op, {&logits, &losses});
  const int64_t n = rows_of(logits), vp = cols_of(logits), V = vocab_size;
  require(V > 0 && V <= vp, op, "vocab_size " + std::to_string(V) + " for " + std::to_string(vp) + " logit columns");
  require(targets.dtype == DType::I32 && targets.numel() == n, op,
          "targets must be I32 with " + std::to_string(n) + " elements, got " + targets.shape_string());
  require(!losses.defined() || losses.numel() == n, op, "losses " + losses.shape_string());
  const ElemType type = elem_type_of(logits, op, "logits");
  const ElemType losses_type = losses.defined() ? elem_type_of(losses, op, "losses") : ElemType::F32;
  const int32_t* ids = targets.as<int32_t>();
  if (targets.device == Device::CPU) {
    for (int64_t i = 0; i < n; ++i)
      if (ids[i] < 0 || ids[i] >= V) throw_target_error(ids[i], i, V);
    auto* staged = static_cast<int32_t*>(scratch(targets.bytes()));
    upload_ids(staged, ids, targets.bytes());
    ids = staged;
  }
  // Host targets were checked above; device targets by the kernel, read at the next wait.
  BadIdFlag* bad_id = targets.device == Device::CPU ? nullptr : id_flag(/*targets=*/true, n, V);
  CUDA_CHECK(cuda::softmax_cross_entropy(logits.data, type, losses.data, losses_type, ids, n, vp, V, write_dlogits,
                                         dloss, bad_id, stream_));
}

}  // namespace strata::cuda
#endif  // STRATA_HAVE_CUDA
