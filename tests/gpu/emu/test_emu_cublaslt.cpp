// The cuBLASLt mock's own contract: it must refuse the calls the real library refuses (an
// alignment the preference did not promise, a GELU input leading dimension that is not a
// multiple of 8, a bias of another type, an attribute of the wrong size), or the emulated GPU op
// tests could pass on plans a GPU would reject. And the CUDA backend's answer to a refused GELU,
// GELU-gradient or bias-gradient epilogue: the unfused path, not an abort.
#include "catch_compat.h"

#include <cublasLt.h>

#include "gpu_test_util.h"

using namespace strata;
using namespace strata::gpu_test;

TEST_CASE("emulated cuBLASLt: refuses what cuBLASLt refuses") {
  Mirrored a({16, 16}, DType::F32), b({16, 16}, DType::F32), d({16 * 16 + 4}, DType::F32), bias({16}, DType::F32);
  a.randomize(1);
  b.randomize(2);
  cublasLtHandle_t handle = nullptr;
  REQUIRE(cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, 16, 16, 16) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const auto heuristic = [&] {
    return cublasLtMatmulAlgoGetHeuristic(handle, desc, layout, layout, layout, layout, pref, 1, &result, &found);
  };
  const auto set = [&](cublasLtMatmulDescAttributes_t attr, const auto& value) {
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)) == CUBLAS_STATUS_SUCCESS);
  };
  // The default preference promises 256-byte alignment: D one element in is refused at run time.
  REQUIRE(heuristic() == CUBLAS_STATUS_SUCCESS);
  const float alpha = 1.0f, beta = 0.0f;
  float* d_shifted = static_cast<float*>(d.gpu_tensor.data) + 1;
  CHECK(cublasLtMatmul(handle, desc, &alpha, a.gpu_tensor.data, layout, b.gpu_tensor.data, layout, &beta, d_shifted,
                       layout, d_shifted, layout, &result.algo, nullptr, 0, nullptr) == CUBLAS_STATUS_NOT_SUPPORTED);
  // A GELU input leading dimension that is not a multiple of 8, and a bias of another type.
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.gpu_tensor.data));
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(d.gpu_tensor.data));
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{20});
  CHECK(heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{16});
  CHECK(heuristic() == CUBLAS_STATUS_SUCCESS);
  set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF);
  CHECK(heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
  // The same holds for the bias gradient the BGRADA epilogue writes.
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BGRADA);
  CHECK(heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
  set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F);
  CHECK(heuristic() == CUBLAS_STATUS_SUCCESS);
  // An attribute of the wrong size.
  const int32_t narrow_ld = 16;
  CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &narrow_ld, sizeof(narrow_ld)) ==
        CUBLAS_STATUS_INVALID_VALUE);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(layout);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(handle);
}

TEST_CASE("emulated GPU: a GELU epilogue cuBLASLt does not offer runs as a bias GEMM and a GELU kernel") {
  // A shape no other test plans, so that the refusal is seen by a fresh plan.
  Mirrored x({40, 136}, DType::BF16), w({136, 264}, DType::BF16), bias({264}, DType::BF16);
  Mirrored pre({40, 264}, DType::BF16), out({40, 264}, DType::BF16);
  Mirrored pre_unfused({40, 264}, DType::BF16), out_unfused({40, 264}, DType::BF16);
  x.randomize(91);
  w.randomize(92, 0.05f);
  bias.randomize(93, 0.1f);
  mock_cublaslt_refuse_epilogue(CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  const size_t plans_before = gpu().gemm_plans_cached();
  CHECK_NOTHROW(gpu().linear_gelu_forward(out.gpu_tensor, pre.gpu_tensor, x.gpu_tensor, w.gpu_tensor, bias.gpu_tensor));
  // The refusal is remembered: a second call plans nothing new.
  const size_t plans_after = gpu().gemm_plans_cached();
  gpu().linear_gelu_forward(out.gpu_tensor, pre.gpu_tensor, x.gpu_tensor, w.gpu_tensor, bias.gpu_tensor);
  CHECK(gpu().gemm_plans_cached() == plans_after);
  CHECK(plans_after == plans_before + 2);  // the refused GELU plan and the bias GEMM's
  mock_cublaslt_refuse_epilogue(CUBLASLT_EPILOGUE_DEFAULT);
  gpu().matmul(pre_unfused.gpu_tensor, x.gpu_tensor, w.gpu_tensor, bias.gpu_tensor, false, false, false);
  gpu().gelu_forward(out_unfused.gpu_tensor, pre_unfused.gpu_tensor);
  CHECK(pre.gpu_bytes() == pre_unfused.gpu_bytes());
  CHECK(out.gpu_bytes() == out_unfused.gpu_bytes());
}

TEST_CASE("emulated GPU: a DGELU epilogue cuBLASLt does not offer runs as a GEMM and the GELU backward kernel") {
  Mirrored dout({40, 136}, DType::BF16), w({264, 136}, DType::BF16), pre({40, 264}, DType::BF16);
  Mirrored dpre({40, 264}, DType::BF16), dpre_unfused({40, 264}, DType::BF16);
  dout.randomize(94, 0.1f);
  w.randomize(95, 0.05f);
  pre.randomize(96, 2.0f);
  mock_cublaslt_refuse_epilogue(CUBLASLT_EPILOGUE_DGELU);
  CHECK_NOTHROW(gpu().matmul_dgelu(dpre.gpu_tensor, pre.gpu_tensor, dout.gpu_tensor, w.gpu_tensor, false, true));
  mock_cublaslt_refuse_epilogue(CUBLASLT_EPILOGUE_DEFAULT);
  gpu().matmul(dpre_unfused.gpu_tensor, dout.gpu_tensor, w.gpu_tensor, Tensor(), false, true, false);
  gpu().gelu_backward(dpre_unfused.gpu_tensor, dpre_unfused.gpu_tensor, pre.gpu_tensor);
  CHECK(dpre.gpu_bytes() == dpre_unfused.gpu_bytes());
  // The refusal is cached with the plan. A shape planned afresh gets the fused epilogue, which
  // rounds once: close to the unfused result, not the same bits.
  const auto rows = [](const Mirrored& m, int64_t n) {
    return Tensor(m.gpu_tensor.data, m.gpu_tensor.dtype, {n, m.gpu_tensor.dim(1)}, m.gpu_tensor.device);
  };
  Mirrored dpre_fused({40, 264}, DType::BF16);
  gpu().matmul_dgelu(rows(dpre_fused, 32), rows(pre, 32), rows(dout, 32), w.gpu_tensor, false, true);
  const std::vector<float> fused = dpre_fused.gpu_values(), unfused = dpre_unfused.gpu_values();
  const std::vector<float> fused_rows(fused.begin(), fused.begin() + 32 * 264);
  const std::vector<float> unfused_rows(unfused.begin(), unfused.begin() + 32 * 264);
  // The unfused path rounds the product before the GELU gradient, as a GELU input is rounded.
  check_ulps(fused_rows, unfused_rows, DType::BF16, kGeluEpilogueUlps, "fused against unfused dgelu");
  CHECK(fused_rows != unfused_rows);
}

TEST_CASE("emulated GPU: the MLP's GEMMs take the fused GELU, GELU-gradient and bias-gradient epilogues in bf16") {
  // GPT-2-like widths (C 64, 4C 256) whose plans the library (here, the mock) offers: nothing
  // may fall back, or the plumbing of the epilogue attributes is wrong.
  const int64_t N = 48, C = 64;
  Mirrored x({N, C}, DType::BF16), w_fc({C, 4 * C}, DType::BF16), b_fc({4 * C}, DType::BF16);
  Mirrored pre({N, 4 * C}, DType::BF16), h({N, 4 * C}, DType::BF16), dh({N, 4 * C}, DType::BF16);
  Mirrored w_proj({4 * C, C}, DType::BF16), dout({N, C}, DType::BF16), dx({N, C}, DType::BF16);
  Mirrored dw({4 * C, C}, DType::F32), db({C}, DType::F32), dw_fc({C, 4 * C}, DType::F32), db_fc({4 * C}, DType::F32);
  for (Mirrored* m : {&x, &w_fc, &b_fc, &w_proj, &dout}) m->randomize(97, 0.1f);
  const size_t unfused_before = gpu().unfused_epilogue_gemms();
  gpu().linear_gelu_forward(h.gpu_tensor, pre.gpu_tensor, x.gpu_tensor, w_fc.gpu_tensor, b_fc.gpu_tensor);
  gpu().linear_backward_gelu(dh.gpu_tensor, dw.gpu_tensor, db.gpu_tensor, dout.gpu_tensor, h.gpu_tensor,
                             w_proj.gpu_tensor, pre.gpu_tensor);
  gpu().linear_backward(dx.gpu_tensor, dw_fc.gpu_tensor, db_fc.gpu_tensor, dh.gpu_tensor, x.gpu_tensor,
                        w_fc.gpu_tensor);
  CHECK(gpu().unfused_epilogue_gemms() == unfused_before);
}

TEST_CASE("emulated GPU: a bias-gradient epilogue cuBLASLt does not offer runs as a GEMM and the column-sum kernel") {
  const int64_t N = 40, In = 136, Out = 264;  // shapes no other test plans
  Mirrored dout({N, Out}, DType::BF16), inp({N, In}, DType::BF16), w({In, Out}, DType::BF16);
  Mirrored dw({In, Out}, DType::F32), db({Out}, DType::F32), dw_unfused({In, Out}, DType::F32);
  Mirrored db_unfused({Out}, DType::F32);
  dout.randomize(111, 0.1f);
  inp.randomize(112);
  for (Mirrored* g : {&dw, &dw_unfused}) g->randomize(113, 0.01f);
  for (Mirrored* g : {&db, &db_unfused}) g->randomize(114, 0.01f);
  mock_cublaslt_refuse_epilogue(CUBLASLT_EPILOGUE_BGRADA);
  const size_t unfused_before = gpu().unfused_epilogue_gemms();
  CHECK_NOTHROW(gpu().linear_backward(Tensor(), dw.gpu_tensor, db.gpu_tensor, dout.gpu_tensor, inp.gpu_tensor,
                                      w.gpu_tensor));
  CHECK(gpu().unfused_epilogue_gemms() == unfused_before + 1);
  mock_cublaslt_refuse_epilogue(CUBLASLT_EPILOGUE_DEFAULT);
  gpu().matmul(dw_unfused.gpu_tensor, inp.gpu_tensor, dout.gpu_tensor, Tensor(), true, false, true);
  gpu().bias_backward(db_unfused.gpu_tensor, dout.gpu_tensor);
  CHECK(dw.gpu_bytes() == dw_unfused.gpu_bytes());
  CHECK(db.gpu_bytes() == db_unfused.gpu_bytes());
  // A shape planned afresh takes the epilogue: the same sums, accumulated into dbias.
  const auto rows = [](const Mirrored& m, int64_t n) {
    return Tensor(m.gpu_tensor.data, m.gpu_tensor.dtype, {n, m.gpu_tensor.dim(1)}, m.gpu_tensor.device);
  };
  Mirrored dw_fused({In, Out}, DType::F32), db_fused({Out}, DType::F32);
  Mirrored dw_rows({In, Out}, DType::F32), db_rows({Out}, DType::F32);
  for (Mirrored* g : {&dw_fused, &dw_rows}) g->randomize(115, 0.01f);
  for (Mirrored* g : {&db_fused, &db_rows}) g->randomize(116, 0.01f);
  gpu().linear_backward(Tensor(), dw_fused.gpu_tensor, db_fused.gpu_tensor, rows(dout, 32), rows(inp, 32),
                        w.gpu_tensor);
  CHECK(gpu().unfused_epilogue_gemms() == unfused_before + 1);
  gpu().matmul(dw_rows.gpu_tensor, rows(inp, 32), rows(dout, 32), Tensor(), true, false, true);
  gpu().bias_backward(db_rows.gpu_tensor, rows(dout, 32));
  check_relative(dw_fused.gpu_values(), dw_rows.gpu_values(), 1e-6, "fused against unfused dweight");
  check_relative(db_fused.gpu_values(), db_rows.gpu_values(), 1e-6, "fused against unfused dbias");
}

TEST_CASE("emulated GPU: a GEMM accumulating in bf16 fails the GEMM bound the GPU tests hold bf16 outputs to") {
  // The GPU matmul test's operand scales at GPT-2's inner dimension, on fewer rows.
  for (DType dtype : {DType::BF16, DType::F16}) {
    const int64_t m = 64, n = 256, k = 768;
    Mirrored a({m, k}, dtype), b({k, n}, dtype), out({m, n}, dtype);
    a.randomize(121);
    b.randomize(122, 0.05f);
    cpu().matmul(out.cpu_tensor, a.cpu_tensor, b.cpu_tensor, Tensor(), false, false, false);
    const std::vector<float> expected = out.cpu_values();
    gpu().matmul(out.gpu_tensor, a.gpu_tensor, b.gpu_tensor, Tensor(), false, false, false);
    const std::string what = std::string("matmul ") + dtype_name(dtype);
    check_ulps(out.gpu_values(), expected, dtype, kGemmUlps, what);
    mock_cublaslt_accumulate_in_output_type(true);
    gpu().matmul(out.gpu_tensor, a.gpu_tensor, b.gpu_tensor, Tensor(), false, false, false);
    mock_cublaslt_accumulate_in_output_type(false);
    const test::UlpError wrong = test::worst_ulp_error(out.gpu_values(), expected, dtype);
    INFO(what << " accumulated in its own type: worst " << wrong.worst << " ulps (bound " << kGemmUlps << ")");
    CHECK(wrong.worst > kGemmUlps);
  }
}
