// GPT-2 forward and hand-written backward on a Backend. Parameters and gradients are two
// flat buffers laid out by gpt_param_specs; activations live in one arena planned once for
// (max_batch, seq_len), viewed at the current (B, T) on every call.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>
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

// Runs fn(begin, end) over disjoint chunks of [0, n) on all cores. Only for work whose result
// does not depend on the split (each element a pure function of its index).
template <typename Fn>
void parallel_chunks(int64_t n, Fn fn) {
  const int64_t min_chunk = 1 << 16;
  const int64_t threads = std::max<int64_t>(
      1, std::min<int64_t>(std::thread::hardware_concurrency(), n / min_chunk));
  if (threads == 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> workers;
  const int64_t chunk = (n + threads - 1) / threads;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    workers.emplace_back(fn, begin, std::min(n, begin + chunk));
  }
  for (std::thread& w : workers) w.join();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Gpt::Gpt(const GptDims& dims, Backend& backend, int max_batch, ActivationRecompute recompute)
    : dims_(dims), backend_(backend), max_batch_(max_batch), recompute_(recompute), specs_(gpt_param_specs(dims)) {
  if (max_batch <= 0) throw UserError("micro-batch size must be positive, got " + std::to_string(max_batch));
  for (size_t i = 0; i < specs_.size(); ++i) spec_index_.emplace(specs_[i].name, i);
  const size_t n_params = static_cast<size_t>(specs_.back().offset + specs_.back().numel);
  params_ = backend_.allocate(n_params * kF32);
  grads_ = backend_.allocate(n_params * kF32);

  const size_t bt = static_cast<size_t>(max_batch) * static_cast<size_t>(dims.seq_len);
  const size_t C = static_cast<size_t>(dims.d_model);
  const size_t btc = bt * C * kF32, bt_f = bt * kF32;
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
  logits_offset_ = plan.reserve(bt * static_cast<size_t>(dims.padded_vocab) * kF32);
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

Tensor Gpt::spec_view(const ParamSpec& spec, const Buffer& buffer) const {
  Tensor t = buffer.view(static_cast<size_t>(spec.offset) * kF32, DType::F32, {spec.numel});
  t.ndim = static_cast<int>(spec.shape.size());
  for (size_t i = 0; i < spec.shape.size(); ++i) t.shape[i] = spec.shape[i];
  return t;
}

Tensor Gpt::params_flat() {
  return params_.view(0, DType::F32, {static_cast<int64_t>(params_.bytes() / kF32)});
}
Tensor Gpt::grads_flat() { return grads_.view(0, DType::F32, {static_cast<int64_t>(grads_.bytes() / kF32)}); }
Tensor Gpt::param_tensor(const std::string& name) { return spec_view(param(name), params_); }
Tensor Gpt::grad_tensor(const std::string& name) { return spec_view(param(name), grads_); }
void Gpt::zero_grads() { backend_.zero(grads_flat()); }

void Gpt::init_weights(uint64_t seed) {
  const float std_base = 0.02f;
  const float std_proj = static_cast<float>(0.02 / std::sqrt(2.0 * dims_.n_layer));
  std::vector<float> host;
  for (const ParamSpec& spec : specs_) {
    host.assign(static_cast<size_t>(spec.numel), 0.0f);
    const bool is_ln_weight = ends_with(spec.name, "ln_1.weight") || ends_with(spec.name, "ln_2.weight") ||
                              spec.name == "ln_f.weight";
    if (is_ln_weight) {
      host.assign(host.size(), 1.0f);
    } else if (spec.weight_decay) {  // every 2-D weight is drawn; biases stay 0
      const float std = ends_with(spec.name, "c_proj.weight") ? std_proj : std_base;
      // Padding rows of wte never see a token; they start (and, without gradient, stay) at 0.
      const int64_t drawn = spec.name == "wte.weight" ? int64_t{dims_.vocab_size} * dims_.d_model : spec.numel;
      const uint64_t stream = rng_stream_id(spec.name.c_str());
      parallel_chunks(drawn, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          host[static_cast<size_t>(i)] = rng_normal(seed, stream, static_cast<uint64_t>(i)) * std;
        }
      });
    }
    Tensor src(host.data(), DType::F32, {spec.numel}, Device::CPU);
    Tensor dst = params_.view(static_cast<size_t>(spec.offset) * kF32, DType::F32, {spec.numel});
    backend_.copy(src, dst);
  }
}

Tensor Gpt::act(size_t offset, std::initializer_list<int64_t> dims, DType dtype) const {
  return activations_.view(offset, dtype, dims);
}

Tensor Gpt::residual(int index, int B, int T) const {
  const size_t stride = static_cast<size_t>(max_batch_) * dims_.seq_len * dims_.d_model * kF32;
  return act(residual_offset_ + static_cast<size_t>(index) * stride, {B, T, dims_.d_model});
}

Gpt::BlockActs Gpt::block_acts(int layer, int B, int T) const {
  const BlockOffsets& o = block_offsets_[recompute_ == ActivationRecompute::Full ? 0 : static_cast<size_t>(layer)];
  const int64_t C = dims_.d_model;
  BlockActs a;
  a.ln1 = act(o.ln1, {B, T, C});
  a.ln1_mean = act(o.ln1_mean, {B, T});
  a.ln1_rstd = act(o.ln1_rstd, {B, T});
  a.qkv = act(o.qkv, {B, T, 3 * C});
  a.atty = act(o.atty, {B, T, C});
  a.lse = act(o.lse, {B, dims_.n_head, T});
  a.x_mid = act(o.x_mid, {B, T, C});
  a.ln2 = act(o.ln2, {B, T, C});
  a.ln2_mean = act(o.ln2_mean, {B, T});
  a.ln2_rstd = act(o.ln2_rstd, {B, T});
  a.fch = act(o.fch, {B, T, 4 * C});
  a.fch_gelu = act(o.fch_gelu, {B, T, 4 * C});
  return a;
}

Gpt::BlockParams Gpt::block_params(int layer, bool grads) {
  const std::string p = "h." + std::to_string(layer) + ".";
  auto get = [&](const char* suffix) { return grads ? grad_tensor(p + suffix) : param_tensor(p + suffix); };
  BlockParams b;
  b.ln1_w = get("ln_1.weight");
  b.ln1_b = get("ln_1.bias");
  b.attn_w = get("attn.c_attn.weight");
  b.attn_b = get("attn.c_attn.bias");
  b.attn_proj_w = get("attn.c_proj.weight");
  b.attn_proj_b = get("attn.c_proj.bias");
  b.ln2_w = get("ln_2.weight");
  b.ln2_b = get("ln_2.bias");
  b.fc_w = get("mlp.c_fc.weight");
  b.fc_b = get("mlp.c_fc.bias");
  b.proj_w = get("mlp.c_proj.weight");
  b.proj_b = get("mlp.c_proj.bias");
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

void Gpt::block_forward(int layer, const BlockActs& a, Tensor input, Tensor output, bool write_output, int B, int T) {
  const BlockParams p = block_params(layer, false);
  Tensor proj_out = act(block_out_offset_, {B, T, dims_.d_model});
  backend_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, input, p.ln1_w, p.ln1_b);
  backend_.linear_forward(a.qkv, a.ln1, p.attn_w, p.attn_b);
  backend_.attention_forward(a.atty, a.lse, a.qkv, dims_.n_head);
  backend_.linear_forward(proj_out, a.atty, p.attn_proj_w, p.attn_proj_b);
  backend_.add(a.x_mid, input, proj_out);
  backend_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.x_mid, p.ln2_w, p.ln2_b);
  backend_.linear_forward(a.fch, a.ln2, p.fc_w, p.fc_b);
  backend_.gelu_forward(a.fch_gelu, a.fch);
  if (write_output) {
    backend_.linear_forward(proj_out, a.fch_gelu, p.proj_w, p.proj_b);
    backend_.add(output, a.x_mid, proj_out);
  }
}

void Gpt::run_forward(int B, int T) {
  const int L = dims_.n_layer;
  backend_.embedding_forward(residual(0, B, T), act(tokens_offset_, {B, T}, DType::I32), param_tensor("wte.weight"),
                             param_tensor("wpe.weight"));
  for (int l = 0; l < L; ++l) block_forward(l, block_acts(l, B, T), residual(l, B, T), residual(l + 1, B, T), true, B, T);
  Tensor lnf = act(lnf_offset_, {B, T, dims_.d_model});
  backend_.layernorm_forward(lnf, act(lnf_mean_offset_, {B, T}), act(lnf_rstd_offset_, {B, T}), residual(L, B, T),
                             param_tensor("ln_f.weight"), param_tensor("ln_f.bias"));
  // Tied head: logits (B·T, Vp) = ln_f(x) · wteᵀ.
  backend_.matmul(act(logits_offset_, {B, T, dims_.padded_vocab}), lnf, param_tensor("wte.weight"), Tensor(),
                  false, /*trans_b=*/true, false);
}

float Gpt::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  check_batch(B, T);
  if (!tokens || !targets) throw std::invalid_argument("Gpt::forward needs both tokens and targets");
  backward_ready_ = false;
  load_tokens(tokens, targets, B, T);
  run_forward(B, T);
  Tensor losses = act(losses_offset_, {B, T});
  backend_.softmax_cross_entropy(act(logits_offset_, {B, T, dims_.padded_vocab}), losses,
                                 act(targets_offset_, {B, T}, DType::I32), dims_.vocab_size, false, 0.0f);
  host_losses_.resize(static_cast<size_t>(B) * static_cast<size_t>(T));
  backend_.copy(losses, Tensor(host_losses_.data(), DType::F32, {B, T}, Device::CPU));
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
  backward_ready_ = false;
  load_tokens(tokens, nullptr, B, T);
  run_forward(B, T);
  return act(logits_offset_, {B, T, dims_.padded_vocab});
}

void Gpt::block_backward(int layer, const BlockActs& a, Tensor input, Tensor dres, int B, int T) {
  const BlockParams p = block_params(layer, false);
  const BlockParams g = block_params(layer, true);
  const int64_t C = dims_.d_model;
  Tensor dnarrow = act(dnarrow_offset_, {B, T, C});
  Tensor dwide = act(dwide_offset_, {B, T, 4 * C});
  Tensor dqkv = act(dwide_offset_, {B, T, 3 * C});  // dwide is free again by the time dqkv is written
  // MLP: dres is d(block output); the residual path passes it through unchanged.
  backend_.linear_backward(dwide, g.proj_w, g.proj_b, dres, a.fch_gelu, p.proj_w);
  backend_.gelu_backward(dwide, dwide, a.fch);
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
  backward_ready_ = false;
  const int B = last_batch_, T = last_seq_, L = dims_.n_layer;
  const int64_t C = dims_.d_model;
  Tensor logits = act(logits_offset_, {B, T, dims_.padded_vocab});
  Tensor tokens = act(tokens_offset_, {B, T}, DType::I32);
  backend_.softmax_cross_entropy(logits, Tensor(), act(targets_offset_, {B, T}, DType::I32), dims_.vocab_size, true,
                                 dloss);
  Tensor& dlogits = logits;
  Tensor lnf = act(lnf_offset_, {B, T, C});
  Tensor dlnf = act(dnarrow_offset_, {B, T, C});
  Tensor dres = act(dresidual_offset_, {B, T, C});
  backend_.matmul(dlnf, dlogits, param_tensor("wte.weight"), Tensor(), false, false, false);
  backend_.matmul(grad_tensor("wte.weight"), dlogits, lnf, Tensor(), /*trans_a=*/true, false, /*accumulate=*/true);
  backend_.zero(dres);
  backend_.layernorm_backward(dres, grad_tensor("ln_f.weight"), grad_tensor("ln_f.bias"), dlnf, residual(L, B, T),
                              param_tensor("ln_f.weight"), act(lnf_mean_offset_, {B, T}), act(lnf_rstd_offset_, {B, T}));
  for (int l = L - 1; l >= 0; --l) {
    const BlockActs a = block_acts(l, B, T);
    if (recompute_ == ActivationRecompute::Full) block_forward(l, a, residual(l, B, T), Tensor(), false, B, T);
    block_backward(l, a, residual(l, B, T), dres, B, T);
  }
  backend_.embedding_backward(grad_tensor("wte.weight"), grad_tensor("wpe.weight"), dres, tokens);
}

}  // namespace strata
