// Part of src/model's public header (model.h): the GPT-2 parameter registry — model dims,
// ParamSpec (from which TP slicing, ZeRO partitioning, checkpoints and export derive), pipeline
// chunks, TP placement, initial values, the parameter count and the layer groups.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct GptDims {
  int n_layer = 0;
  int n_head = 0;
  int d_model = 0;
  int vocab_size = 0;    // real vocabulary; logits beyond it are masked out of the loss
  int padded_vocab = 0;  // rows of wte (≥ vocab_size)
  int seq_len = 0;       // rows of wpe, the longest sequence
};

// This rank's place in its tensor-parallel group: which slice of each split parameter it holds.
struct TpSlice {
  int rank = 0;
  int size = 1;
};

struct ParamSpec {
  std::string name;                   // HuggingFace GPT-2 name, e.g. "h.3.attn.c_attn.weight", "wte.weight"
  std::vector<int64_t> shape;         // this rank's tensor, HF layout (the global shape unless TP splits it)
  std::vector<int64_t> global_shape;  // the whole tensor, HF layout; wte is (padded_vocab, C)
  // Tensor parallelism: the global tensor read row-major as tp_view (the same elements in the
  // same order) is cut into tp_size equal blocks along tp_split_dim of that view, and this rank
  // holds block tp_rank, row-major. c_attn's views (C, 3, C) and (3, C) give every rank the q,
  // k and v columns of its own heads. tp_split_dim -1: replicated, every TP rank holds it all.
  std::vector<int64_t> tp_view;
  int tp_split_dim = -1;
  int tp_rank = 0;
  int tp_size = 1;
  int layer = -1;              // block index; -1 for wte/wpe, n_layer for ln_f
  bool weight_decay = false;   // true for 2-D weights (matrices and embeddings)
  int64_t offset = 0;          // element offset in this rank's flat parameter/gradient buffer
  int64_t numel = 0;           // of this rank's tensor
  // Pipeline parallelism: the last stage's copy of the embeddings (wte for the tied head; wpe
  // so that the copy's group is laid out and partitioned like the first stage's). Its gradient
  // is summed with the first stage's and both take the same step; it is neither saved nor
  // counted twice in the gradient norm.
  bool tied_copy = false;
  // Split over ranks (each holds another part), as opposed to replicated on each of them.
  bool tp_sharded() const { return tp_split_dim >= 0 && tp_size > 1; }
};

// Order: wte, wpe, h.0.* … h.{L-1}.*, ln_f.*; inside a block HF's order (ln_1, attn.c_attn,
// attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj; weight before bias). Offsets are packed densely.
// TP splits (Megatron's): c_attn and c_fc column-parallel (weight and bias on the output
// features), attn and mlp c_proj row-parallel (weight on the input features, bias replicated),
// wte on the vocabulary (the vocab-parallel embedding and tied head); layernorms and wpe are
// replicated. With `tp`, the specs describe that rank's slices (shape, numel, offsets).
// Throws UserError on dims that do not describe a valid model, or that `tp` cannot split.
// A model chunk (pipeline parallelism): blocks [layer_begin, layer_end) (layer_end −1: to the
// last), with the embeddings when `embedding` (the first chunk), the final layernorm and tied
// head when `head` (the last chunk). The default is the whole model.
struct GptChunk {
  int layer_begin = 0;
  int layer_end = -1;
  bool embedding = true;
  bool head = true;
};
// With `chunk`, only that chunk's parameters (a head without the embedding brings the
// embeddings' tied copies, see ParamSpec::tied_copy), offsets packed from 0.
std::vector<ParamSpec> gpt_param_specs(const GptDims& dims, TpSlice tp = {}, GptChunk chunk = {});
// The parameters of several chunks held by one rank, as one flat layout ordered by layer group
// (so that every group is one contiguous range, see gpt_layer_groups).
std::vector<ParamSpec> gpt_rank_specs(const GptDims& dims, TpSlice tp, const std::vector<GptChunk>& chunks);
// Σ numel over the (global) specs, in closed form (a GPT-2 with tied embeddings:
// padded_vocab·C + T·C + L·(12C² + 13C) + 2C); n_head plays no part, so it also counts dims that
// are not yet valid (the config's derived values).
int64_t gpt_param_count(const GptDims& dims);

// Where a rank's elements sit in the global tensor (both flattened): in the TP view, dims after
// the split one are whole, so the rank's block is one run of the global tensor per index of the
// dims before it. Local element l is global element (l / run)·stride + first + l % run.
struct TpPlacement {
  int64_t run = 1;
  int64_t stride = 1;
  int64_t first = 0;
  int64_t global_index(int64_t local) const { return local / run * stride + first + local % run; }
};
TpPlacement tp_placement(const ParamSpec& spec);
// Elements [begin, begin + count) of this rank's tensor `spec` (flattened), as runs of the
// global tensor (flattened): `count` elements from global index `global_begin`. In order, so
// that the runs' elements, one after the other, are the rank's elements.
struct GlobalRun {
  int64_t global_begin = 0;
  int64_t count = 0;
};
std::vector<GlobalRun> tp_global_runs(const ParamSpec& spec, int64_t begin, int64_t count);
// The same elements as boxes of one row-major view of the global tensor (checkpoint pieces):
// `view` is {global numel} when they form one run, else spec.tp_view; boxes in order, each
// packed row-major, their elements one after the other being the rank's elements.
struct ViewBox {
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
  int64_t numel() const;
};
struct GlobalBoxes {
  std::vector<int64_t> view;
  std::vector<ViewBox> boxes;
};
GlobalBoxes tp_global_boxes(const ParamSpec& spec, int64_t begin, int64_t count);

// Elements [begin, begin + count) of this rank's tensor `spec`'s GPT-2 initial value (see
// Gpt::init_weights): a pure function of (seed, name, global element index), so any rank can
// initialise any slice on its own, and a TP slice starts from exactly the TP = 1 values.
void gpt_init_values(const GptDims& dims, const ParamSpec& spec, uint64_t seed, int64_t begin, int64_t count,
                     float* out);

// ---- layer groups ----------------------------------------------------------------------
// The model reaches parameters one layer group at a time: group 0 is the embeddings (wte,
// wpe), group 1 + l is block l, group n_layer + 1 is ln_f. Each is a contiguous element range
// of the flat layout (ParamSpec::offset). A pipeline rank holds some groups only: the others
// are empty ranges (begin == end) at their place in the layout.
struct LayerGroup {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t numel() const { return end - begin; }
};
inline int param_group(const ParamSpec& spec) { return spec.layer + 1; }
// group_count: the entries returned (n_layer + 2 for every group of the model); 0: up to the
// last group the specs hold.
std::vector<LayerGroup> gpt_layer_groups(const std::vector<ParamSpec>& specs, int group_count = 0);

}  // namespace strata
