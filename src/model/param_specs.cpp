// The GPT-2 parameter registry: every parameter declared once with its HF name, global
// shape, TP split dim, owning layer, weight-decay flag and place in the flat buffers.
#include <string>
#include <vector>

#include "model/model.h"

namespace strata {
namespace {

void validate_dims(const GptDims& d) {
  std::vector<std::string> errors;
  auto positive = [&](int value, const char* key) {
    if (value <= 0) errors.push_back(std::string("model.") + key + " must be positive, got " + std::to_string(value));
  };
  positive(d.n_layer, "n_layer");
  positive(d.n_head, "n_head");
  positive(d.d_model, "d_model");
  positive(d.vocab_size, "vocab_size");
  positive(d.seq_len, "seq_len");
  if (d.n_head > 0 && d.d_model > 0 && d.d_model % d.n_head != 0) {
    errors.push_back("model.d_model " + std::to_string(d.d_model) + " is not divisible by model.n_head " +
                     std::to_string(d.n_head) + ": pick a head count that divides it");
  }
  if (d.padded_vocab < d.vocab_size) {
    errors.push_back("padded vocabulary " + std::to_string(d.padded_vocab) + " is smaller than model.vocab_size " +
                     std::to_string(d.vocab_size));
  }
  if (!errors.empty()) throw UserErrors(errors);
}

}  // namespace

std::vector<ParamSpec> gpt_param_specs(const GptDims& dims) {
  validate_dims(dims);
  const int64_t C = dims.d_model;
  std::vector<ParamSpec> specs;
  int64_t offset = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape, int tp_split_dim, int layer) {
    ParamSpec spec;
    spec.name = std::move(name);
    spec.numel = 1;
    for (int64_t s : shape) spec.numel *= s;
    spec.weight_decay = shape.size() == 2;
    spec.shape = std::move(shape);
    spec.tp_split_dim = tp_split_dim;
    spec.layer = layer;
    spec.offset = offset;
    offset += spec.numel;
    specs.push_back(std::move(spec));
  };
  add("wte.weight", {dims.padded_vocab, C}, 0, -1);
  add("wpe.weight", {dims.seq_len, C}, -1, -1);
  for (int l = 0; l < dims.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    add(p + "ln_1.weight", {C}, -1, l);
    add(p + "ln_1.bias", {C}, -1, l);
    add(p + "attn.c_attn.weight", {C, 3 * C}, 1, l);
    add(p + "attn.c_attn.bias", {3 * C}, 0, l);
    add(p + "attn.c_proj.weight", {C, C}, 0, l);
    add(p + "attn.c_proj.bias", {C}, -1, l);
    add(p + "ln_2.weight", {C}, -1, l);
    add(p + "ln_2.bias", {C}, -1, l);
    add(p + "mlp.c_fc.weight", {C, 4 * C}, 1, l);
    add(p + "mlp.c_fc.bias", {4 * C}, 0, l);
    add(p + "mlp.c_proj.weight", {4 * C, C}, 0, l);
    add(p + "mlp.c_proj.bias", {C}, -1, l);
  }
  add("ln_f.weight", {C}, -1, dims.n_layer);
  add("ln_f.bias", {C}, -1, dims.n_layer);
  return specs;
}

int64_t gpt_param_count(const GptDims& dims) {
  const std::vector<ParamSpec> specs = gpt_param_specs(dims);
  return specs.back().offset + specs.back().numel;
}

}  // namespace strata
