// The GPT model's activation arena: one allocation planned once for (max_batch, seq_len), this
// rank's tensor-parallel widths and the recompute mode, with byte counts by what each slot
// holds (per layer, shared recompute scratch, other) for the memory report; and the views of
// it at the current batch.
#include <string>

#include "model/model.h"
#include "parallel/tensor/tensor_parallel.h"

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

void Gpt::plan_arena() {
  const Batch most = batch_of(max_batch_, dims_.seq_len);
  const size_t w = dtype_size(dtype_), f32 = sizeof(float);
  const size_t C = static_cast<size_t>(dims_.d_model);
  const size_t local = static_cast<size_t>(most.local), padded = static_cast<size_t>(most.padded);
  const size_t local_c = local * C * w, full_c = padded * C * w;
  const bool sp = sequence_parallel();
  ArenaPlan plan;
  tokens_offset_ = plan.reserve(padded * sizeof(int32_t), Slot::Other);
  targets_offset_ = plan.reserve(padded * sizeof(int32_t), Slot::Other);
  // Block l's input for l < L (kept per layer in every mode), and the last block's output.
  residual_offset_ = plan.reserve(local_c, Slot::Layers);
  for (int l = 1; l < dims_.n_layer; ++l) plan.reserve(local_c, Slot::Layers);
  plan.reserve(local_c, Slot::Other);
  const size_t attn_bytes = padded * static_cast<size_t>(attn_width_) * w;
  const size_t lse_bytes = static_cast<size_t>(max_batch_) * static_cast<size_t>(heads_) * dims_.seq_len * f32;
  const bool full = recompute_ == ActivationRecompute::Full;
  const bool selective = recompute_ == ActivationRecompute::Selective;
  const Slot kind = full ? Slot::Shared : Slot::Layers;
  const int saved_blocks = full ? 1 : dims_.n_layer;
  for (int l = 0; l < saved_blocks; ++l) {
    BlockOffsets o;
    o.ln1 = plan.reserve(local_c, kind);
    o.ln1_mean = plan.reserve(local * f32, kind);
    o.ln1_rstd = plan.reserve(local * f32, kind);
    o.qkv = plan.reserve(3 * attn_bytes, kind);
    if (!selective) {
      o.atty = plan.reserve(attn_bytes, kind);
      o.lse = plan.reserve(lse_bytes, kind);
    }
    o.x_mid = plan.reserve(local_c, kind);
    o.ln2 = plan.reserve(local_c, kind);
    o.ln2_mean = plan.reserve(local * f32, kind);
    o.ln2_rstd = plan.reserve(local * f32, kind);
    o.fch = plan.reserve(padded * static_cast<size_t>(mlp_width_) * w, kind);
    o.fch_gelu = plan.reserve(padded * static_cast<size_t>(mlp_width_) * w, kind);
    block_offsets_.push_back(o);
  }
  if (selective) {
    shared_atty_offset_ = plan.reserve(attn_bytes, Slot::Shared);
    shared_lse_offset_ = plan.reserve(lse_bytes, Slot::Shared);
  }
  block_out_offset_ = plan.reserve(full_c, Slot::Other);
  if (sp) gathered_offset_ = plan.reserve(full_c, Slot::Other);
  lnf_offset_ = plan.reserve(local_c, Slot::Other);
  lnf_mean_offset_ = plan.reserve(local * f32, Slot::Other);
  lnf_rstd_offset_ = plan.reserve(local * f32, Slot::Other);
  if (sp) lnf_full_offset_ = plan.reserve(full_c, Slot::Other);
  logits_offset_ = plan.reserve(padded * static_cast<size_t>(vocab_rows_) * w, Slot::Other);
  losses_offset_ = plan.reserve(padded * f32, Slot::Other);
  if (tp_active()) {
    row_max_offset_ = plan.reserve(padded * f32, Slot::Other);
    loss_stats_offset_ = plan.reserve(2 * padded * f32, Slot::Other);
    sample_row_offset_ = plan.reserve(static_cast<size_t>(dims_.padded_vocab) * w, Slot::Other);
  }
  dresidual_offset_ = plan.reserve(local_c, Slot::Other);
  dnarrow_offset_ = plan.reserve(full_c, Slot::Other);
  dwide_offset_ = plan.reserve(padded * static_cast<size_t>(mlp_width_) * w, Slot::Other);
  if (sp) dfull_offset_ = plan.reserve(full_c, Slot::Other);
  residual_stride_ = (local_c + 255) / 256 * 256;

  activation_bytes_.layers = plan.bytes(Slot::Layers);
  activation_bytes_.per_layer = activation_bytes_.layers / static_cast<size_t>(dims_.n_layer);
  activation_bytes_.shared = plan.bytes(Slot::Shared);
  activation_bytes_.other = plan.bytes(Slot::Other);
  activation_bytes_.total = plan.size();
  activations_ = backend_.allocate(plan.size());
}

Tensor Gpt::act(size_t offset, std::initializer_list<int64_t> dims, DType dtype) const {
  return activations_.view(offset, dtype, dims);
}

Tensor Gpt::residual(int index, const Batch& b) const {
  return act(residual_offset_ + static_cast<size_t>(index) * residual_stride_, {b.local, dims_.d_model});
}

Tensor Gpt::sequences(const Tensor& t, int B, int T) { return Tensor(t.data, t.dtype, {B, T, t.dim(-1)}, t.device); }

Tensor Gpt::all_rows(size_t offset, const Batch& b) const { return act(offset, {b.padded, dims_.d_model}); }

Tensor Gpt::own_rows(size_t offset, const Batch& b) const {
  const size_t first = sequence_parallel() ? static_cast<size_t>(tp_rank()) * static_cast<size_t>(b.local) : 0;
  return act(offset + first * static_cast<size_t>(dims_.d_model) * dtype_size(dtype_), {b.local, dims_.d_model});
}

// Under SP a row-parallel layer's sum is reduce-scattered onto this rank's block of block_out.
Tensor Gpt::mlp_out(const Batch& b) const { return own_rows(block_out_offset_, b); }

Gpt::BlockActs Gpt::block_acts(int layer, const Batch& b) const {
  const BlockOffsets& o = block_offsets_[recompute_ == ActivationRecompute::Full ? 0 : static_cast<size_t>(layer)];
  const int64_t C = dims_.d_model;
  const bool selective = recompute_ == ActivationRecompute::Selective;
  BlockActs a;
  a.ln1 = act(o.ln1, {b.local, C});
  a.ln1_mean = act(o.ln1_mean, {b.local}, DType::F32);
  a.ln1_rstd = act(o.ln1_rstd, {b.local}, DType::F32);
  a.qkv = act(o.qkv, {b.padded, 3 * attn_width_});
  a.atty = act(selective ? shared_atty_offset_ : o.atty, {b.padded, attn_width_});
  a.lse = act(selective ? shared_lse_offset_ : o.lse, {b.B, heads_, b.T}, DType::F32);
  a.x_mid = act(o.x_mid, {b.local, C});
  a.ln2 = act(o.ln2, {b.local, C});
  a.ln2_mean = act(o.ln2_mean, {b.local}, DType::F32);
  a.ln2_rstd = act(o.ln2_rstd, {b.local}, DType::F32);
  a.fch = act(o.fch, {b.padded, mlp_width_});
  a.fch_gelu = act(o.fch_gelu, {b.padded, mlp_width_});
  return a;
}

}  // namespace strata
