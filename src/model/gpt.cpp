// GPT-2 forward and hand-written backward on a Backend. Parameters and gradients come from a
// ParamStore one layer group at a time; activations live in one arena planned once for
// (max_batch, seq_len), viewed at the current (B, T) on every call, in the working dtype
// except for the fp32 per-row statistics.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/model.h"

namespace strata {
namespace {

constexpr size_t kF32 = sizeof(float);

// Sequential byte-offset planner for the activation arena (256-byte aligned slots).
class ArenaPlan {
 public:
  size_t reserve(size_t bytes) {
    const size_t offset = size_;
    size_ += (bytes + 255) / 256 * 256;
    return offset;
  }
  size_t size() const { return size_; }

 private:
  size_t size_ = 0;
};

}  // namespace

// Block parameters in gpt_param_specs order: spec index kBlockFirstSpec + kBlockSpecs·l + k.
constexpr size_t kBlockFirstSpec = 2;
constexpr size_t kBlockSpecs = 12;

Gpt::Gpt(const GptDims& dims, Backend& backend, int max_batch, ActivationRecompute recompute, ParamStore* store,
         DType dtype)
    : dims_(dims), backend_(backend), max_batch_(max_batch), recompute_(recompute), dtype_(dtype),
      specs_(gpt_param_specs(dims)) {
  if (max_batch <= 0) throw UserError("micro-batch size must be positive, got " + std::to_string(max_batch));
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16) {
    throw std::logic_error(std::string("Gpt: working dtype must be F32, BF16 or F16, got ") + dtype_name(dtype));
  }
  for (size_t i = 0; i < specs_.size(); ++i) spec_index_.emplace(specs_[i].name, i);
  groups_ = gpt_layer_groups(specs_);
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

  const size_t bt = static_cast<size_t>(max_batch) * static_cast<size_t>(dims.seq_len);
  const size_t C = static_cast<size_t>(dims.d_model);
  // btc: one (B, T, C) activation in the working dtype; bt_f: one fp32 value per row.
  const size_t btc = bt * C * dtype_size(dtype), bt_f = bt * kF32;
  ArenaPlan plan;
  tokens_offset_ = plan.reserve(bt * sizeof(int32_t));
  targets_offset_ = plan.reserve(bt * sizeof(int32_t));
  residual_offset_ = plan.reserve(static_cast<size_t>(dims.n_layer + 1) * btc);
  const int saved_blocks = recompute == ActivationRecompute::Full ? 1 : dims.n_layer;
  for (int l = 0; l < saved_blocks; ++l) {
    BlockOffsets o;
    o.ln1 = plan.reserve(btc);
    o.ln1_mean = plan.reserve(bt_f);
    o.ln1_rstd = plan.reserve(bt_f);
    o.qkv = plan.reserve(3 * btc);
    o.atty = plan.reserve(btc);
    o.lse = plan.reserve(bt_f * static_cast<size_t>(dims.n_head));
    o.x_mid = plan.reserve(btc);
    o.ln2 = plan.reserve(btc);
    o.ln2_mean = plan.reserve(bt_f);
    o.ln2_rstd = plan.reserve(bt_f);
    o.fch = plan.reserve(4 * btc);
    o.fch_gelu = plan.reserve(4 * btc);
    block_offsets_.push_back(o);
  }
  block_out_offset_ = plan.reserve(btc);
  lnf_offset_ = plan.reserve(btc);
  lnf_mean_offset_ = plan.reserve(bt_f);
  lnf_rstd_offset_ = plan.reserve(bt_f);
  logits_offset_ = plan.reserve(bt * static_cast<size_t>(dims.padded_vocab) * dtype_size(dtype));
  losses_offset_ = plan.reserve(bt_f);
  dresidual_offset_ = plan.reserve(btc);
  dnarrow_offset_ = plan.reserve(btc);
  dwide_offset_ = plan.reserve(4 * btc);
  activations_ = backend_.allocate(plan.size());
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

Tensor Gpt::act(size_t offset, std::initializer_list<int64_t> dims, DType dtype) const {
  return activations_.view(offset, dtype, dims);
}

Tensor Gpt::residual(int index, int B, int T) const {
  const size_t stride = static_cast<size_t>(max_batch_) * dims_.seq_len * dims_.d_model * dtype_size(dtype_);
  return act(residual_offset_ + static_cast<size_t>(index) * stride, {B, T, dims_.d_model});
}

Gpt::BlockActs Gpt::block_acts(int layer, int B, int T) const {
  const BlockOffsets& o = block_offsets_[recompute_ == ActivationRecompute::Full ? 0 : static_cast<size_t>(layer)];
  const int64_t C = dims_.d_model;
  BlockActs a;
  a.ln1 = act(o.ln1, {B, T, C});
  a.ln1_mean = act(o.ln1_mean, {B, T}, DType::F32);
  a.ln1_rstd = act(o.ln1_rstd, {B, T}, DType::F32);
  a.qkv = act(o.qkv, {B, T, 3 * C});
  a.atty = act(o.atty, {B, T, C});
  a.lse = act(o.lse, {B, dims_.n_head, T}, DType::F32);
  a.x_mid = act(o.x_mid, {B, T, C});
  a.ln2 = act(o.ln2, {B, T, C});
  a.ln2_mean = act(o.ln2_mean, {B, T}, DType::F32);
  a.ln2_rstd = act(o.ln2_rstd, {B, T}, DType::F32);
  a.fch = act(o.fch, {B, T, 4 * C});
  a.fch_gelu = act(o.fch_gelu, {B, T, 4 * C});
  return a;
}

Gpt::BlockParams Gpt::block_params(int layer, void* group_base, DType dtype) const {
  const size_t first = kBlockFirstSpec + kBlockSpecs * static_cast<size_t>(layer);
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

void Gpt::load_tokens(const int32_t* tokens, const int32_t* targets, int B, int T) {
  const int64_t n = int64_t{B} * T;
  auto validate = [&](const int32_t* ids, const char* what) {
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] >= dims_.vocab_size) {
        throw UserError(std::string(what) + " id " + std::to_string(ids[i]) + " at batch row " +
                        std::to_string(i / T) + ", position " + std::to_string(i % T) +
                        " is outside model.vocab_size " + std::to_string(dims_.vocab_size) +
                        ": the data was encoded with a larger vocabulary; raise model.vocab_size");
      }
    }
  };
  validate(tokens, "token");
  backend_.copy(Tensor(const_cast<int32_t*>(tokens), DType::I32, {B, T}, Device::CPU),
                act(tokens_offset_, {B, T}, DType::I32));
  if (targets) {
    validate(targets, "target");
    backend_.copy(Tensor(const_cast<int32_t*>(targets), DType::I32, {B, T}, Device::CPU),
                  act(targets_offset_, {B, T}, DType::I32));
  }
}

void Gpt::block_forward(const BlockParams& p, const BlockActs& a, Tensor input, bool ln1_done, bool project, int B,
                        int T) {
  Tensor proj_out = act(block_out_offset_, {B, T, dims_.d_model});
  if (!ln1_done) backend_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, input, p.ln1_w, p.ln1_b);
  backend_.linear_forward(a.qkv, a.ln1, p.attn_w, p.attn_b);
  backend_.attention_forward(a.atty, a.lse, a.qkv, dims_.n_head);
  backend_.linear_forward(proj_out, a.atty, p.attn_proj_w, p.attn_proj_b);
  backend_.residual_layernorm_forward(a.x_mid, a.ln2, a.ln2_mean, a.ln2_rstd, input, proj_out, p.ln2_w, p.ln2_b);
  backend_.linear_gelu_forward(a.fch_gelu, a.fch, a.ln2, p.fc_w, p.fc_b);
  if (project) backend_.linear_forward(proj_out, a.fch_gelu, p.proj_w, p.proj_b);
}

void Gpt::run_forward(int B, int T) {
  const int L = dims_.n_layer;
  const size_t lnf_spec = specs_.size() - 2;
  void* emb = store_->acquire_params(0, Pass::Forward);
  const Tensor wte = param_view(emb, specs_[0]);
  backend_.embedding_forward(residual(0, B, T), act(tokens_offset_, {B, T}, DType::I32), wte,
                             param_view(emb, specs_[1]));
  // Block l's output (x_mid + its MLP output, left in block_out) is formed together with the
  // layernorm that reads it next: block l + 1's ln_1, or ln_f after the last block.
  const Tensor mlp_out = act(block_out_offset_, {B, T, dims_.d_model});
  Tensor prev_x_mid;
  for (int l = 0; l < L; ++l) {
    void* block = store_->acquire_params(l + 1, Pass::Forward);
    const BlockParams p = block_params(l, block, dtype_);
    const BlockActs a = block_acts(l, B, T);
    if (l > 0) {
      backend_.residual_layernorm_forward(residual(l, B, T), a.ln1, a.ln1_mean, a.ln1_rstd, prev_x_mid, mlp_out,
                                          p.ln1_w, p.ln1_b);
    }
    block_forward(p, a, residual(l, B, T), /*ln1_done=*/l > 0, /*project=*/true, B, T);
    prev_x_mid = a.x_mid;
    store_->release_params(l + 1, Pass::Forward);
  }
  void* final_ln = store_->acquire_params(L + 1, Pass::Forward);
  Tensor lnf = act(lnf_offset_, {B, T, dims_.d_model});
  const Tensor lnf_w = param_view(final_ln, specs_[lnf_spec]), lnf_b = param_view(final_ln, specs_[lnf_spec + 1]);
  const Tensor lnf_mean = act(lnf_mean_offset_, {B, T}, DType::F32), lnf_rstd = act(lnf_rstd_offset_, {B, T}, DType::F32);
  if (L > 0) {
    backend_.residual_layernorm_forward(residual(L, B, T), lnf, lnf_mean, lnf_rstd, prev_x_mid, mlp_out, lnf_w, lnf_b);
  } else {
    backend_.layernorm_forward(lnf, lnf_mean, lnf_rstd, residual(0, B, T), lnf_w, lnf_b);
  }
  store_->release_params(L + 1, Pass::Forward);
  // Tied head: logits (B·T, Vp) = ln_f(x) · wteᵀ.
  backend_.matmul(act(logits_offset_, {B, T, dims_.padded_vocab}), lnf, wte, Tensor(), false, /*trans_b=*/true, false);
  store_->release_params(0, Pass::Forward);
}

float Gpt::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  return forward_loss(tokens, targets, B, T, false, 0.0f);
}

float Gpt::forward_for_backward(const int32_t* tokens, const int32_t* targets, int B, int T, float dloss) {
  const float loss = forward_loss(tokens, targets, B, T, true, dloss);
  dlogits_ready_ = true;
  dlogits_weight_ = dloss;
  return loss;
}

float Gpt::forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T, bool write_dlogits, float dloss) {
  check_batch(B, T);
  if (!tokens || !targets) throw std::invalid_argument("Gpt::forward needs both tokens and targets");
  backward_ready_ = dlogits_ready_ = false;
  load_tokens(tokens, targets, B, T);
  run_forward(B, T);
  backend_.softmax_cross_entropy(act(logits_offset_, {B, T, dims_.padded_vocab}), act(losses_offset_, {B, T}, DType::F32),
                                 act(targets_offset_, {B, T}, DType::I32), dims_.vocab_size, write_dlogits, dloss);
  return mean_loss(B, T);
}

float Gpt::mean_loss(int B, int T) {
  host_losses_.resize(static_cast<size_t>(B) * static_cast<size_t>(T));
  backend_.copy(act(losses_offset_, {B, T}, DType::F32), Tensor(host_losses_.data(), DType::F32, {B, T}, Device::CPU));
  double sum = 0.0;
  for (float l : host_losses_) sum += l;
  backward_ready_ = true;
  last_batch_ = B;
  last_seq_ = T;
  return static_cast<float>(sum / static_cast<double>(host_losses_.size()));
}

Tensor Gpt::forward_logits(const int32_t* tokens, int B, int T) {
  check_batch(B, T);
  if (!tokens) throw std::invalid_argument("Gpt::forward_logits needs tokens");
  backward_ready_ = dlogits_ready_ = false;
  load_tokens(tokens, nullptr, B, T);
  run_forward(B, T);
  return act(logits_offset_, {B, T, dims_.padded_vocab});
}

void Gpt::block_backward(const BlockParams& p, const BlockParams& g, const BlockActs& a, Tensor input, Tensor dres,
                         int B, int T) {
  const int64_t C = dims_.d_model;
  Tensor dnarrow = act(dnarrow_offset_, {B, T, C});
  Tensor dwide = act(dwide_offset_, {B, T, 4 * C});
  Tensor dqkv = act(dwide_offset_, {B, T, 3 * C});  // dwide is free again by the time dqkv is written
  // MLP: dres is d(block output); the residual path passes it through unchanged.
  backend_.linear_backward_gelu(dwide, g.proj_w, g.proj_b, dres, a.fch_gelu, p.proj_w, a.fch);
  backend_.linear_backward(dnarrow, g.fc_w, g.fc_b, dwide, a.ln2, p.fc_w);
  backend_.layernorm_backward(dres, g.ln2_w, g.ln2_b, dnarrow, a.x_mid, p.ln2_w, a.ln2_mean, a.ln2_rstd);
  // Attention: dres is now d(x_mid).
  backend_.linear_backward(dnarrow, g.attn_proj_w, g.attn_proj_b, dres, a.atty, p.attn_proj_w);
  backend_.attention_backward(dqkv, dnarrow, a.qkv, a.atty, a.lse, dims_.n_head);
  backend_.linear_backward(dnarrow, g.attn_w, g.attn_b, dqkv, a.ln1, p.attn_w);
  backend_.layernorm_backward(dres, g.ln1_w, g.ln1_b, dnarrow, input, p.ln1_w, a.ln1_mean, a.ln1_rstd);
}

void Gpt::backward(float dloss) {
  if (!backward_ready_) throw std::logic_error("Gpt::backward needs the immediately preceding forward()");
  if (dlogits_ready_ && dloss != dlogits_weight_) {
    throw std::logic_error("Gpt::backward: dloss differs from the one forward_for_backward used");
  }
  backward_ready_ = false;
  const int B = last_batch_, T = last_seq_, L = dims_.n_layer;
  const int64_t C = dims_.d_model;
  const size_t lnf_spec = specs_.size() - 2;
  auto group_done = [&](int group) {
    store_->release_params(group, Pass::Backward);
    store_->release_grads(group);
    if (grad_ready_) grad_ready_(group);
  };
  Tensor logits = act(logits_offset_, {B, T, dims_.padded_vocab});
  Tensor tokens = act(tokens_offset_, {B, T}, DType::I32);
  if (!dlogits_ready_) {
    backend_.softmax_cross_entropy(logits, Tensor(), act(targets_offset_, {B, T}, DType::I32), dims_.vocab_size, true,
                                   dloss);
  }
  dlogits_ready_ = false;
  // The embeddings stay acquired to the end: the tied head and the embedding both use wte.
  void* emb = store_->acquire_params(0, Pass::Backward);
  float* demb = store_->acquire_grads(0);
  Tensor& dlogits = logits;
  Tensor lnf = act(lnf_offset_, {B, T, C});
  Tensor dlnf = act(dnarrow_offset_, {B, T, C});
  Tensor dres = act(dresidual_offset_, {B, T, C});
  backend_.matmul(dlnf, dlogits, param_view(emb, specs_[0]), Tensor(), false, false, false);
  backend_.matmul(grad_view(demb, specs_[0]), dlogits, lnf, Tensor(), /*trans_a=*/true, false, /*accumulate=*/true);
  backend_.zero(dres);
  void* final_ln = store_->acquire_params(L + 1, Pass::Backward);
  float* dfinal_ln = store_->acquire_grads(L + 1);
  backend_.layernorm_backward(dres, grad_view(dfinal_ln, specs_[lnf_spec]), grad_view(dfinal_ln, specs_[lnf_spec + 1]),
                              dlnf, residual(L, B, T), param_view(final_ln, specs_[lnf_spec]),
                              act(lnf_mean_offset_, {B, T}, DType::F32), act(lnf_rstd_offset_, {B, T}, DType::F32));
  group_done(L + 1);
  for (int l = L - 1; l >= 0; --l) {
    const BlockActs a = block_acts(l, B, T);
    const BlockParams p = block_params(l, store_->acquire_params(l + 1, Pass::Backward), dtype_);
    const BlockParams g = block_params(l, store_->acquire_grads(l + 1), DType::F32);
    if (recompute_ == ActivationRecompute::Full) block_forward(p, a, residual(l, B, T), false, false, B, T);
    block_backward(p, g, a, residual(l, B, T), dres, B, T);
    group_done(l + 1);
  }
  backend_.embedding_backward(grad_view(demb, specs_[0]), grad_view(demb, specs_[1]), dres, tokens);
  group_done(0);
}

}  // namespace strata
