// The GPT-2 parameter registry: every parameter declared once with its HF name, global
// shape, TP split (view and dim), owning layer, weight-decay flag and place in the flat
// buffers; and where a TP rank's elements sit in the global tensors.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/model.h"

namespace strata {
namespace {

void validate_dims(const GptDims& d, TpSlice tp) {
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
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size) {
    errors.push_back("tensor-parallel rank " + std::to_string(tp.rank) + " of " + std::to_string(tp.size));
  } else if (tp.size > 1) {
    if (d.n_head > 0 && d.n_head % tp.size != 0) {
      errors.push_back("model.n_head " + std::to_string(d.n_head) +
                       " is not divisible by parallelism.tensor_model_parallel_size " + std::to_string(tp.size));
    }
    if (d.padded_vocab % tp.size != 0) {
      errors.push_back("padded vocabulary " + std::to_string(d.padded_vocab) +
                       " is not divisible by parallelism.tensor_model_parallel_size " + std::to_string(tp.size));
    }
  }
  if (!errors.empty()) throw UserErrors(errors);
}

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Row-major boxes covering elements [begin, begin + count) of `shape`, in order: a partial
// leading row, a block of whole rows, a partial trailing row, each partial row split the same
// way one dim further in (at most 2·ndim − 1 boxes).
void flat_range_boxes(const std::vector<int64_t>& shape, size_t dim, int64_t begin, int64_t count,
                      std::vector<int64_t>& prefix, std::vector<ViewBox>& out) {
  if (count <= 0) return;
  const size_t ndim = shape.size();
  auto emit = [&](int64_t row_begin, int64_t rows) {
    ViewBox box;
    box.offset = prefix;
    box.shape.assign(prefix.size(), 1);
    box.offset.push_back(row_begin);
    box.shape.push_back(rows);
    for (size_t d = dim + 1; d < ndim; ++d) {
      box.offset.push_back(0);
      box.shape.push_back(shape[d]);
    }
    out.push_back(std::move(box));
  };
  if (dim + 1 == ndim) {
    emit(begin, count);
    return;
  }
  int64_t inner = 1;
  for (size_t d = dim + 1; d < ndim; ++d) inner *= shape[d];
  int64_t row = begin / inner, within = begin % inner, left = count;
  if (within != 0) {  // the partial leading row, one dim further in
    const int64_t n = std::min(left, inner - within);
    prefix.push_back(row);
    flat_range_boxes(shape, dim + 1, within, n, prefix, out);
    prefix.pop_back();
    left -= n;
    ++row;
  }
  if (left >= inner) {
    emit(row, left / inner);
    row += left / inner;
    left %= inner;
  }
  if (left > 0) {
    prefix.push_back(row);
    flat_range_boxes(shape, dim + 1, 0, left, prefix, out);
    prefix.pop_back();
  }
}

}  // namespace

int64_t ViewBox::numel() const { return product(shape); }

std::vector<ParamSpec> gpt_param_specs(const GptDims& dims, TpSlice tp, GptChunk chunk) {
  validate_dims(dims, tp);
  if (chunk.layer_end < 0) chunk.layer_end = dims.n_layer;
  if (chunk.layer_begin < 0 || chunk.layer_begin > chunk.layer_end || chunk.layer_end > dims.n_layer) {
    throw std::logic_error("gpt_param_specs: chunk layers [" + std::to_string(chunk.layer_begin) + ", " +
                           std::to_string(chunk.layer_end) + ") outside the model's " + std::to_string(dims.n_layer));
  }
  const int64_t C = dims.d_model;
  std::vector<ParamSpec> specs;
  int64_t offset = 0;
  // view: the global tensor's TP view (empty: its own shape); split_dim a dim of that view.
  auto add = [&](std::string name, std::vector<int64_t> shape, int layer, int split_dim = -1,
                 std::vector<int64_t> view = {}) {
    ParamSpec spec;
    spec.name = std::move(name);
    spec.weight_decay = shape.size() == 2;
    spec.global_shape = shape;
    spec.tp_view = view.empty() ? shape : view;
    spec.tp_split_dim = split_dim;
    spec.tp_rank = tp.rank;
    spec.tp_size = tp.size;
    spec.shape = shape;
    if (split_dim >= 0) {
      // The rank's block of the view, read back in the global tensor's own dims: the dim the
      // view splits is (a factor of) the global dim of the same position, or the last one.
      const size_t global_dim = std::min(static_cast<size_t>(split_dim), shape.size() - 1);
      spec.shape[global_dim] /= tp.size;
    }
    spec.numel = product(spec.shape);
    spec.layer = layer;
    spec.offset = offset;
    offset += spec.numel;
    specs.push_back(std::move(spec));
  };
  if (chunk.embedding || chunk.head) {
    add("wte.weight", {dims.padded_vocab, C}, -1, 0);
    add("wpe.weight", {dims.seq_len, C}, -1);
    if (!chunk.embedding) specs[0].tied_copy = specs[1].tied_copy = true;
  }
  for (int l = chunk.layer_begin; l < chunk.layer_end; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    add(p + "ln_1.weight", {C}, l);
    add(p + "ln_1.bias", {C}, l);
    add(p + "attn.c_attn.weight", {C, 3 * C}, l, 2, {C, 3, C});
    add(p + "attn.c_attn.bias", {3 * C}, l, 1, {3, C});
    add(p + "attn.c_proj.weight", {C, C}, l, 0);
    add(p + "attn.c_proj.bias", {C}, l);
    add(p + "ln_2.weight", {C}, l);
    add(p + "ln_2.bias", {C}, l);
    add(p + "mlp.c_fc.weight", {C, 4 * C}, l, 1);
    add(p + "mlp.c_fc.bias", {4 * C}, l, 0);
    add(p + "mlp.c_proj.weight", {4 * C, C}, l, 0);
    add(p + "mlp.c_proj.bias", {C}, l);
  }
  if (chunk.head) {
    add("ln_f.weight", {C}, dims.n_layer);
    add("ln_f.bias", {C}, dims.n_layer);
  }
  return specs;
}

std::vector<ParamSpec> gpt_rank_specs(const GptDims& dims, TpSlice tp, const std::vector<GptChunk>& chunks) {
  std::vector<ParamSpec> specs;
  for (const GptChunk& chunk : chunks) {
    for (ParamSpec& spec : gpt_param_specs(dims, tp, chunk)) specs.push_back(std::move(spec));
  }
  // By group (the embeddings' tied copy comes before the blocks of an earlier chunk), keeping
  // the order inside each group.
  std::stable_sort(specs.begin(), specs.end(),
                   [](const ParamSpec& a, const ParamSpec& b) { return param_group(a) < param_group(b); });
  int64_t offset = 0;
  for (ParamSpec& spec : specs) {
    spec.offset = offset;
    offset += spec.numel;
  }
  return specs;
}

int64_t gpt_param_count(const GptDims& dims) {
  const int64_t c = dims.d_model;
  const int64_t embeddings = int64_t{dims.padded_vocab} * c + int64_t{dims.seq_len} * c;  // wte (tied head) + wpe
  // Per block: ln_1, ln_2 (2C each), c_attn (3C² + 3C), attn c_proj (C² + C), c_fc (4C² + 4C),
  // mlp c_proj (4C² + C).
  const int64_t per_layer = 12 * c * c + 13 * c;
  return embeddings + dims.n_layer * per_layer + 2 * c;  // + ln_f
}

TpPlacement tp_placement(const ParamSpec& spec) {
  TpPlacement place;
  place.run = place.stride = std::max<int64_t>(spec.numel, 1);
  if (!spec.tp_sharded()) return place;
  const size_t dim = static_cast<size_t>(spec.tp_split_dim);
  int64_t inner = 1;
  for (size_t d = dim + 1; d < spec.tp_view.size(); ++d) inner *= spec.tp_view[d];
  place.run = spec.tp_view[dim] / spec.tp_size * inner;
  place.stride = spec.tp_view[dim] * inner;
  place.first = spec.tp_rank * place.run;
  return place;
}

std::vector<GlobalRun> tp_global_runs(const ParamSpec& spec, int64_t begin, int64_t count) {
  if (begin < 0 || count < 0 || begin + count > spec.numel) {
    throw std::out_of_range("tp_global_runs: elements outside " + spec.name);
  }
  const TpPlacement place = tp_placement(spec);
  std::vector<GlobalRun> runs;
  for (int64_t i = begin, end = begin + count; i < end;) {
    const int64_t n = std::min(place.run - i % place.run, end - i);
    runs.push_back({place.global_index(i), n});
    i += n;
  }
  return runs;
}

GlobalBoxes tp_global_boxes(const ParamSpec& spec, int64_t begin, int64_t count) {
  GlobalBoxes out;
  const std::vector<GlobalRun> runs = tp_global_runs(spec, begin, count);
  if (runs.size() <= 1) {
    out.view = {product(spec.global_shape)};
    if (!runs.empty()) out.boxes.push_back({{runs[0].global_begin}, {runs[0].count}});
    return out;
  }
  // Boxes of the rank's block (the view with the split dim cut), moved to the block's place.
  const size_t dim = static_cast<size_t>(spec.tp_split_dim);
  std::vector<int64_t> block = spec.tp_view;
  block[dim] /= spec.tp_size;
  std::vector<int64_t> prefix;
  flat_range_boxes(block, 0, begin, count, prefix, out.boxes);
  for (ViewBox& box : out.boxes) box.offset[dim] += spec.tp_rank * block[dim];
  out.view = spec.tp_view;
  return out;
}

}  // namespace strata
