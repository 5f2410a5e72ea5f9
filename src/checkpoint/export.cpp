// HuggingFace GPT-2 export: the checkpoint's "model.<HF name>" tensors become a plain
// model.safetensors (F32, HF names, wte without the padding rows) plus a config.json that
// transformers' GPT2LMHeadModel loads. Tensors stream through one at a time.
#include <stdio.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>

#include "checkpoint/box.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"
#include "core/error.h"
#include "core/log.h"

namespace strata {
namespace {

struct ExportTensor {
  std::string hf_name;
  std::vector<int64_t> stored_shape;  // in the checkpoint
  std::vector<int64_t> export_shape;  // a leading box of stored_shape
};

std::vector<ExportTensor> gpt2_tensors(int64_t n_layer, int64_t c, int64_t vocab, int64_t padded_vocab,
                                       int64_t seq_len) {
  std::vector<ExportTensor> list = {{"wte.weight", {padded_vocab, c}, {vocab, c}},
                                    {"wpe.weight", {seq_len, c}, {seq_len, c}}};
  auto same = [&](const std::string& name, std::vector<int64_t> shape) { list.push_back({name, shape, shape}); };
  for (int64_t i = 0; i < n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    same(h + "ln_1.weight", {c});
    same(h + "ln_1.bias", {c});
    same(h + "attn.c_attn.weight", {c, 3 * c});
    same(h + "attn.c_attn.bias", {3 * c});
    same(h + "attn.c_proj.weight", {c, c});
    same(h + "attn.c_proj.bias", {c});
    same(h + "ln_2.weight", {c});
    same(h + "ln_2.bias", {c});
    same(h + "mlp.c_fc.weight", {c, 4 * c});
    same(h + "mlp.c_fc.bias", {4 * c});
    same(h + "mlp.c_proj.weight", {4 * c, c});
    same(h + "mlp.c_proj.bias", {c});
  }
  same("ln_f.weight", {c});
  same("ln_f.bias", {c});
  return list;
}

// Writes model.safetensors into out_dir (created if need be) through a temporary file; a failure
// part-way (a checkpoint file that fails its checksum, a full disk) leaves neither the temporary
// file nor a folder the export created.
std::string write_weights(const SafetensorsWriter& writer, const std::string& out_dir) {
  if (ckpt::path_exists(out_dir) && !ckpt::is_directory(out_dir)) {
    throw UserError("export: " + out_dir + ": exists and is not a directory");
  }
  const bool created = !ckpt::path_exists(out_dir);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw UserError("export: cannot create " + out_dir + ": " + ec.message());
  const std::string weights = ckpt::join_path(out_dir, "model.safetensors");
  const std::string weights_tmp = weights + ".tmp";
  try {
    writer.write(weights_tmp);
  } catch (...) {
    std::filesystem::remove(weights_tmp, ec);
    if (created) std::filesystem::remove(out_dir, ec);  // only if still empty
    throw;
  }
  if (::rename(weights_tmp.c_str(), weights.c_str()) != 0) {
    throw UserError(weights + ": cannot rename " + weights_tmp + " to it: " + std::strerror(errno));
  }
  ckpt::fsync_directory(out_dir);
  return weights;
}

// A sharded model an earlier save left in the folder (model.safetensors.index.json and its
// model-NNNNN-of-NNNNN.safetensors) is removed, as transformers' save_pretrained removes stale
// shards: beside the new model.safetensors it would be a second, older model in the folder.
void remove_stale_shards(const std::string& out_dir) {
  const std::regex shard(R"(model-\d+-of-\d+\.safetensors)");
  std::vector<std::filesystem::path> stale;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "model.safetensors.index.json" || std::regex_match(name, shard)) stale.push_back(entry.path());
  }
  for (const auto& path : stale) {
    if (!std::filesystem::remove(path, ec)) {
      throw UserError("export: cannot remove the stale " + path.string() + ": " + ec.message());
    }
    log_info("export: removed {}, left by an earlier sharded save", path.string());
  }
  if (!stale.empty()) ckpt::fsync_directory(out_dir);
}

// The config.json transformers' GPT2LMHeadModel loads the weights with. GPT-2's tokenizer ends a
// text with <|endoftext|> (50256), which is its bos and eos; another vocabulary has no known one.
nlohmann::ordered_json gpt2_config(const nlohmann::json& model, int64_t n_layer, int64_t n_head, int64_t d_model,
                                   int64_t vocab, int64_t seq_len) {
  const nlohmann::json end_of_text = vocab == 50257 ? nlohmann::json(50256) : nlohmann::json(nullptr);
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", vocab},
          {"n_positions", seq_len},
          {"n_ctx", seq_len},
          {"n_embd", d_model},
          {"n_layer", n_layer},
          {"n_head", n_head},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", model.value("layer_norm_epsilon", 1e-5)},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"bos_token_id", end_of_text},
          {"eos_token_id", end_of_text},
          {"tie_word_embeddings", true},
          {"torch_dtype", "float32"}};
}

}  // namespace

void export_huggingface(const std::string& checkpoint_path, const std::string& out_dir) {
  const CheckpointReader reader = CheckpointReader::open(checkpoint_path, "export");
  const std::string where = reader.path() + "/manifest.json";
  const nlohmann::json& meta = reader.global_meta();
  if (!meta.is_object() || !meta.contains("model") || !meta["model"].is_object()) {
    throw UserError(where + ": global_meta has no \"model\" section; this checkpoint cannot be exported");
  }
  const nlohmann::json& model = meta["model"];
  auto dim = [&](const char* key) -> int64_t {
    if (!model.contains(key) || !model[key].is_number_integer() || model[key].get<int64_t>() <= 0) {
      throw UserError(where + ": global_meta.model." + key + " is missing or not a positive integer");
    }
    return model[key].get<int64_t>();
  };
  const int64_t n_layer = dim("n_layer"), n_head = dim("n_head"), d_model = dim("d_model");
  const int64_t vocab = dim("vocab_size"), padded_vocab = dim("padded_vocab"), seq_len = dim("seq_len");
  if (vocab > padded_vocab || d_model % n_head != 0) {
    throw UserError(where + ": global_meta.model is inconsistent (vocab_size " + std::to_string(vocab) +
                    " > padded_vocab " + std::to_string(padded_vocab) + ", or d_model not a multiple of n_head)");
  }

  SafetensorsWriter writer;
  for (const ExportTensor& t : gpt2_tensors(n_layer, d_model, vocab, padded_vocab, seq_len)) {
    const std::string stored = "model." + t.hf_name;
    if (!reader.contains(stored)) throw UserError(where + ": parameter '" + stored + "' is missing; cannot export");
    if (reader.info(stored).global_shape != t.stored_shape) {
      throw UserError(where + ": parameter '" + stored + "' has shape " +
                      ckpt::shape_string(reader.info(stored).global_shape) + ", expected " +
                      ckpt::shape_string(t.stored_shape) + " from global_meta.model");
    }
    writer.add_streamed(t.hf_name, DType::F32, t.export_shape, [&reader, stored, t, &where](void* buffer) {
      reader.read_box(stored, std::vector<int64_t>(t.export_shape.size(), 0), t.export_shape, DType::F32, buffer);
      // A resume refuses such a checkpoint; a model that computes NaN is no export either.
      int64_t n = 1;
      for (int64_t d : t.export_shape) n *= d;
      const float* values = static_cast<const float*>(buffer);
      const float* bad = std::find_if(values, values + n, [](float v) { return !std::isfinite(v); });
      if (bad != values + n) {
        throw UserError(fmt::format("{}: parameter '{}' holds a non-finite value ({} at element {}); cannot export",
                                    where, stored, *bad, bad - values));
      }
    });
  }
  writer.set_metadata("format", "pt");
  const std::string weights = write_weights(writer, out_dir);
  remove_stale_shards(out_dir);
  ckpt::write_file_atomic(ckpt::join_path(out_dir, "config.json"),
                          gpt2_config(model, n_layer, n_head, d_model, vocab, seq_len).dump(2) + "\n");
  log_info("export: wrote {} and config.json ({} layers, vocab {}) from step {}", weights, n_layer, vocab,
           reader.step());
}

}  // namespace strata
