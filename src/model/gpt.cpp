// GPT-2 forward on a Backend, optionally one tensor-parallel slice of the model (Megatron's
// column/row-parallel layers, vocab-parallel embedding, head and loss, sequence parallelism).
// Parameters and gradients come from a ParamStore one layer group at a time; activations live
// in one arena (gpt_arena.cpp); the hand-written backward is in gpt_backward.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/model.h"
#include "tensor_parallel/tensor_parallel.h"

namespace strata {

namespace {

// Rows [first, first + count) of a 2-D tensor.
Tensor row_block(const Tensor& t, int64_t first, int64_t count) {
  const int64_t cols = t.dim(-1);
  return Tensor(static_cast<char*>(t.data) + static_cast<size_t>(first * cols) * dtype_size(t.dtype), t.dtype,
                {count, cols}, t.device);
}

}  // namespace

Gpt::Gpt(const GptDims& dims, Backend& backend, int max_batch, ActivationRecompute recompute, ParamStore* store,
         DType dtype, TensorParallel* tp, GptChunk chunk, const std::vector<ParamSpec>* layout, const Buffer* scratch)
    : dims_(dims), chunk_(chunk), backend_(backend), max_batch_(max_batch), recompute_(recompute), dtype_(dtype),
      tp_(tp), scratch_(scratch) {
  if (chunk_.layer_end < 0) chunk_.layer_end = dims.n_layer;
  if (!chunk_.head && local_layers() < 1) throw std::logic_error("Gpt: a chunk without the head needs a layer");
  if (max_batch <= 0) throw UserError("micro-batch size must be positive, got " + std::to_string(max_batch));
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16) {
    throw std::logic_error(std::string("Gpt: working dtype must be F32, BF16 or F16, got ") + dtype_name(dtype));
  }
  if (!tp_) {
    no_tp_ = std::make_unique<TensorParallel>(nullptr, false);
    tp_ = no_tp_.get();
  }
  specs_ = gpt_param_specs(dims, {tp_->rank(), tp_->size()}, chunk_);
  const int t = tp_->size();
  attn_width_ = dims.d_model / t;
  heads_ = dims.n_head / t;
  mlp_width_ = 4 * int64_t{dims.d_model} / t;
  vocab_rows_ = dims.padded_vocab / t;
  vocab_start_ = tp_->rank() * vocab_rows_;
  for (size_t i = 0; i < specs_.size(); ++i) spec_index_.emplace(specs_[i].name, i);
  if (layout) {
    if (!store) throw std::logic_error("Gpt: a layout comes with the store that uses it");
    std::unordered_map<std::string, int64_t> offsets;
    for (const ParamSpec& spec : *layout) offsets.emplace(spec.name, spec.offset);
    for (ParamSpec& spec : specs_) {
      const auto it = offsets.find(spec.name);
      if (it == offsets.end()) throw std::logic_error("Gpt: the layout lacks " + spec.name);
      spec.offset = it->second;
    }
  }
  groups_ = gpt_layer_groups(layout ? *layout : specs_, dims.n_layer + 2);
  if (store) {
    if (store->param_dtype() != dtype) {
      throw std::logic_error(std::string("Gpt: the parameter store holds ") + dtype_name(store->param_dtype()) +
                             " but the model works in " + dtype_name(dtype));
    }
    store_ = store;
  } else {
    owned_store_ = std::make_unique<FlatParamStore>(backend_, specs_, 0, dtype);
    store_ = owned_store_.get();
  }
  flat_ = dynamic_cast<FlatParamStore*>(store_);
  plan_arena();
}

Gpt::~Gpt() = default;

std::vector<std::unique_ptr<Gpt>> build_stage_models(const GptDims& dims, Backend& backend, int max_batch,
                                                     ActivationRecompute recompute, ParamStore& store, DType dtype,
                                                     TensorParallel* tp, const std::vector<GptChunk>& chunks,
                                                     const std::vector<int>& slots,
                                                     const std::vector<ParamSpec>& layout, Buffer& scratch) {
  if (slots.size() != chunks.size()) throw std::logic_error("build_stage_models: a slot count per chunk");
  const bool sp = tp && tp->sequence_parallel();
  size_t scratch_bytes = 0;
  for (const GptChunk& chunk : chunks) {
    const ActivationBytes bytes =
        gpt_activation_bytes(dims, max_batch, recompute, dtype, tp ? tp->size() : 1, sp, nullptr, chunk);
    scratch_bytes = std::max(scratch_bytes, bytes.scratch);
  }
  scratch = backend.allocate(scratch_bytes);
  std::vector<std::unique_ptr<Gpt>> models;
  for (size_t c = 0; c < chunks.size(); ++c) {
    for (int k = 0; k < slots[c]; ++k) {
      models.push_back(
          std::make_unique<Gpt>(dims, backend, max_batch, recompute, &store, dtype, tp, chunks[c], &layout, &scratch));
    }
  }
  return models;
}

const ParamSpec& Gpt::param(const std::string& name) const {
  const auto it = spec_index_.find(name);
  if (it == spec_index_.end()) throw std::out_of_range("GPT-2 has no parameter named '" + name + "'");
  return specs_[it->second];
}

FlatParamStore& Gpt::flat_store() const {
  if (!flat_) throw std::logic_error("Gpt: flat parameter views need a FlatParamStore; this model's store is sharded");
  return *flat_;
}

Tensor Gpt::params_flat() { return flat_store().params(); }
Tensor Gpt::grads_flat() { return flat_store().grads(); }
Tensor Gpt::param_tensor(const std::string& name) {
  const ParamSpec& spec = param(name);
  return param_view(flat_store().acquire_params(param_group(spec), Pass::Forward), spec);
}
Tensor Gpt::grad_tensor(const std::string& name) {
  const ParamSpec& spec = param(name);
  return grad_view(flat_store().acquire_grads(param_group(spec)), spec);
}
void Gpt::zero_grads() { backend_.zero(flat_store().grads()); }

void Gpt::init_weights(uint64_t seed) {
  FlatParamStore& flat = flat_store();
  std::vector<float> host;
  std::vector<uint16_t> rounded;  // the values in the working dtype, when that is 16-bit
  const size_t element = dtype_size(dtype_);
  for (const ParamSpec& spec : specs_) {
    const size_t n = static_cast<size_t>(spec.numel);
    host.resize(n);
    gpt_init_values(dims_, spec, seed, 0, spec.numel, host.data());
    void* source = host.data();
    if (dtype_ != DType::F32) {
      rounded.resize(n);
      convert_elements(host.data(), DType::F32, rounded.data(), dtype_, n);
      source = rounded.data();
    }
    const Tensor all = flat.params();
    backend_.copy(Tensor(source, dtype_, {spec.numel}, Device::CPU),
                  Tensor(static_cast<char*>(all.data) + static_cast<size_t>(spec.offset) * element, dtype_,
                         {spec.numel}, all.device));
  }
}

Tensor Gpt::group_view(void* group_base, DType dtype, const ParamSpec& spec) const {
  const LayerGroup& g = groups_[static_cast<size_t>(param_group(spec))];
  Tensor t(static_cast<char*>(group_base) + static_cast<size_t>(spec.offset - g.begin) * dtype_size(dtype), dtype,
           {spec.numel}, backend_.device());
  t.ndim = static_cast<int>(spec.shape.size());
  for (size_t i = 0; i < spec.shape.size(); ++i) t.shape[i] = spec.shape[i];
  return t;
}

Gpt::BlockParams Gpt::block_params(int layer, void* group_base, DType dtype) const {
  const size_t first = block_first_spec(layer);
  auto get = [&](size_t k) { return group_view(group_base, dtype, specs_[first + k]); };
  BlockParams b;
  b.ln1_w = get(0);
  b.ln1_b = get(1);
  b.attn_w = get(2);
  b.attn_b = get(3);
  b.attn_proj_w = get(4);
  b.attn_proj_b = get(5);
  b.ln2_w = get(6);
  b.ln2_b = get(7);
  b.fc_w = get(8);
  b.fc_b = get(9);
  b.proj_w = get(10);
  b.proj_b = get(11);
  return b;
}

void Gpt::check_batch(int B, int T) const {
  if (B <= 0 || B > max_batch_ || T <= 0 || T > dims_.seq_len) {
    throw std::invalid_argument("Gpt: batch (" + std::to_string(B) + ", " + std::to_string(T) +
                                ") outside the allocated (" + std::to_string(max_batch_) + ", " +
                                std::to_string(dims_.seq_len) + ")");
  }
}

void Gpt::load_tokens(const int32_t* tokens, const int32_t* targets, const Batch& b) {
  const int64_t n = b.rows;
  auto validate = [&](const int32_t* ids, const char* what) {
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] >= dims_.vocab_size) {
        throw UserError(std::string(what) + " id " + std::to_string(ids[i]) + " at batch row " +
                        std::to_string(i / b.T) + ", position " + std::to_string(i % b.T) +
                        " is outside model.vocab_size " + std::to_string(dims_.vocab_size) +
                        ": the data was encoded with a larger vocabulary; raise model.vocab_size");
      }
    }
  };
  if (tokens) {
    validate(tokens, "token");
    backend_.copy(Tensor(const_cast<int32_t*>(tokens), DType::I32, {b.B, b.T}, Device::CPU),
                  act(arena_.tokens, {b.B, b.T}, DType::I32));
  }
  if (targets) {
    validate(targets, "target");
    const int32_t* ids = targets;
    if (b.padded > b.rows) {  // the SP pad rows' targets: any valid id, their losses are dropped
      padded_ids_.assign(targets, targets + n);
      padded_ids_.resize(static_cast<size_t>(b.padded), 0);
      ids = padded_ids_.data();
    }
    backend_.copy(Tensor(const_cast<int32_t*>(ids), DType::I32, {b.padded}, Device::CPU),
                  act(arena_.targets, {b.padded}, DType::I32));
  }
}

void Gpt::embed(const Batch& b, void* embeddings) {
  const Tensor wte = param_view(embeddings, specs_[0]), wpe = param_view(embeddings, specs_[1]);
  const Tensor tokens = act(arena_.tokens, {b.B, b.T}, DType::I32);
  if (!tp_active()) {
    backend_.embedding_forward(sequences(residual(0, b), b.B, b.T), tokens, wte, wpe, vocab_start_, dims_.vocab_size);
    return;
  }
  // Vocab-parallel: each rank embeds the tokens of its vocabulary slice (zero rows for the
  // others), one rank adds the positions, and g sums the rows over the group.
  const Tensor full = sequence_parallel() ? all_rows(arena_.block_out, b) : residual(0, b);
  backend_.embedding_forward(sequences(full, b.B, b.T), tokens, wte, tp_rank() == 0 ? wpe : Tensor(), vocab_start_,
                             dims_.vocab_size);
  if (b.padded > b.rows) backend_.zero(row_block(full, b.rows, b.padded - b.rows));
  tp_->leave_forward(full, residual(0, b));
}

Tensor Gpt::row_parallel_forward(Tensor inp, Tensor weight, Tensor bias, const Batch& b) {
  const Tensor product = all_rows(arena_.block_out, b);
  if (!tp_active()) {
    backend_.linear_forward(product, inp, weight, bias);
    return product;
  }
  // Each rank's product covers its slice of the input features: a partial sum. The bias is
  // added once, to the sum.
  backend_.linear_forward(product, inp, weight, Tensor());
  const Tensor out = mlp_out(b);
  tp_->leave_forward(product, out);
  backend_.add_bias(out, bias);
  return out;
}

void Gpt::block_forward(const BlockParams& p, const BlockActs& a, Tensor input, bool ln1_done, bool project,
                        const Batch& b) {
  const bool sp = sequence_parallel();
  const Tensor gathered = sp ? all_rows(arena_.gathered, b) : Tensor();
  if (!ln1_done) backend_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, input, p.ln1_w, p.ln1_b);
  const Tensor ln1 = sp ? gathered : a.ln1;
  tp_->enter_forward(a.ln1, ln1);
  backend_.linear_forward(a.qkv, ln1, p.attn_w, p.attn_b);  // column-parallel: this rank's heads
  backend_.attention_forward(sequences(a.atty, b.B, b.T), a.lse, sequences(a.qkv, b.B, b.T), static_cast<int>(heads_));
  if (b.padded > b.rows) backend_.zero(row_block(a.atty, b.rows, b.padded - b.rows));
  const Tensor attn_out = row_parallel_forward(a.atty, p.attn_proj_w, p.attn_proj_b, b);
  backend_.residual_layernorm_forward(a.x_mid, a.ln2, a.ln2_mean, a.ln2_rstd, input, attn_out, p.ln2_w, p.ln2_b);
  const Tensor ln2 = sp ? gathered : a.ln2;
  tp_->enter_forward(a.ln2, ln2);
  backend_.linear_gelu_forward(a.fch_gelu, a.fch, ln2, p.fc_w, p.fc_b);  // column-parallel
  if (project) row_parallel_forward(a.fch_gelu, p.proj_w, p.proj_b, b);
}

void Gpt::run_forward(const Batch& b, bool last_row_only) {
  const int L = dims_.n_layer, first = chunk_.layer_begin, n = local_layers();
  void* emb = nullptr;
  if (chunk_.embedding) {
    emb = store_->acquire_params(0, Pass::Forward);
    embed(b, emb);
    if (!chunk_.head) store_->release_params(0, Pass::Forward);
  }
  // Block l's output (x_mid + its MLP output, in mlp_out) is formed together with the
  // layernorm that reads it next: block l + 1's ln_1, or ln_f after the last block. A chunk's
  // first block computes its ln_1 from the chunk's input.
  Tensor prev_x_mid;
  for (int i = 0; i < n; ++i) {
    const int l = first + i;
    void* block = store_->acquire_params(l + 1, Pass::Forward);
    const BlockParams p = block_params(l, block, dtype_);
    const BlockActs a = block_acts(l, b);
    if (i > 0) {
      backend_.residual_layernorm_forward(residual(i, b), a.ln1, a.ln1_mean, a.ln1_rstd, prev_x_mid, mlp_out(b),
                                          p.ln1_w, p.ln1_b);
    }
    block_forward(p, a, residual(i, b), /*ln1_done=*/i > 0, /*project=*/true, b);
    prev_x_mid = a.x_mid;
    store_->release_params(l + 1, Pass::Forward);
  }
  if (!chunk_.head) {  // the chunk's output: the residual stream the next chunk starts from
    backend_.add(residual(n, b), prev_x_mid, mlp_out(b));
    return;
  }
  void* final_ln = store_->acquire_params(L + 1, Pass::Forward);
  const Tensor lnf = act(arena_.lnf, {b.local, dims_.d_model});
  const Tensor lnf_w = param_view(final_ln, specs_[lnf_spec()]), lnf_b = param_view(final_ln, specs_[lnf_spec() + 1]);
  const Tensor lnf_mean = act(arena_.lnf_mean, {b.local}, DType::F32);
  const Tensor lnf_rstd = act(arena_.lnf_rstd, {b.local}, DType::F32);
  if (n > 0) {
    backend_.residual_layernorm_forward(residual(n, b), lnf, lnf_mean, lnf_rstd, prev_x_mid, mlp_out(b), lnf_w, lnf_b);
  } else {
    backend_.layernorm_forward(lnf, lnf_mean, lnf_rstd, residual(0, b), lnf_w, lnf_b);
  }
  store_->release_params(L + 1, Pass::Forward);
  if (!emb) emb = store_->acquire_params(0, Pass::Forward);  // the head's copy of wte
  // Tied head, column-parallel over the vocabulary: logits (rows, V_slice) = ln_f(x) · wte_sliceᵀ.
  const Tensor lnf_all = sequence_parallel() ? all_rows(arena_.lnf_full, b) : lnf;
  tp_->enter_forward(lnf, lnf_all);
  const Tensor head_in = last_row_only ? row_block(lnf_all, b.rows - 1, 1) : lnf_all;
  backend_.matmul(act(arena_.logits, {head_in.dim(0), vocab_rows_}), head_in, param_view(emb, specs_[0]), Tensor(),
                  false, /*trans_b=*/true, false);
  store_->release_params(0, Pass::Forward);
}

void Gpt::loss_forward(const Batch& b, bool write_dlogits, float dloss) {
  const Tensor logits = act(arena_.logits, {b.padded, vocab_rows_});
  const Tensor losses = act(arena_.losses, {b.padded}, DType::F32);
  const Tensor targets = act(arena_.targets, {b.padded}, DType::I32);
  if (!tp_active()) {
    backend_.softmax_cross_entropy(logits, losses, targets, dims_.vocab_size, write_dlogits, dloss);
    return;
  }
  // Vocab-parallel: the row maxima and then the exponential sums (with the target's logit, known
  // to the rank whose slice holds it) are all-reduced; the full logits are never gathered.
  const Tensor row_max = act(arena_.row_max, {b.padded}, DType::F32);
  const Tensor stats = act(arena_.loss_stats, {2, b.padded}, DType::F32);
  backend_.vocab_parallel_max(row_max, logits, vocab_start_, dims_.vocab_size);
  tp_->all_reduce(row_max, ReduceOp::Max);
  backend_.vocab_parallel_sum_exp(stats, logits, row_max, targets, vocab_start_, dims_.vocab_size);
  tp_->all_reduce(stats, ReduceOp::Sum);
  backend_.vocab_parallel_cross_entropy(logits, losses, targets, row_max, stats, vocab_start_, dims_.vocab_size,
                                        write_dlogits, dloss);
}

float Gpt::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  return forward_loss(tokens, targets, B, T, false, 0.0f);
}

float Gpt::forward_for_backward(const int32_t* tokens, const int32_t* targets, int B, int T, float dloss) {
  return forward_loss(tokens, targets, B, T, true, dloss);
}

float Gpt::forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T, bool write_dlogits, float dloss) {
  if (!tokens || !targets) throw std::invalid_argument("Gpt::forward needs both tokens and targets");
  if (!chunk_.head) throw std::logic_error("Gpt::forward: this chunk has no head; use forward_chunk");
  take_losses();  // whatever was logged before is not this call's
  forward_chunk(tokens, targets, B, T, write_dlogits, dloss);
  return take_losses().back();
}

void Gpt::forward_chunk(const int32_t* tokens, const int32_t* targets, int B, int T, bool for_backward, float dloss) {
  check_batch(B, T);
  if (chunk_.embedding && !tokens) throw std::invalid_argument("Gpt::forward_chunk: the first chunk needs tokens");
  if (chunk_.head && !targets) throw std::invalid_argument("Gpt::forward_chunk: the last chunk needs targets");
  backward_ready_ = dlogits_ready_ = false;
  const Batch b = batch_of(B, T);
  load_tokens(chunk_.embedding ? tokens : nullptr, chunk_.head ? targets : nullptr, b);
  run_forward(b);
  if (chunk_.head) {
    loss_forward(b, for_backward, dloss);
    log_losses(b);
  }
  backward_ready_ = true;
  last_batch_ = b;
  if (for_backward && chunk_.head) {
    dlogits_ready_ = true;
    dlogits_weight_ = dloss;
  }
}

Tensor Gpt::chunk_input(int B, int T) const {
  check_batch(B, T);
  return residual(0, batch_of(B, T));
}
Tensor Gpt::chunk_output(int B, int T) const {
  check_batch(B, T);
  return residual(local_layers(), batch_of(B, T));
}
Tensor Gpt::chunk_output_grad(int B, int T) const {
  check_batch(B, T);
  return act(arena_.dresidual, {batch_of(B, T).local, dims_.d_model});
}

void Gpt::log_losses(const Batch& b) {
  const int64_t needed = logged_count_ + b.rows;
  if (static_cast<size_t>(needed) * sizeof(float) > logged_losses_.bytes()) {
    // Rare (the first step, or a longer one): the queued copies must land before the move.
    backend_.synchronize();
    Buffer grown = backend_.allocate_host(static_cast<size_t>(std::max(needed, 2 * logged_count_)) * sizeof(float));
    if (logged_count_ > 0) std::memcpy(grown.data(), logged_losses_.data(), static_cast<size_t>(logged_count_) * sizeof(float));
    logged_losses_ = std::move(grown);
  }
  auto* slot = static_cast<float*>(logged_losses_.data()) + logged_count_;
  backend_.copy_async(act(arena_.losses, {b.rows}, DType::F32), Tensor(slot, DType::F32, {b.rows}, Device::CPU));
  logged_rows_.push_back(b.rows);
  logged_count_ = needed;
}

std::vector<float> Gpt::take_losses() {
  std::vector<float> means;
  if (logged_rows_.empty()) return means;
  backend_.synchronize();
  const float* losses = static_cast<const float*>(logged_losses_.data());
  for (int64_t rows : logged_rows_) {
    double sum = 0.0;
    for (int64_t i = 0; i < rows; ++i) sum += losses[i];
    means.push_back(static_cast<float>(sum / static_cast<double>(rows)));
    losses += rows;
  }
  logged_rows_.clear();
  logged_count_ = 0;
  return means;
}

Gpt::Batch Gpt::load_for_inference(const int32_t* tokens, int B, int T, const char* caller) {
  check_batch(B, T);
  if (!chunk_.head) throw std::logic_error(std::string("Gpt::") + caller + ": this chunk has no head");
  if (chunk_.embedding && !tokens) throw std::invalid_argument(std::string("Gpt::") + caller + " needs tokens");
  backward_ready_ = dlogits_ready_ = false;
  const Batch b = batch_of(B, T);
  load_tokens(tokens, nullptr, b);
  return b;
}

Tensor Gpt::forward_logits(const int32_t* tokens, int B, int T) {
  run_forward(load_for_inference(tokens, B, T, "forward_logits"));
  return act(arena_.logits, {B, T, vocab_rows_});
}

std::vector<float> Gpt::last_token_logits(const int32_t* tokens, int T) {
  run_forward(load_for_inference(tokens, 1, T, "last_token_logits"), /*last_row_only=*/true);
  const size_t element = dtype_size(dtype_);
  Tensor last = act(arena_.logits, {vocab_rows_});
  if (tp_active()) {  // only this row's slices travel, not the logits
    const Tensor row = act(arena_.sample_row, {dims_.padded_vocab});
    tp_->all_gather(last, row);
    last = row;
  }
  std::vector<unsigned char> bytes(static_cast<size_t>(last.numel()) * element);
  backend_.copy(last, Tensor(bytes.data(), dtype_, {last.numel()}, Device::CPU));
  std::vector<float> values(static_cast<size_t>(last.numel()));
  convert_elements(bytes.data(), dtype_, values.data(), DType::F32, values.size());
  values.resize(static_cast<size_t>(dims_.vocab_size));
  return values;
}

}  // namespace strata
