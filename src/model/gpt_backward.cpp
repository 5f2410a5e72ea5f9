// GPT-2's hand-written backward, layer by layer in reverse, with tensor parallelism's
// conjugates of the forward's communication: where forward entered a TP region (f: identity or
// all-gather) backward sums the input gradient (all-reduce or reduce-scatter), and where it left
// one (g: all-reduce or reduce-scatter) backward passes or gathers the output gradient.
#include <stdexcept>
#include <string>

#include "model/model.h"
#include "tensor_parallel/tensor_parallel.h"

namespace strata {
void Gpt::complete_layernorm_grads(int group, float* grads) {
  // Under SP each rank's layernorms saw only its token rows; every other replicated parameter's
  // gradient was formed from whole (gathered) tensors and is already the same on every rank.
  // A layernorm's weight and bias sit side by side: one all-reduce for both.
  const LayerGroup& g = groups_[static_cast<size_t>(group)];
  auto reduce = [&](size_t weight) {
    const ParamSpec& w = specs_[weight];
    const int64_t numel = w.numel + specs_[weight + 1].numel;
    tp_->all_reduce(Tensor(grads + (w.offset - g.begin), DType::F32, {numel}, backend_.device()), ReduceOp::Sum);
  };
  if (group == dims_.n_layer + 1) {
    reduce(lnf_spec());
    return;
  }
  const size_t first = block_first_spec(group - 1);
  reduce(first + kLn1WeightSpec);
  reduce(first + kLn2WeightSpec);
}

void Gpt::block_backward(const BlockParams& p, const BlockParams& g, const BlockActs& a, Tensor input, Tensor dres,
                         const Batch& b) {
  const bool sp = sequence_parallel();
  const Tensor dnarrow_all = all_rows(arena_.dnarrow, b);
  // Under SP the summed input gradient lands on this rank's rows of the same scratch.
  const Tensor dnarrow = own_rows(arena_.dnarrow, b);
  const Tensor dwide = act(arena_.dwide, {b.padded, mlp_width_});
  const Tensor dqkv = act(arena_.dwide, {b.padded, 3 * attn_width_});  // dwide is free again by then
  const Tensor datty = act(arena_.dnarrow, {b.padded, attn_width_});
  const Tensor dout = sp ? all_rows(arena_.dfull, b) : dres;  // d(block output), all rows
  const Tensor gathered = sp ? all_rows(arena_.gathered, b) : Tensor();
  // MLP: dres is d(block output); the residual path passes it through unchanged.
  tp_->leave_backward(dres, dout);
  backend_.linear_backward_gelu(dwide, g.proj_w, g.proj_b, dout, a.fch_gelu, p.proj_w, a.fch);
  // SP keeps only this rank's rows of the layernorm output: gathered again for the weight gradient.
  const Tensor ln2 = sp ? gathered : a.ln2;
  tp_->enter_forward(a.ln2, ln2);
  backend_.linear_backward(dnarrow_all, g.fc_w, g.fc_b, dwide, ln2, p.fc_w);
  tp_->enter_backward(dnarrow_all, dnarrow);
  backend_.layernorm_backward(dres, g.ln2_w, g.ln2_b, dnarrow, a.x_mid, p.ln2_w, a.ln2_mean, a.ln2_rstd);
  // Attention: dres is now d(x_mid).
  tp_->leave_backward(dres, dout);
  if (recompute_ == ActivationRecompute::Selective) {
    backend_.attention_forward(sequences(a.atty, b.B, b.T), a.lse, sequences(a.qkv, b.B, b.T),
                               static_cast<int>(heads_));
  }
  backend_.linear_backward(datty, g.attn_proj_w, g.attn_proj_b, dout, a.atty, p.attn_proj_w);
  backend_.attention_backward(sequences(dqkv, b.B, b.T), sequences(datty, b.B, b.T), sequences(a.qkv, b.B, b.T),
                              sequences(a.atty, b.B, b.T), a.lse, static_cast<int>(heads_));
  const Tensor ln1 = sp ? gathered : a.ln1;
  tp_->enter_forward(a.ln1, ln1);
  backend_.linear_backward(dnarrow_all, g.attn_w, g.attn_b, dqkv, ln1, p.attn_w);
  tp_->enter_backward(dnarrow_all, dnarrow);
  backend_.layernorm_backward(dres, g.ln1_w, g.ln1_b, dnarrow, input, p.ln1_w, a.ln1_mean, a.ln1_rstd);
}

Tensor Gpt::head_backward(const Batch& b, void* embeddings, float* dembeddings) {
  const int64_t C = dims_.d_model;
  const bool sp = sequence_parallel();
  const Tensor dlogits = act(arena_.logits, {b.padded, vocab_rows_});
  const Tensor lnf_all = sp ? all_rows(arena_.lnf_full, b) : act(arena_.lnf, {b.local, C});
  const Tensor dlnf_all = all_rows(arena_.dnarrow, b);
  const Tensor dlnf = own_rows(arena_.dnarrow, b);
  // The head is column-parallel over the vocabulary: each rank's product is a partial sum.
  backend_.matmul(dlnf_all, dlogits, param_view(embeddings, specs_[0]), Tensor(), false, false, false);
  backend_.matmul(grad_view(dembeddings, specs_[0]), dlogits, lnf_all, Tensor(), /*trans_a=*/true, false,
                  /*accumulate=*/true);
  tp_->enter_backward(dlnf_all, dlnf);
  return dlnf;
}

void Gpt::backward(float dloss, bool complete_partial_grads) {
  if (!chunk_.embedding || !chunk_.head) throw std::logic_error("Gpt::backward: a model chunk runs backward_chunk");
  backward_chunk(dloss, complete_partial_grads);
}

void Gpt::backward_chunk(float dloss, bool complete_partial_grads) {
  if (!backward_ready_) throw std::logic_error("Gpt::backward needs the immediately preceding forward()");
  if (dlogits_ready_ && dloss != dlogits_weight_) {
    throw std::logic_error("Gpt::backward: dloss differs from the one forward_for_backward used");
  }
  const Batch b = last_batch_;
  if (b.padded != b.rows) {
    throw std::logic_error("Gpt::backward: under sequence parallelism B·T must be divisible by the TP size");
  }
  backward_ready_ = false;
  const int L = dims_.n_layer, first = chunk_.layer_begin, n = local_layers();
  const bool complete = sequence_parallel() && complete_partial_grads;
  auto group_done = [&](int group, float* grads, bool params_held = true) {
    if (complete && group > 0) complete_layernorm_grads(group, grads);
    if (params_held) store_->release_params(group, Pass::Backward);
    store_->release_grads(group);
    if (grad_ready_) grad_ready_(group);
  };
  // d(residual stream): from the head, or received from the next chunk (chunk_output_grad).
  const Tensor dres = act(arena_.dresidual, {b.local, dims_.d_model});
  void* emb = nullptr;
  float* demb = nullptr;
  if (chunk_.head) {
    if (!dlogits_ready_) {
      const Tensor logits = act(arena_.logits, {b.padded, vocab_rows_});
      const Tensor targets = act(arena_.targets, {b.padded}, DType::I32);
      if (tp_active()) {  // the loss's statistics are still those of the forward
        backend_.vocab_parallel_cross_entropy(logits, Tensor(), targets, act(arena_.row_max, {b.padded}, DType::F32),
                                              act(arena_.loss_stats, {2, b.padded}, DType::F32), vocab_start_,
                                              dims_.vocab_size, true, dloss);
      } else {
        backend_.softmax_cross_entropy(logits, Tensor(), targets, dims_.vocab_size, true, dloss);
      }
    }
    dlogits_ready_ = false;
    // The embeddings stay acquired to the end: the tied head and the embedding both use wte.
    emb = store_->acquire_params(0, Pass::Backward);
    demb = store_->acquire_grads(0);
    const Tensor dlnf = head_backward(b, emb, demb);
    if (!chunk_.embedding) group_done(0, demb);  // the tied copy's gradient is complete
    backend_.zero(dres);
    void* final_ln = store_->acquire_params(L + 1, Pass::Backward);
    float* dfinal_ln = store_->acquire_grads(L + 1);
    backend_.layernorm_backward(dres, grad_view(dfinal_ln, specs_[lnf_spec()]),
                                grad_view(dfinal_ln, specs_[lnf_spec() + 1]), dlnf, residual(n, b),
                                param_view(final_ln, specs_[lnf_spec()]), act(arena_.lnf_mean, {b.local}, DType::F32),
                                act(arena_.lnf_rstd, {b.local}, DType::F32));
    group_done(L + 1, dfinal_ln);
  }
  for (int i = n - 1; i >= 0; --i) {
    const int l = first + i;
    const BlockActs a = block_acts(l, b);
    const BlockParams p = block_params(l, store_->acquire_params(l + 1, Pass::Backward), dtype_);
    float* grads = store_->acquire_grads(l + 1);
    const BlockParams g = block_params(l, grads, DType::F32);
    if (recompute_ == ActivationRecompute::Full) block_forward(p, a, residual(i, b), false, false, b);
    block_backward(p, g, a, residual(i, b), dres, b);
    group_done(l + 1, grads);
  }
  // A chunk after the first leaves d(its input) in dres, for the previous chunk.
  if (!chunk_.embedding) return;
  if (!chunk_.head) demb = store_->acquire_grads(0);  // the embedding's gradient reads no parameters
  const Tensor tokens = act(arena_.tokens, {b.B, b.T}, DType::I32);
  const Tensor dwte = grad_view(demb, specs_[0]), dwpe = grad_view(demb, specs_[1]);
  Tensor dall = dres;
  if (tp_active()) {
    // Every rank needs every token's gradient for its rows of the table (g's backward).
    if (sequence_parallel()) dall = all_rows(arena_.dfull, b);
    tp_->leave_backward(dres, dall);
  }
  backend_.embedding_backward(dwte, dwpe, sequences(dall, b.B, b.T), tokens, vocab_start_, dims_.vocab_size);
  group_done(0, demb, /*params_held=*/emb != nullptr);
}

}  // namespace strata
