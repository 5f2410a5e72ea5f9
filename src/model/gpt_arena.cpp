// The GPT model's activation arena: one allocation planned once for (max_batch, seq_len), this
// rank's tensor-parallel widths and the recompute mode, with byte counts by what each slot
// holds (per layer, shared recompute scratch, other) for the memory report and for estimates
// before anything is allocated; and the views of it at the current batch.
#include <algorithm>
#include <string>

#include "model/model.h"
#include "tensor_parallel/tensor_parallel.h"

namespace strata {
namespace {

enum class Slot { Layers, Shared, Other };

// Sequential byte-offset planner (256-byte aligned slots) that counts bytes per Slot kind.
class ArenaPlan {
 public:
  size_t reserve(size_t bytes, Slot kind) {
    const size_t offset = size_;
    const size_t aligned = (bytes + 255) / 256 * 256;
    size_ += aligned;
    by_kind_[static_cast<int>(kind)] += aligned;
    return offset;
  }
  size_t size() const { return size_; }
  size_t bytes(Slot kind) const { return by_kind_[static_cast<int>(kind)]; }

 private:
  size_t size_ = 0;
  size_t by_kind_[3] = {0, 0, 0};
};

int64_t round_up_to(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// Bytes of one block's saved activations: rows of the residual width (this rank's rows under
// SP), of the attention and MLP widths (all rows), and fp32 row statistics.
struct BlockBytes {
  size_t local_c, attn, lse, mlp, local_f32;
};

// One block's saved activations; without the attention output and its lse under selective
// recomputation (one shared copy serves every block).
GptArenaLayout::Block reserve_block(ArenaPlan& plan, const BlockBytes& s, Slot kind, bool selective) {
  GptArenaLayout::Block b{};
  b.ln1 = plan.reserve(s.local_c, kind);
  b.ln1_mean = plan.reserve(s.local_f32, kind);
  b.ln1_rstd = plan.reserve(s.local_f32, kind);
  b.qkv = plan.reserve(3 * s.attn, kind);
  if (!selective) {
    b.atty = plan.reserve(s.attn, kind);
    b.lse = plan.reserve(s.lse, kind);
  }
  b.x_mid = plan.reserve(s.local_c, kind);
  b.ln2 = plan.reserve(s.local_c, kind);
  b.ln2_mean = plan.reserve(s.local_f32, kind);
  b.ln2_rstd = plan.reserve(s.local_f32, kind);
  b.fch = plan.reserve(s.mlp, kind);
  b.fch_gelu = plan.reserve(s.mlp, kind);
  return b;
}

}  // namespace

int Gpt::tp_size() const { return tp_->size(); }
int Gpt::tp_rank() const { return tp_->rank(); }
bool Gpt::tp_active() const { return tp_->active(); }
bool Gpt::sequence_parallel() const { return tp_->sequence_parallel(); }

Gpt::Batch Gpt::batch_of(int B, int T) const {
  Batch b;
  b.B = B;
  b.T = T;
  b.rows = int64_t{B} * T;
  b.padded = sequence_parallel() ? round_up_to(b.rows, tp_size()) : b.rows;
  b.local = sequence_parallel() ? b.padded / tp_size() : b.rows;
  return b;
}

ActivationBytes gpt_activation_bytes(const GptDims& dims, int max_batch, ActivationRecompute recompute, DType dtype,
                                     int tp_size, bool sequence_parallel, GptArenaLayout* layout, GptChunk chunk) {
  if (chunk.layer_end < 0) chunk.layer_end = dims.n_layer;
  const int layers = chunk.layer_end - chunk.layer_begin;
  GptArenaLayout scratch_layout;
  GptArenaLayout& o = layout ? *layout : scratch_layout;
  o = GptArenaLayout();
  const bool sp = sequence_parallel && tp_size > 1;
  const size_t t = static_cast<size_t>(tp_size);
  const size_t rows = static_cast<size_t>(max_batch) * static_cast<size_t>(dims.seq_len);
  const size_t padded = sp ? static_cast<size_t>(round_up_to(static_cast<int64_t>(rows), tp_size)) : rows;
  const size_t local = sp ? padded / t : rows;
  const size_t w = dtype_size(dtype), f32 = sizeof(float);
  const size_t C = static_cast<size_t>(dims.d_model);
  const size_t attn_width = C / t, heads = static_cast<size_t>(dims.n_head) / t, mlp_width = 4 * C / t;
  const size_t vocab_rows = static_cast<size_t>(dims.padded_vocab) / t;
  const size_t local_c = local * C * w, full_c = padded * C * w;
  ArenaPlan plan;
  // What a micro-batch keeps from its forward to its backward (and what a pipeline stage sends
  // and receives into): its tokens and targets, block l's input for l < L (in every mode), the
  // last block's output, the blocks' saved activations, the head's, and d(the chunk's input).
  o.tokens = plan.reserve(padded * sizeof(int32_t), Slot::Other);
  o.targets = plan.reserve(padded * sizeof(int32_t), Slot::Other);
  o.residual = plan.reserve(local_c, Slot::Layers);
  for (int l = 1; l < layers; ++l) plan.reserve(local_c, Slot::Layers);
  plan.reserve(local_c, Slot::Other);
  o.residual_stride = (local_c + 255) / 256 * 256;
  const size_t attn_bytes = padded * attn_width * w;
  const size_t lse_bytes = static_cast<size_t>(max_batch) * heads * static_cast<size_t>(dims.seq_len) * f32;
  const bool full = recompute == ActivationRecompute::Full;
  const bool selective = recompute == ActivationRecompute::Selective;
  const BlockBytes block{local_c, attn_bytes, lse_bytes, padded * mlp_width * w, local * f32};
  if (!full) {
    for (int l = 0; l < layers; ++l) o.blocks.push_back(reserve_block(plan, block, Slot::Layers, selective));
  }
  if (chunk.head) {
    o.lnf = plan.reserve(local_c, Slot::Other);
    o.lnf_mean = plan.reserve(local * f32, Slot::Other);
    o.lnf_rstd = plan.reserve(local * f32, Slot::Other);
    if (sp) o.lnf_full = plan.reserve(full_c, Slot::Other);
    o.logits = plan.reserve(padded * vocab_rows * w, Slot::Other);
    o.losses = plan.reserve(padded * f32, Slot::Other);
  }
  if (tp_size > 1 && chunk.head) {
    o.row_max = plan.reserve(padded * f32, Slot::Other);
    o.loss_stats = plan.reserve(2 * padded * f32, Slot::Other);
    o.sample_row = plan.reserve(static_cast<size_t>(dims.padded_vocab) * w, Slot::Other);
  }
  o.dresidual = plan.reserve(local_c, Slot::Other);
  // The scratch: what a forward or backward uses only while it runs (full recompute's one block,
  // recomputed in backward; selective's attention core; the products and gradients in a block).
  o.scratch_base = plan.size();
  if (full && layers > 0) o.blocks.push_back(reserve_block(plan, block, Slot::Shared, selective));
  if (selective) {
    o.shared_atty = plan.reserve(attn_bytes, Slot::Shared);
    o.shared_lse = plan.reserve(lse_bytes, Slot::Shared);
  }
  o.block_out = plan.reserve(full_c, Slot::Other);
  if (sp) o.gathered = plan.reserve(full_c, Slot::Other);
  o.dnarrow = plan.reserve(full_c, Slot::Other);
  o.dwide = plan.reserve(padded * mlp_width * w, Slot::Other);
  if (sp) o.dfull = plan.reserve(full_c, Slot::Other);

  ActivationBytes bytes;
  bytes.layers = plan.bytes(Slot::Layers);
  bytes.per_layer = bytes.layers / static_cast<size_t>(std::max(layers, 1));
  bytes.shared = plan.bytes(Slot::Shared);
  bytes.other = plan.bytes(Slot::Other);
  bytes.total = plan.size();
  bytes.scratch = plan.size() - o.scratch_base;
  return bytes;
}

void Gpt::plan_arena() {
  activation_bytes_ =
      gpt_activation_bytes(dims_, max_batch_, recompute_, dtype_, tp_size(), sequence_parallel(), &arena_, chunk_);
  activations_ = backend_.allocate(arena_.scratch_base);
  if (!scratch_) {
    own_scratch_ = backend_.allocate(activation_bytes_.scratch);
    scratch_ = &own_scratch_;
  } else if (scratch_->bytes() < activation_bytes_.scratch) {
    throw std::logic_error("Gpt: the shared activation scratch is smaller than this model's");
  }
}

Tensor Gpt::act(size_t offset, std::initializer_list<int64_t> dims, DType dtype) const {
  if (offset >= arena_.scratch_base) return scratch_->view(offset - arena_.scratch_base, dtype, dims);
  return activations_.view(offset, dtype, dims);
}

Tensor Gpt::residual(int index, const Batch& b) const {
  return act(arena_.residual + static_cast<size_t>(index) * arena_.residual_stride, {b.local, dims_.d_model});
}

Tensor Gpt::sequences(const Tensor& t, int B, int T) { return Tensor(t.data, t.dtype, {B, T, t.dim(-1)}, t.device); }

Tensor Gpt::all_rows(size_t offset, const Batch& b) const { return act(offset, {b.padded, dims_.d_model}); }

Tensor Gpt::own_rows(size_t offset, const Batch& b) const {
  const size_t first = sequence_parallel() ? static_cast<size_t>(tp_rank()) * static_cast<size_t>(b.local) : 0;
  return act(offset + first * static_cast<size_t>(dims_.d_model) * dtype_size(dtype_), {b.local, dims_.d_model});
}

// Under SP a row-parallel layer's sum is reduce-scattered onto this rank's block of block_out.
Tensor Gpt::mlp_out(const Batch& b) const { return own_rows(arena_.block_out, b); }

Gpt::BlockActs Gpt::block_acts(int layer, const Batch& b) const {
  const size_t index = recompute_ == ActivationRecompute::Full ? 0 : static_cast<size_t>(layer - chunk_.layer_begin);
  const GptArenaLayout::Block& o = arena_.blocks[index];
  const int64_t C = dims_.d_model;
  const bool selective = recompute_ == ActivationRecompute::Selective;
  BlockActs a;
  a.ln1 = act(o.ln1, {b.local, C});
  a.ln1_mean = act(o.ln1_mean, {b.local}, DType::F32);
  a.ln1_rstd = act(o.ln1_rstd, {b.local}, DType::F32);
  a.qkv = act(o.qkv, {b.padded, 3 * attn_width_});
  a.atty = act(selective ? arena_.shared_atty : o.atty, {b.padded, attn_width_});
  a.lse = act(selective ? arena_.shared_lse : o.lse, {b.B, heads_, b.T}, DType::F32);
  a.x_mid = act(o.x_mid, {b.local, C});
  a.ln2 = act(o.ln2, {b.local, C});
  a.ln2_mean = act(o.ln2_mean, {b.local}, DType::F32);
  a.ln2_rstd = act(o.ln2_rstd, {b.local}, DType::F32);
  a.fch = act(o.fch, {b.padded, mlp_width_});
  a.fch_gelu = act(o.fch_gelu, {b.padded, mlp_width_});
  return a;
}

}  // namespace strata
