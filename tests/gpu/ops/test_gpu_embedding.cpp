// The embedding backward on text-like ids — one token far more frequent than the rest, so its
// row's run in the sorted order spans many pieces and piece groups — against the CPU backend:
// bit for bit under the piece order every backend shares (backend.h, kEmbeddingGradPiece), for
// fp32 and bf16 gradients, whole-table and vocabulary-slice.
#include "catch_compat.h"

#include <vector>

#include "gpu_test_util.h"

using namespace strata;
using namespace strata::gpu_test;

namespace {

constexpr int kVocab = 1000;  // the table's rows in every case, whole or sliced

// B·T ids: every third position holds `frequent`, the others spread over [0, vocab).
std::vector<int32_t> text_like_ids(int64_t count, int32_t vocab, int32_t frequent) {
  std::vector<int32_t> ids(static_cast<size_t>(count));
  uint64_t state = 12345;
  for (auto& id : ids) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    id = (state >> 33) % 3 == 0 ? frequent : static_cast<int32_t>((state >> 40) % static_cast<uint64_t>(vocab));
  }
  return ids;
}

struct EmbeddingGrads {
  Mirrored tokens, dout, dwte, dwpe;
  EmbeddingGrads(int64_t B, int64_t T, int64_t V, int64_t C, DType dout_type, DType grad_type)
      : tokens({B, T}, DType::I32), dout({B, T, C}, dout_type), dwte({V, C}, grad_type), dwpe({T, C}, grad_type) {
    tokens.set_ints(text_like_ids(B * T, static_cast<int32_t>(V), 17));
    dout.randomize(301);
    dwte.randomize(302);
    dwpe.randomize(303);
  }
};

}  // namespace

TEST_CASE("gpu: embedding backward of a frequent token spread over many pieces equals the CPU bit for bit") {
  // 2048 positions: the frequent token's ~680 span 11 piece groups. C 96: one partial column
  // group per thread; C 1600 (GPT-2 XL) with bf16 dout: two column groups, the second partial.
  struct Case {
    int64_t C;
    DType dout_type;
  };
  for (const Case& c : {Case{96, DType::F32}, Case{1600, DType::BF16}}) {
    INFO("C = " << c.C << ", dout " << dtype_name(c.dout_type));
    EmbeddingGrads g(4, 512, kVocab, c.C, c.dout_type, DType::F32);
    cpu().embedding_backward(g.dwte.cpu_tensor, g.dwpe.cpu_tensor, g.dout.cpu_tensor, g.tokens.cpu_tensor, 0, kVocab);
    gpu().embedding_backward(g.dwte.gpu_tensor, g.dwpe.gpu_tensor, g.dout.gpu_tensor, g.tokens.gpu_tensor, 0, kVocab);
    CHECK(g.dwte.gpu_values() == g.dwte.cpu_values());
    CHECK(g.dwpe.gpu_values() == g.dwpe.cpu_values());
  }
}

TEST_CASE("gpu: the vocab-parallel embedding backward of text-like ids equals the CPU bit for bit") {
  // Rows [400, 900) of a 1000-row table: the frequent id 17 is outside, so the slice's sort holds
  // only the others; then [0, 500), which holds it.
  for (int64_t start : {int64_t{400}, int64_t{0}}) {
    INFO("slice from row " << start);
    EmbeddingGrads g(4, 512, 500, 64, DType::F32, DType::F32);
    g.tokens.set_ints(text_like_ids(4 * 512, kVocab, 17));
    cpu().embedding_backward(g.dwte.cpu_tensor, g.dwpe.cpu_tensor, g.dout.cpu_tensor, g.tokens.cpu_tensor, start,
                             kVocab);
    gpu().embedding_backward(g.dwte.gpu_tensor, g.dwpe.gpu_tensor, g.dout.gpu_tensor, g.tokens.gpu_tensor, start,
                             kVocab);
    CHECK(g.dwte.gpu_values() == g.dwte.cpu_values());
    CHECK(g.dwpe.gpu_values() == g.dwpe.cpu_values());
  }
}
