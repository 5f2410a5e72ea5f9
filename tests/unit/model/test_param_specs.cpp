// The GPT-2 parameter registry: HF names and shapes, counts, TP splits, layers, weight decay
// flags and the dense flat-buffer layout; a TP rank's slices, where they sit in the global
// tensors, and their initial values.
#include "catch_compat.h"

#include <algorithm>
#include <map>
#include <set>

#include "model/model.h"

using namespace strata;

namespace {
GptDims gpt2_124m() {
  GptDims d;
  d.n_layer = 12;
  d.n_head = 12;
  d.d_model = 768;
  d.vocab_size = 50257;
  d.padded_vocab = 50257;
  d.seq_len = 1024;
  return d;
}
}  // namespace

TEST_CASE("GPT-2 124M has 124,439,808 parameters (unpadded vocab)") {
  CHECK(gpt_param_count(gpt2_124m()) == 124439808);
  GptDims padded = gpt2_124m();
  padded.padded_vocab = 50304;
  CHECK(gpt_param_count(padded) == 124439808 + 47 * 768);
}

TEST_CASE("param specs follow HF names, order, shapes and a dense layout") {
  GptDims d;
  d.n_layer = 3;
  d.n_head = 2;
  d.d_model = 8;
  d.vocab_size = 37;
  d.padded_vocab = 64;
  d.seq_len = 16;
  const std::vector<ParamSpec> specs = gpt_param_specs(d);
  REQUIRE(specs.size() == 2 + 12 * 3 + 2);
  CHECK(specs[0].name == "wte.weight");
  CHECK(specs[0].shape == std::vector<int64_t>{64, 8});
  CHECK(specs[1].name == "wpe.weight");
  CHECK(specs[1].shape == std::vector<int64_t>{16, 8});
  const std::vector<std::string> block = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                          "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
  const std::vector<std::vector<int64_t>> shapes = {{8}, {8}, {8, 24}, {24}, {8, 8}, {8}, {8}, {8}, {8, 32}, {32}, {32, 8}, {8}};
  // c_attn splits its (C, 3, C) and (3, C) views on the last dim: each rank its heads' q, k, v.
  const std::vector<int> tp_dims = {-1, -1, 2, 1, 0, -1, -1, -1, 1, 0, 0, -1};
  int64_t per_layer = 0;
  for (int l = 0; l < 3; ++l) {
    per_layer = 0;
    for (size_t i = 0; i < block.size(); ++i) {
      const ParamSpec& s = specs[2 + static_cast<size_t>(l) * 12 + i];
      CHECK(s.name == "h." + std::to_string(l) + "." + block[i]);
      CHECK(s.shape == shapes[i]);
      CHECK(s.global_shape == shapes[i]);
      CHECK(s.tp_split_dim == tp_dims[i]);
      CHECK(s.layer == l);
      CHECK(s.weight_decay == (s.shape.size() == 2));
      per_layer += s.numel;
    }
  }
  CHECK(per_layer == 12 * 8 * 8 + 13 * 8);
  CHECK(specs.back().name == "ln_f.bias");
  CHECK(specs.back().layer == 3);
  CHECK(specs[specs.size() - 2].name == "ln_f.weight");
  CHECK(specs[0].layer == -1);
  CHECK(specs[0].tp_split_dim == 0);
  CHECK(specs[0].weight_decay);
  CHECK(specs[1].tp_split_dim == -1);
  int64_t offset = 0;
  std::set<std::string> names;
  for (const ParamSpec& s : specs) {
    CHECK(s.offset == offset);
    int64_t n = 1;
    for (int64_t dim : s.shape) n *= dim;
    CHECK(s.numel == n);
    offset += s.numel;
    names.insert(s.name);
  }
  CHECK(names.size() == specs.size());
  CHECK(gpt_param_count(d) == offset);
}

TEST_CASE("invalid model dims are reported together as user errors") {
  GptDims d;
  d.n_layer = 0;
  d.n_head = 3;
  d.d_model = 16;
  d.vocab_size = 100;
  d.padded_vocab = 64;
  d.seq_len = 8;
  try {
    gpt_param_specs(d);
    FAIL("expected UserErrors");
  } catch (const UserErrors& e) {
    REQUIRE(e.errors().size() == 3);
    CHECK(e.errors()[0].find("model.n_layer") != std::string::npos);
    CHECK(e.errors()[1].find("model.n_head") != std::string::npos);
    CHECK(e.errors()[2].find("model.vocab_size") != std::string::npos);
  }
}

namespace {
GptDims tp_dims() {
  GptDims d;
  d.n_layer = 2;
  d.n_head = 4;
  d.d_model = 8;
  d.vocab_size = 37;
  d.padded_vocab = 48;
  d.seq_len = 6;
  return d;
}
}  // namespace

TEST_CASE("a TP rank's specs hold its slice of every split tensor and all of the replicated ones") {
  const GptDims d = tp_dims();
  const std::vector<ParamSpec> whole = gpt_param_specs(d);
  for (int t : {2, 4}) {
    for (int r = 0; r < t; ++r) {
      const std::vector<ParamSpec> mine = gpt_param_specs(d, {r, t});
      REQUIRE(mine.size() == whole.size());
      int64_t offset = 0;
      for (size_t i = 0; i < mine.size(); ++i) {
        const ParamSpec& s = mine[i];
        INFO(s.name << " TP " << t << " rank " << r);
        CHECK(s.name == whole[i].name);
        CHECK(s.global_shape == whole[i].shape);
        CHECK(s.offset == offset);
        offset += s.numel;
        CHECK(s.numel * (s.tp_sharded() ? t : 1) == whole[i].numel);
        CHECK(s.tp_split_dim == whole[i].tp_split_dim);
      }
      CHECK(mine[0].shape == std::vector<int64_t>{48 / t, 8});                  // wte: vocabulary rows
      CHECK(mine[4].shape == std::vector<int64_t>{8, 24 / t});                  // c_attn: q, k, v of its heads
      CHECK(mine[6].shape == std::vector<int64_t>{8 / t, 8});                   // attn c_proj: input rows
      CHECK(mine[7].shape == std::vector<int64_t>{8});                          // row-parallel bias: whole
      CHECK(mine[10].shape == std::vector<int64_t>{8, 32 / t});                 // c_fc: output columns
      CHECK(mine[12].shape == std::vector<int64_t>{32 / t, 8});                 // mlp c_proj: input rows
    }
  }
}

TEST_CASE("TP slices tile every global tensor exactly once, c_attn by heads") {
  const GptDims d = tp_dims();
  for (int t : {1, 2, 4}) {
    std::map<std::string, std::vector<int>> hits;  // global element → how many ranks hold it
    for (int r = 0; r < t; ++r) {
      for (const ParamSpec& s : gpt_param_specs(d, {r, t})) {
        std::vector<int>& h = hits[s.name];
        int64_t global = 1;
        for (int64_t g : s.global_shape) global *= g;
        h.resize(static_cast<size_t>(global));
        int64_t seen = 0;
        const TpPlacement place = tp_placement(s);
        for (const GlobalRun& run : tp_global_runs(s, 0, s.numel)) {
          for (int64_t i = 0; i < run.count; ++i) {
            CHECK(place.global_index(seen + i) == run.global_begin + i);
            ++h.at(static_cast<size_t>(run.global_begin + i));
          }
          seen += run.count;
        }
        CHECK(seen == s.numel);
        if (s.name == "h.0.attn.c_attn.weight" && t == 2) {
          // Row 0 of rank 1: q, k and v columns of heads 2 and 3 (columns 4..7 of each third).
          const std::vector<GlobalRun> row = tp_global_runs(s, 0, 12);
          REQUIRE(row.size() == 3);
          CHECK(row[0].global_begin == (r == 0 ? 0 : 4));
          CHECK(row[1].global_begin == (r == 0 ? 8 : 12));
          CHECK(row[2].global_begin == (r == 0 ? 16 : 20));
        }
      }
    }
    for (const auto& [name, h] : hits) {
      const bool replicated = name.find("ln_") != std::string::npos || name == "wpe.weight" ||
                              name.find("c_proj.bias") != std::string::npos;
      const int want = replicated ? t : 1;
      INFO(name << " TP " << t);
      CHECK(std::all_of(h.begin(), h.end(), [&](int n) { return n == want; }));
    }
  }
}

TEST_CASE("TP boxes of any flat range are the range's elements in order") {
  const GptDims d = tp_dims();
  for (const ParamSpec& s : gpt_param_specs(d, {1, 4})) {
    for (int64_t begin : {int64_t{0}, int64_t{1}, s.numel / 3}) {
      for (int64_t count : {s.numel - begin, std::min<int64_t>(5, s.numel - begin), (s.numel - begin) / 2}) {
        INFO(s.name << " [" << begin << ", +" << count << ")");
        const GlobalBoxes boxes = tp_global_boxes(s, begin, count);
        std::vector<int64_t> strides(boxes.view.size(), 1);
        for (size_t k = boxes.view.size(); k-- > 1;) strides[k - 1] = strides[k] * boxes.view[k];
        std::vector<int64_t> from_boxes;
        for (const ViewBox& box : boxes.boxes) {
          REQUIRE(box.offset.size() == boxes.view.size());
          // Row-major walk of the box, as a checkpoint reader packs it.
          std::vector<int64_t> at(box.shape.size(), 0);
          for (int64_t n = 0; n < box.numel(); ++n) {
            int64_t index = 0;
            for (size_t k = 0; k < at.size(); ++k) index += (box.offset[k] + at[k]) * strides[k];
            from_boxes.push_back(index);
            for (size_t k = at.size(); k-- > 0;) {
              if (++at[k] < box.shape[k]) break;
              at[k] = 0;
            }
          }
        }
        std::vector<int64_t> from_runs;
        for (const GlobalRun& run : tp_global_runs(s, begin, count)) {
          for (int64_t i = 0; i < run.count; ++i) from_runs.push_back(run.global_begin + i);
        }
        CHECK(from_boxes == from_runs);
        CHECK(boxes.boxes.size() <= 2 * std::max<size_t>(boxes.view.size(), 1) - 1);
      }
    }
  }
}

TEST_CASE("every TP slice starts from exactly the TP = 1 initial values") {
  const GptDims d = tp_dims();
  const std::vector<ParamSpec> whole = gpt_param_specs(d);
  for (size_t i = 0; i < whole.size(); ++i) {
    std::vector<float> global(static_cast<size_t>(whole[i].numel));
    gpt_init_values(d, whole[i], 7, 0, whole[i].numel, global.data());
    for (int r = 0; r < 4; ++r) {
      const ParamSpec s = gpt_param_specs(d, {r, 4})[i];
      std::vector<float> local(static_cast<size_t>(s.numel));
      gpt_init_values(d, s, 7, 0, s.numel, local.data());
      std::vector<float> expected;
      for (const GlobalRun& run : tp_global_runs(s, 0, s.numel)) {
        expected.insert(expected.end(), global.begin() + run.global_begin, global.begin() + run.global_begin + run.count);
      }
      INFO(s.name << " rank " << r);
      CHECK(local == expected);
      // A partial slice of the slice agrees with the whole slice.
      std::vector<float> part(static_cast<size_t>(s.numel / 2));
      gpt_init_values(d, s, 7, s.numel / 3, s.numel / 2, part.data());
      CHECK(std::equal(part.begin(), part.end(), local.begin() + s.numel / 3));
    }
  }
}

TEST_CASE("heads or a padded vocabulary that TP does not divide are user errors") {
  GptDims d = tp_dims();
  try {
    gpt_param_specs(d, {0, 3});  // 4 heads
    FAIL("expected UserErrors");
  } catch (const UserErrors& e) {
    REQUIRE(e.errors().size() == 1);
    CHECK(e.errors()[0] == "model.n_head 4 is not divisible by parallelism.tensor_model_parallel_size 3");
  }
  d.padded_vocab = 50;
  try {
    gpt_param_specs(d, {1, 4});
    FAIL("expected UserErrors");
  } catch (const UserErrors& e) {
    REQUIRE(e.errors().size() == 1);
    CHECK(e.errors()[0] == "padded vocabulary 50 is not divisible by parallelism.tensor_model_parallel_size 4");
  }
  d.padded_vocab = 48;
  CHECK_NOTHROW(gpt_param_specs(d, {3, 4}));
  CHECK_THROWS_AS(gpt_param_specs(d, {4, 4}), UserErrors);
}
