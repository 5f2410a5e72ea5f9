// Host-side logic of the CUDA backend, tested without a GPU: the row-major → column-major GEMM
// mapping (checked by running the mapped problem through a naive column-major GEMM), GEMM
// argument checks and plan keys, launch shapes and workspace sizes, and the AdamW scalars.
#include "catch_compat.h"

#include <cmath>
#include <unordered_set>
#include <vector>

#include "attention.cuh"
#include "backend/backend.h"
#include "backend/cuda/cublaslt_gemm.h"
#include "backend/cuda/cuda_args.h"
#include "embedding.cuh"
#include "layernorm.cuh"
#include "reduce.cuh"

using namespace strata;
using namespace strata::cuda;

namespace {

// Column-major D (m × n, ld m) = op(A) · op(B), the BLAS definition cuBLASLt follows.
std::vector<double> column_major_gemm(const ColumnMajorGemm& g, const std::vector<double>& A,
                                      const std::vector<double>& B) {
  std::vector<double> D(g.m * g.n, 0.0);
  auto a_at = [&](uint64_t i, uint64_t l) {  // op(A)[i][l]
    return g.trans_first ? A[l + i * static_cast<uint64_t>(g.first_ld)] : A[i + l * static_cast<uint64_t>(g.first_ld)];
  };
  auto b_at = [&](uint64_t l, uint64_t j) {  // op(B)[l][j]
    return g.trans_second ? B[j + l * static_cast<uint64_t>(g.second_ld)] : B[l + j * static_cast<uint64_t>(g.second_ld)];
  };
  for (uint64_t i = 0; i < g.m; ++i)
    for (uint64_t j = 0; j < g.n; ++j)
      for (uint64_t l = 0; l < g.k; ++l) D[i + j * g.m] += a_at(i, l) * b_at(l, j);
  return D;
}

std::vector<double> sequence(size_t n, double start) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + 0.37 * static_cast<double>(i % 11) - 0.11 * static_cast<double>(i % 7);
  return v;
}

Tensor shaped(DType dtype, std::initializer_list<int64_t> dims, Device device = Device::CUDA) {
  static float dummy[4];
  return Tensor(dummy, dtype, dims, device);
}

}  // namespace

TEST_CASE("the column-major view of a row-major GEMM computes the same product for every transpose") {
  const int64_t m = 5, n = 4, k = 3;
  for (int variant = 0; variant < 4; ++variant) {
    GemmProblem p;
    p.m = m, p.n = n, p.k = k;
    p.trans_a = variant & 1;
    p.trans_b = variant & 2;
    const std::vector<double> a = sequence(static_cast<size_t>(m * k), 0.5);  // (m, k) or (k, m) row-major
    const std::vector<double> b = sequence(static_cast<size_t>(k * n), -0.25);
    std::vector<double> expected(static_cast<size_t>(m * n), 0.0);  // row-major (m, n)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t l = 0; l < k; ++l) {
          const double av = p.trans_a ? a[static_cast<size_t>(l * m + i)] : a[static_cast<size_t>(i * k + l)];
          const double bv = p.trans_b ? b[static_cast<size_t>(j * k + l)] : b[static_cast<size_t>(l * n + j)];
          expected[static_cast<size_t>(i * n + j)] += av * bv;
        }
    const ColumnMajorGemm g = column_major_view(p);
    CHECK(g.m == static_cast<uint64_t>(n));
    CHECK(g.n == static_cast<uint64_t>(m));
    CHECK(g.first_rows * g.first_cols == static_cast<uint64_t>(k * n));
    CHECK(g.second_rows * g.second_cols == static_cast<uint64_t>(m * k));
    // The same memory, read column-major: D's storage is exactly the row-major (m, n) result.
    const std::vector<double> got = column_major_gemm(g, b, a);
    for (size_t i = 0; i < expected.size(); ++i) CHECK(got[i] == Approx(expected[i]).epsilon(1e-12));
  }
}

TEST_CASE("make_gemm_problem reads shapes like the CPU backend and rejects bad shapes and dtype mixes") {
  const Tensor a = shaped(DType::BF16, {2, 3, 8}), w = shaped(DType::BF16, {8, 16});
  const GemmProblem p = make_gemm_problem("matmul", shaped(DType::BF16, {6, 16}), a, w, shaped(DType::BF16, {16}),
                                          false, false, false);
  CHECK(p.m == 6);
  CHECK(p.n == 16);
  CHECK(p.k == 8);
  CHECK(p.epilogue == GemmEpilogue::Bias);
  CHECK(p.ab_type == ElemType::BF16);
  // dweight (8, 16) F32 += inpᵀ (8 × 6) · dout (6, 16), both BF16: the fp32 gradient buffer case.
  const GemmProblem dw = make_gemm_problem("matmul", shaped(DType::F32, {8, 16}), shaped(DType::BF16, {6, 8}),
                                           shaped(DType::BF16, {6, 16}), Tensor(), true, false, true);
  CHECK(dw.m == 8);
  CHECK(dw.k == 6);
  CHECK(dw.out_type == ElemType::F32);
  CHECK(dw.epilogue == GemmEpilogue::None);
  CHECK_THROWS_AS(make_gemm_problem("matmul", shaped(DType::BF16, {5, 16}), a, w, Tensor(), false, false, false),
                  std::invalid_argument);
  CHECK_THROWS_AS(make_gemm_problem("matmul", shaped(DType::BF16, {6, 16}), a, shaped(DType::F32, {8, 16}), Tensor(),
                                    false, false, false),
                  std::invalid_argument);
  CHECK_THROWS_AS(make_gemm_problem("matmul", shaped(DType::F16, {6, 16}), a, w, Tensor(), false, false, false),
                  std::invalid_argument);
  CHECK_THROWS_AS(make_gemm_problem("matmul", shaped(DType::BF16, {6, 16}), a, w, shaped(DType::F32, {16}), false,
                                    false, false),
                  std::invalid_argument);
}

TEST_CASE("GEMM plan keys separate every field that changes the cuBLASLt plan") {
  GemmKey base;
  base.problem.m = 64, base.problem.n = 128, base.problem.k = 32;
  base.align_a = base.align_b = base.align_out = 16;
  std::vector<GemmKey> variants(11, base);
  variants[1].problem.m = 65;
  variants[2].problem.n = 127;
  variants[3].problem.k = 33;
  variants[4].problem.trans_a = true;
  variants[5].problem.trans_b = true;
  variants[6].problem.accumulate = true;
  variants[7].problem.ab_type = ElemType::BF16;
  variants[8].problem.epilogue = GemmEpilogue::Bias;
  variants[9].tf32 = true;
  variants[10].align_out = 4;
  std::unordered_set<GemmKey, GemmKeyHash> keys(variants.begin(), variants.end());
  CHECK(keys.size() == variants.size());
  GemmKey same = base;
  CHECK(same == base);
  CHECK(GemmKeyHash()(same) == GemmKeyHash()(base));
  CHECK(keys.count(same) == 1);
}

TEST_CASE("alignment classes cap at 16 bytes") {
  alignas(256) static char buffer[64];
  CHECK(alignment_class(buffer) == 16);
  CHECK(alignment_class(buffer + 8) == 8);
  CHECK(alignment_class(buffer + 4) == 4);
  CHECK(alignment_class(buffer + 2) == 2);
  CHECK(alignment_class(buffer + 1) == 1);
  CHECK(alignment_class(buffer + 48) == 16);
}

TEST_CASE("column reduction shapes cover every row exactly once and depend only on the shape") {
  for (int64_t rows : {0, 1, 7, 31, 32, 33, 100, 4096, 8192, 16384, 100003}) {
    for (int64_t cols : {1, 31, 32, 33, 768, 2304, 50304}) {
      const ColumnReduceShape s = column_reduce_shape(rows, cols);
      CHECK(s.col_tiles * kColumnTile >= cols);
      CHECK((s.col_tiles - 1) * kColumnTile < cols);
      CHECK(s.chunks >= 1);
      CHECK(s.chunks <= 65535);
      if (rows > 0) {
        CHECK(s.chunks * s.rows_per_chunk >= rows);            // all rows covered
        CHECK((s.chunks - 1) * s.rows_per_chunk < rows);       // no empty chunk
        CHECK((s.chunks == 1 || s.rows_per_chunk >= kColumnMinRowsPerChunk));
      }
      CHECK(column_reduce_workspace_bytes(rows, cols, 2) == static_cast<size_t>(s.chunks * cols * 2) * sizeof(double));
    }
  }
}

TEST_CASE("elementwise and reduction grids stay within their limits") {
  CHECK(elementwise_blocks(0) == 1);
  CHECK(elementwise_blocks(1) == 1);
  CHECK(elementwise_blocks(kElementwiseThreads + 1) == 2);
  CHECK(elementwise_blocks(int64_t{1} << 40) == kElementwiseMaxBlocks);
  CHECK(sum_squares_blocks(1) == 1);
  CHECK(sum_squares_blocks(int64_t{1} << 40) == kSumSquaresMaxBlocks);
  CHECK(sum_squares_workspace_bytes(124000000) == static_cast<size_t>(kSumSquaresMaxBlocks) * sizeof(double));
  CHECK(layernorm_blocks(8192) == 8192 / kLayerNormRowsPerBlock);
  CHECK(layernorm_blocks(9) == 2);
  CHECK(pack_width(ElemType::F32) == 4);
  CHECK(pack_width(ElemType::BF16) == 8);
}

TEST_CASE("attention launch shapes: head dims, shared memory budgets and tiles") {
  for (int64_t d : {16, 32, 48, 64, 80, 96, 112, 128}) CHECK(attention_head_dim_supported(d));
  for (int64_t d : {0, 8, 24, 65, 144, 256}) CHECK_FALSE(attention_head_dim_supported(d));
  CHECK(attention_dim_class(48) == 64);
  CHECK(attention_dim_class(64) == 64);
  CHECK(attention_dim_class(80) == 128);
  constexpr size_t kHopperSmemPerBlock = 227 * 1024;
  for (int dim_class : {64, 128}) {
    CHECK(attention_forward_smem_bytes(dim_class) <= kHopperSmemPerBlock);
    CHECK(attention_dkdv_smem_bytes(dim_class) <= kHopperSmemPerBlock);
    CHECK(attention_dq_smem_bytes(dim_class) <= kHopperSmemPerBlock);
  }
  // Padded strides keep the 16 threads of a row strip on distinct banks.
  CHECK(attention_row_stride(64) % 32 == 1);
  CHECK(attention_row_stride(128) % 32 == 1);
  CHECK((4 * kAttentionScoreStride) % 32 == 16);
  CHECK(attention_tiles(64) == 1);
  CHECK(attention_tiles(65) == 2);
  CHECK(attention_tiles(1024) == 16);
  CHECK(attention_backward_workspace_bytes(8, 12, 1024) == size_t{8} * 12 * 1024 * 4);
}

TEST_CASE("attention takes the tensor-core kernels exactly for aligned bf16/fp16 at head dims 64 and 128") {
  for (ElemType type : {ElemType::BF16, ElemType::F16}) {
    for (int64_t d : {64, 128}) {
      CHECK(attention_uses_tensor_cores(type, d, true));
      CHECK_FALSE(attention_uses_tensor_cores(type, d, false));  // misaligned tensors keep the fp32 kernels
    }
    for (int64_t d : {16, 32, 48, 80, 96, 112}) CHECK_FALSE(attention_uses_tensor_cores(type, d, true));
  }
  for (int64_t d : {64, 128}) CHECK_FALSE(attention_uses_tensor_cores(ElemType::F32, d, true));
}

TEST_CASE("attention_shape checks qkv and the head split") {
  static float dummy[4];
  const AttentionShape s = attention_shape("attention_forward", Tensor(dummy, DType::BF16, {4, 1024, 3 * 768}), 12);
  CHECK(s.batch == 4);
  CHECK(s.seq == 1024);
  CHECK(s.channels == 768);
  CHECK(s.head_dim == 64);
  CHECK_THROWS_AS(attention_shape("a", Tensor(dummy, DType::F32, {4, 16, 100}), 2), std::invalid_argument);
  CHECK_THROWS_AS(attention_shape("a", Tensor(dummy, DType::F32, {4, 16, 3 * 96}), 5), std::invalid_argument);
  CHECK_THROWS_AS(attention_shape("a", Tensor(dummy, DType::F32, {4, 16, 3 * 400}), 2), std::invalid_argument);  // hd 200
}

TEST_CASE("embedding sort bits cover the bad-id marker") {
  CHECK(embedding_sort_bits(1) == 1);
  CHECK(embedding_sort_bits(255) == 8);
  CHECK(embedding_sort_bits(256) == 9);
  CHECK(embedding_sort_bits(50304) == 16);
  CHECK(embedding_sort_bits(65535) == 16);
  CHECK(embedding_sort_bits(65536) == 17);
  for (int64_t v : {1, 2, 100, 50257, 65536, 200000}) CHECK((int64_t{1} << embedding_sort_bits(v)) > v);
}

TEST_CASE("AdamW scalars round exactly as the CPU backend's") {
  AdamWArgs args;
  args.lr = 6e-4;
  args.weight_decay = 0.1;
  args.beta1 = 0.9;
  args.beta2 = 0.95;
  args.eps = 1e-8;
  args.bias_correction1 = 1 - std::pow(0.9, 3);
  args.bias_correction2 = 1 - std::pow(0.95, 3);
  args.grad_scale = 0.5;
  const AdamWScalars s = adamw_scalars(args);
  CHECK(s.decay == static_cast<float>(1.0 - 6e-4 * 0.1));
  CHECK(s.one_minus_beta2 == static_cast<float>(1.0 - 0.95));
  CHECK(s.one_minus_beta2 != 1.0f - static_cast<float>(0.95));  // derived in double, then rounded
  CHECK(s.step_size == static_cast<float>(6e-4 / args.bias_correction1));
  CHECK(s.bc2_sqrt == static_cast<float>(std::sqrt(args.bias_correction2)));
  CHECK(s.grad_scale == 0.5f);
  CHECK(s.decoupled);
}

TEST_CASE("argument helpers map dtypes and reject host tensors and integer data") {
  static float dummy[4];
  const Tensor f(dummy, DType::F32, {2, 2}, Device::CUDA), b(dummy, DType::BF16, {2, 2}, Device::CUDA);
  const Tensor host(dummy, DType::F32, {2, 2}, Device::CPU), ints(dummy, DType::I32, {2, 2}, Device::CUDA);
  CHECK(elem_type_of(b, "op", "x") == ElemType::BF16);
  CHECK_THROWS_AS(elem_type_of(ints, "op", "x"), std::invalid_argument);
  CHECK(common_elem_type("op", {&f, &f}) == ElemType::F32);
  CHECK_THROWS_AS(common_elem_type("op", {&f, &b}), std::invalid_argument);
  CHECK_NOTHROW(require_device("op", {&f, &b}));
  CHECK_THROWS_AS(require_device("op", {&f, &host}), std::invalid_argument);
  CHECK(f32_or_null(Tensor(), "op", "x") == nullptr);
  CHECK_THROWS_AS(f32_or_null(b, "op", "x"), std::invalid_argument);
  CHECK(rows_of(Tensor(dummy, DType::F32, {2, 3, 4})) == 6);
  CHECK(cols_of(Tensor(dummy, DType::F32, {2, 3, 4})) == 4);
}

TEST_CASE("GEMM plan keys separate the GELU aux alignment and the GELU epilogue needs n divisible by 8") {
  GemmKey base;
  base.problem.m = 64, base.problem.n = 3072, base.problem.k = 768;
  base.problem.epilogue = GemmEpilogue::GeluBias;
  base.align_a = base.align_b = base.align_out = base.align_bias = base.align_aux = 16;
  GemmKey misaligned = base;
  misaligned.align_aux = 2;
  CHECK_FALSE(misaligned == base);
  const std::unordered_set<GemmKey, GemmKeyHash> keys{base, misaligned};
  CHECK(keys.size() == 2);

  CHECK(gelu_epilogue_fusable(base.problem));
  GemmProblem odd = base.problem;
  odd.n = 100;
  CHECK_FALSE(gelu_epilogue_fusable(odd));
}

TEST_CASE("the head sizes the trainer's start-up check accepts are the attention launchers' own") {
  for (int64_t head_dim = -1; head_dim <= 512; ++head_dim) {
    INFO("head_dim " << head_dim);
    CHECK(strata::cuda_attention_head_dim_supported(head_dim) == attention_head_dim_supported(head_dim));
  }
}
