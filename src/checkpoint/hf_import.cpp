// HuggingFace GPT-2 weights as a checkpoint: a folder's model.safetensors (or the shards its
// model.safetensors.index.json names) read through the CheckpointReader, each tensor one whole
// piece named "model.<HF name>", so a run of any layout loads the boxes it needs as it would
// from a strata checkpoint. config.json gives the model's dimensions.
#include <fmt/core.h>

#include <algorithm>
#include <set>

#include "checkpoint/reader_impl.h"

namespace strata {
namespace {

constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

const std::set<std::string>& layer_tensor_suffixes() {
  static const std::set<std::string> suffixes = {
      "ln_1.weight",        "ln_1.bias",          "attn.c_attn.weight", "attn.c_attn.bias",
      "attn.c_proj.weight", "attn.c_proj.bias",   "ln_2.weight",        "ln_2.bias",
      "mlp.c_fc.weight",    "mlp.c_fc.bias",      "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  return suffixes;
}

// Buffers and tied copies a HuggingFace GPT-2 file may carry besides its parameters (lm_head.weight
// is wte's: transformers ties them on loading unless tie_word_embeddings is false, refused above).
bool is_buffer(const std::string& name, const std::string& suffix, int64_t layer) {
  return name == "lm_head.weight" || (layer >= 0 && (suffix == "attn.bias" || suffix == "attn.masked_bias"));
}

// The safetensors files of the folder: model.safetensors, or else the shards its index names
// (transformers' own order, so a folder holding both is the same model here as there).
std::vector<std::string> weight_files(const std::string& dir, const std::string& where) {
  const std::string index_path = ckpt::join_path(dir, kIndexFile);
  if (ckpt::path_exists(ckpt::join_path(dir, kWeightsFile))) return {kWeightsFile};
  if (!ckpt::path_exists(index_path)) {
    throw UserError(fmt::format("{}: neither {} nor {} is there: not a HuggingFace model folder", where, kWeightsFile,
                                kIndexFile));
  }
  std::set<std::string> files;
  try {
    const nlohmann::json index = nlohmann::json::parse(ckpt::read_text_file(index_path));
    for (const auto& [name, file] : index.at("weight_map").items()) files.insert(file.get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    throw UserError(fmt::format("{}: {}: malformed index ({})", where, kIndexFile, e.what()));
  }
  for (const std::string& f : files) {
    if (f.find('/') != std::string::npos || !ckpt::path_exists(ckpt::join_path(dir, f))) {
      throw UserError(fmt::format("{}: {} names {}, which is not a file of the folder", where, kIndexFile, f));
    }
  }
  return {files.begin(), files.end()};
}

// The keys of a GPT-2 config.json that change the function the weights compute, with the one
// value strata builds (absent keys take transformers' GPT-2 defaults, which are these): a folder
// that sets another is a different model, which loaded here would train silently as GPT-2.
void check_gpt2_architecture(const nlohmann::json& c, const std::string& where) {
  auto refuse = [&](const char* key, const std::string& why) {
    throw UserError(fmt::format("{}: config.json sets {} {}; {}", where, key, c.at(key).dump(), why));
  };
  if (c.contains("model_type") && c["model_type"] != "gpt2") refuse("model_type", "strata imports GPT-2 (gpt2) only");
  if (c.contains("activation_function") && c["activation_function"] != "gelu_new" &&
      c["activation_function"] != "gelu_pytorch_tanh") {
    refuse("activation_function", "strata's MLP uses GELU's tanh form (gelu_new)");
  }
  if (c.contains("layer_norm_epsilon") &&
      !(c["layer_norm_epsilon"].is_number() && c["layer_norm_epsilon"].get<double>() == 1e-5)) {
    refuse("layer_norm_epsilon", "strata's layernorms use 1e-5");
  }
  if (c.contains("tie_word_embeddings") && c["tie_word_embeddings"] != true) {
    refuse("tie_word_embeddings", "strata's output layer is the token embedding (wte), so lm_head.weight cannot differ");
  }
  if (c.contains("n_inner") && !c["n_inner"].is_null() && c["n_inner"] != 4 * c.at("n_embd").get<int64_t>()) {
    refuse("n_inner", "strata's MLP is 4 × n_embd wide");
  }
  if (c.contains("scale_attn_weights") && c["scale_attn_weights"] != true) {
    refuse("scale_attn_weights", "strata scales the attention scores by 1/sqrt(head size)");
  }
  if (c.contains("scale_attn_by_inverse_layer_idx") && c["scale_attn_by_inverse_layer_idx"] != false) {
    refuse("scale_attn_by_inverse_layer_idx", "strata does not scale attention by layer");
  }
}

// n_layer, n_head, d_model, vocab_size, seq_len from config.json (GPT-2's key names), after
// checking that its architecture is the one strata builds.
nlohmann::json model_dims(const std::string& dir, const std::string& where) {
  const std::string path = ckpt::join_path(dir, "config.json");
  if (!ckpt::path_exists(path)) throw UserError(fmt::format("{}: no config.json: not a HuggingFace model folder", where));
  try {
    const nlohmann::json c = nlohmann::json::parse(ckpt::read_text_file(path));
    check_gpt2_architecture(c, where);
    return {{"n_layer", c.at("n_layer")}, {"n_head", c.at("n_head")},         {"d_model", c.at("n_embd")},
            {"vocab_size", c.at("vocab_size")}, {"seq_len", c.at("n_positions")}};
  } catch (const nlohmann::json::exception& e) {
    throw UserError(fmt::format("{}: config.json is not a GPT-2 configuration ({})", where, e.what()));
  }
}

// The checkpoint name ("model.<HF name>") of one of the file's tensors, or "" for a buffer; a
// name that is no GPT-2 parameter, or a dtype no parameter has, is refused.
std::string parameter_key(const SafetensorsEntry& e, const std::string& where) {
  const std::string name = e.name.rfind("transformer.", 0) == 0 ? e.name.substr(12) : e.name;
  std::string suffix;
  const int64_t layer = gpt2_layer_of(name, &suffix);
  if (is_buffer(name, suffix, layer)) return "";
  const bool known = layer >= 0 ? layer_tensor_suffixes().count(suffix) > 0
                                : (name == "wte.weight" || name == "wpe.weight" || name == "ln_f.weight" ||
                                   name == "ln_f.bias");
  if (!known) throw UserError(fmt::format("{}: tensor {} is not a GPT-2 parameter", where, e.name));
  if (e.dtype != DType::F32 && e.dtype != DType::BF16 && e.dtype != DType::F16) {
    throw UserError(fmt::format("{}: tensor {} is {}; parameters must be F32, BF16 or F16", where, e.name,
                                dtype_name(e.dtype)));
  }
  return "model." + name;
}

}  // namespace

int64_t gpt2_layer_of(const std::string& name, std::string* suffix) {
  if (name.rfind("h.", 0) != 0) return -1;
  const size_t dot = name.find('.', 2);
  if (dot == std::string::npos || dot == 2) return -1;
  const std::string digits = name.substr(2, dot - 2);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) || digits.size() > 9) {
    return -1;
  }
  *suffix = name.substr(dot + 1);
  return std::stoll(digits);
}

CheckpointReader CheckpointReader::open_huggingface(const std::string& dir, const std::string& source_key) {
  const std::string where = source_key + ": " + dir;
  if (!ckpt::is_directory(dir)) throw UserError(where + ": not a directory");
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->verify = false;  // no checksums: the files are the user's
  impl->global_meta = {{"model", model_dims(dir, where)}};
  impl->rank_states.push_back(nlohmann::json::object());
  for (const std::string& name : weight_files(dir, where)) {
    Impl::File file;
    file.name = name;
    impl->files.push_back(std::move(file));
    const size_t index = impl->files.size() - 1;
    std::vector<SafetensorsEntry> entries;
    try {
      entries = impl->reader(index).entries();
    } catch (const UserError& e) {  // the file's own fault (a bad header): said as model.init_from's
      throw UserError(source_key + ": " + first_message(e));
    }
    for (const SafetensorsEntry& e : entries) {
      const std::string key = parameter_key(e, where);
      if (key.empty()) continue;
      Impl::Tensor tensor;
      tensor.info.dtype = e.dtype;
      tensor.info.global_shape = e.shape;
      tensor.pieces.push_back({index, e.name, e.shape, std::vector<int64_t>(e.shape.size(), 0), e.shape});
      if (!impl->tensors.emplace(key, std::move(tensor)).second) {
        throw UserError(fmt::format("{}: tensor {} appears twice", where, key.substr(6)));
      }
    }
  }
  return CheckpointReader(std::move(impl));
}

}  // namespace strata
