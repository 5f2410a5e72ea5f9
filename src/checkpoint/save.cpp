// Collective sharded save. Three barriers split it into: rank 0 prepares step_X.tmp; every
// rank writes its safetensors file and record; rank 0 writes the manifest, publishes the dir
// by rename and `latest`, and prunes. Errors are carried across barriers rather than thrown
// early, so a failing rank never leaves the others waiting forever.
#include <fcntl.h>
#include <fmt/core.h>
#include <stdio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <set>

#include "checkpoint/box.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"
#include "checkpoint/manifest.h"
#include "checkpoint/retention.h"
#include "core/error.h"

namespace strata {
namespace fs = std::filesystem;

std::string checkpoint_dir_name(int64_t step) { return fmt::format("step_{:08d}", step); }

namespace ckpt {

int64_t parse_step_dir_name(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "step_") != 0 || name.size() > 5 + 18) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string manifest_checksum_text(const std::string& manifest) {
  Checksum64 sum;
  sum.update(manifest.data(), manifest.size());
  return std::string(kChecksumName) + " " + hex64(sum.digest()) + "\n";
}

std::string printable(const std::string& text, size_t limit) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < limit; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
    }
  }
  if (text.size() > limit) out += "...";
  return out;
}

}  // namespace ckpt

namespace {

void check_piece(const TensorPiece& piece) {
  const std::string where = "save_checkpoint: piece of '" + piece.name + "'";
  if (piece.name.empty()) throw std::invalid_argument("save_checkpoint: a piece has an empty tensor name");
  if (piece.dtype != DType::F32 && piece.dtype != DType::BF16 && piece.dtype != DType::F16 &&
      piece.dtype != DType::I32) {
    throw std::invalid_argument(where + ": dtype " + dtype_name(piece.dtype) + " is not checkpointable");
  }
  int64_t numel = 0, view_numel = 0, piece_numel = 0;
  const std::vector<int64_t>& view = piece.view_shape.empty() ? piece.global_shape : piece.view_shape;
  if (!ckpt::checked_numel(piece.global_shape, &numel) || !ckpt::checked_numel(view, &view_numel) ||
      numel != view_numel) {
    throw std::invalid_argument(where + ": view " + ckpt::shape_string(view) + " is not a view of global shape " +
                                ckpt::shape_string(piece.global_shape));
  }
  const std::string problem = ckpt::box_problem(view, piece.offset, piece.shape);
  if (!problem.empty()) throw std::invalid_argument(where + ": " + problem);
  ckpt::checked_numel(piece.shape, &piece_numel);
  if (piece_numel > 0 && piece.data == nullptr && !piece.produce)
    throw std::invalid_argument(where + ": data is null");
}

nlohmann::json piece_json(const TensorPiece& piece, const std::string& key) {
  nlohmann::json j = {{"name", piece.name},
                      {"key", key},
                      {"dtype", dtype_name(piece.dtype)},
                      {"global_shape", piece.global_shape},
                      {"offset", piece.offset},
                      {"shape", piece.shape}};
  if (!piece.view_shape.empty() && piece.view_shape != piece.global_shape) j["view"] = piece.view_shape;
  return j;
}

// Writes this rank's safetensors file, then its record (last: its presence tells rank 0 the
// file is complete). Returns the file's checksum.
std::string write_rank_files(const std::string& tmp_dir, int rank, int64_t step, const std::vector<TensorPiece>& pieces,
                             const nlohmann::json& rank_state) {
  for (const TensorPiece& piece : pieces) check_piece(piece);
  SafetensorsWriter writer;
  std::set<std::string> keys;
  nlohmann::json piece_list = nlohmann::json::array();
  for (const TensorPiece& piece : pieces) {
    std::string key = piece.name;
    for (int k = 1; keys.count(key); ++k) key = piece.name + "#" + std::to_string(k);
    keys.insert(key);
    if (piece.produce) {
      writer.add_streamed(key, piece.dtype, piece.shape, piece.produce);
    } else {
      writer.add(key, piece.dtype, piece.shape, piece.data);
    }
    piece_list.push_back(piece_json(piece, key));
  }
  writer.set_metadata("format", "pt");
  writer.set_metadata("strata_step", std::to_string(step));
  writer.set_metadata("strata_rank", std::to_string(rank));
  const std::string file = ckpt::rank_file_name(rank);
  const SafetensorsWriter::Written written = writer.write(ckpt::join_path(tmp_dir, file));
  const nlohmann::json record = {{"rank", rank},
                                 {"file", file},
                                 {"bytes", written.bytes},
                                 {"checksum", ckpt::hex64(written.checksum)},
                                 {"pieces", std::move(piece_list)},
                                 {"rank_state", rank_state}};
  ckpt::write_file_atomic(ckpt::join_path(tmp_dir, ckpt::rank_record_name(rank)), record.dump());
  return ckpt::hex64(written.checksum);
}

// Rank 0: every tensor must have one dtype and shape across ranks, and its pieces together
// must cover every element (a gap would only surface at the next resume).
void add_tensor_pieces(nlohmann::json& tensors, const nlohmann::json& record, const std::string& file) {
  for (const nlohmann::json& p : record.at("pieces")) {
    const std::string name = p.at("name").get<std::string>();
    nlohmann::json piece = {{"file", file}, {"key", p.at("key")}, {"offset", p.at("offset")}, {"shape", p.at("shape")}};
    if (p.contains("view")) piece["view"] = p.at("view");
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      tensors[name] = {{"dtype", p.at("dtype")}, {"shape", p.at("global_shape")}, {"pieces", nlohmann::json::array()}};
      it = tensors.find(name);
    } else if ((*it)["dtype"] != p.at("dtype") || (*it)["shape"] != p.at("global_shape")) {
      throw std::runtime_error("save_checkpoint: tensor '" + name + "' is saved as " + p.at("dtype").dump() + " " +
                               p.at("global_shape").dump() + " by " + file + " but as " + (*it)["dtype"].dump() + " " +
                               (*it)["shape"].dump() + " by another rank");
    }
    (*it)["pieces"].push_back(std::move(piece));
  }
}

void check_coverage(const std::string& name, const nlohmann::json& tensor) {
  const auto shape = tensor.at("shape").get<std::vector<int64_t>>();
  int64_t numel = 0;
  ckpt::checked_numel(shape, &numel);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const nlohmann::json& p : tensor.at("pieces")) {
    const auto view = p.contains("view") ? p.at("view").get<std::vector<int64_t>>() : shape;
    for (const ckpt::ElementRun& run :
         ckpt::box_runs(view, p.at("offset").get<std::vector<int64_t>>(), p.at("shape").get<std::vector<int64_t>>())) {
      ranges.emplace_back(run.begin, run.begin + run.length);
    }
  }
  std::sort(ranges.begin(), ranges.end());
  int64_t covered = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > covered) break;
    covered = std::max(covered, hi);
  }
  if (covered < numel) {
    throw std::runtime_error("save_checkpoint: tensor '" + name + "' " + ckpt::shape_string(shape) + ": element " +
                             ckpt::shape_string(ckpt::unravel(covered, shape)) + " is in no rank's pieces");
  }
}

// Moves tmp_dir to final_dir. An existing final_dir (the same step saved again) is swapped
// out atomically where the filesystem allows, so `latest` never names a missing dir.
void publish_directory(const std::string& tmp_dir, const std::string& final_dir) {
  if (!ckpt::path_exists(final_dir)) {
    if (::rename(tmp_dir.c_str(), final_dir.c_str()) != 0) {
      throw UserError(final_dir + ": cannot rename " + tmp_dir + " to it: " + std::strerror(errno));
    }
    return;
  }
  // Once published, a leftover of the old dir is only clutter: prune removes *.tmp later.
  std::error_code ignored;
  if (::renameat2(AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(tmp_dir, ignored);  // now holds the replaced checkpoint
    return;
  }
  const std::string aside = final_dir + ".replaced" + ckpt::kTmpSuffix;
  fs::remove_all(aside);
  if (::rename(final_dir.c_str(), aside.c_str()) != 0 || ::rename(tmp_dir.c_str(), final_dir.c_str()) != 0) {
    throw UserError(final_dir + ": cannot replace it with " + tmp_dir + ": " + std::strerror(errno));
  }
  fs::remove_all(aside, ignored);
}

// The run a checkpoint belongs to (global_meta "run_id"); "" when the caller names none.
std::string run_id_of(const nlohmann::json& global_meta) {
  if (!global_meta.is_object() || !global_meta.contains("run_id") || !global_meta["run_id"].is_string()) return "";
  return global_meta["run_id"].get<std::string>();
}

std::string error_text(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

nlohmann::json read_json_file(const std::string& path) {
  const std::string text = ckpt::read_text_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": not valid JSON (" + e.what() + ")");
  }
}

void finish_save(const std::string& root, const std::string& tmp_dir, const std::string& final_dir, int64_t step,
                 int world_size, const nlohmann::json& global_meta, int keep_last) {
  nlohmann::json files = nlohmann::json::array(), rank_states = nlohmann::json::array();
  nlohmann::json tensors = nlohmann::json::object();
  for (int r = 0; r < world_size; ++r) {
    const std::string record_path = ckpt::join_path(tmp_dir, ckpt::rank_record_name(r));
    if (!ckpt::path_exists(record_path)) {
      const std::string error_path = ckpt::join_path(tmp_dir, ckpt::rank_error_name(r));
      const std::string why = ckpt::path_exists(error_path) ? ckpt::read_text_file(error_path)
                                                            : "it wrote nothing (is " + root + " shared by all ranks?)";
      throw UserError("checkpoint save to " + tmp_dir + " failed on rank " + std::to_string(r) + ": " + why);
    }
    const nlohmann::json record = read_json_file(record_path);
    const std::string file = record.at("file").get<std::string>();
    const uint64_t bytes = record.at("bytes").get<uint64_t>();
    if (fs::file_size(ckpt::join_path(tmp_dir, file)) != bytes) {
      throw UserError(ckpt::join_path(tmp_dir, file) + ": size differs from what rank " + std::to_string(r) +
                      " wrote (is " + root + " shared by all ranks?)");
    }
    files.push_back({{"file", file}, {"rank", r}, {"bytes", record.at("bytes")}, {"checksum", record.at("checksum")}});
    rank_states.push_back(record.at("rank_state"));
    add_tensor_pieces(tensors, record, file);
  }
  for (const auto& [name, tensor] : tensors.items()) check_coverage(name, tensor);
  const nlohmann::json manifest = {
      {"format", ckpt::kFormatName}, {"format_version", ckpt::kFormatVersion}, {"step", step},
      {"world_size", world_size},    {"checksum", ckpt::kChecksumName},        {"global_meta", global_meta},
      {"files", std::move(files)},   {"rank_state", std::move(rank_states)},   {"tensors", std::move(tensors)}};
  const std::string manifest_text = manifest.dump(1);
  ckpt::write_file_atomic(ckpt::join_path(tmp_dir, ckpt::kManifestFile), manifest_text);
  ckpt::write_file_atomic(ckpt::join_path(tmp_dir, ckpt::kManifestChecksumFile),
                          ckpt::manifest_checksum_text(manifest_text));
  for (int r = 0; r < world_size; ++r) fs::remove(ckpt::join_path(tmp_dir, ckpt::rank_record_name(r)));
  ckpt::fsync_directory(tmp_dir);
  publish_directory(tmp_dir, final_dir);
  ckpt::fsync_directory(root);
  ckpt::write_file_atomic(ckpt::join_path(root, ckpt::kLatestFile), checkpoint_dir_name(step) + "\n");
  ckpt::prune(root, step, keep_last, run_id_of(global_meta));
}

// True when the published manifest lists this rank's file with the checksum it wrote (an
// older checkpoint of the same step left in place by a failed save would not).
bool save_confirmed(const std::string& final_dir, int rank, const std::string& checksum) {
  const std::string manifest_path = ckpt::join_path(final_dir, ckpt::kManifestFile);
  if (!ckpt::path_exists(manifest_path)) return false;
  const nlohmann::json manifest = read_json_file(manifest_path);
  const nlohmann::json& files = manifest.at("files");
  return static_cast<size_t>(rank) < files.size() && files[static_cast<size_t>(rank)].at("checksum") == checksum;
}

}  // namespace

std::string save_checkpoint(const std::string& root, int64_t step, const SaveContext& context,
                            const std::vector<TensorPiece>& pieces, const nlohmann::json& rank_state,
                            const nlohmann::json& global_meta, int keep_last) {
  if (context.world_size < 1 || context.rank < 0 || context.rank >= context.world_size) {
    throw std::invalid_argument(
        fmt::format("save_checkpoint: rank {} of world size {}", context.rank, context.world_size));
  }
  if (context.world_size > 1 && !context.barrier) {
    throw std::invalid_argument("save_checkpoint: a barrier is required when world_size > 1");
  }
  if (step < 0 || keep_last < 0) throw std::invalid_argument("save_checkpoint: negative step or keep_last");
  auto barrier = [&] {
    if (context.barrier) context.barrier();
  };
  const std::string final_dir = ckpt::join_path(root, checkpoint_dir_name(step));
  const std::string tmp_dir = final_dir + ckpt::kTmpSuffix;
  const bool leader = context.rank == 0;
  std::exception_ptr error;
  std::string checksum;
  uint64_t my_bytes = 0;
  for (const TensorPiece& piece : pieces) {
    uint64_t n = dtype_size(piece.dtype);
    for (int64_t d : piece.shape) n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
    my_bytes += n;
  }
  const uint64_t all_bytes = context.sum_over_ranks ? context.sum_over_ranks(my_bytes)
                                                    : my_bytes * static_cast<uint64_t>(context.world_size);

  if (leader) {
    try {
      fs::create_directories(root);
      fs::remove_all(tmp_dir);  // a leftover of an interrupted save of this same step
      ckpt::ensure_room(root, step, keep_last, run_id_of(global_meta), all_bytes);
      fs::create_directory(tmp_dir);
    } catch (const fs::filesystem_error& e) {
      error = std::make_exception_ptr(UserError(std::string("checkpoint directory ") + tmp_dir + ": " + e.what()));
    } catch (...) {
      error = std::current_exception();
    }
  }
  barrier();
  if (!error) {
    try {
      if (!ckpt::is_directory(tmp_dir)) {
        throw UserError(tmp_dir + ": does not exist (rank 0 could not create it, or it is not on a shared filesystem)");
      }
      checksum = write_rank_files(tmp_dir, context.rank, step, pieces, rank_state);
    } catch (...) {
      error = std::current_exception();
      try {
        ckpt::write_file_atomic(ckpt::join_path(tmp_dir, ckpt::rank_error_name(context.rank)), error_text(error));
      } catch (...) {  // rank 0 then reports that this rank wrote nothing
      }
    }
  }
  barrier();
  if (leader && !error) {
    try {
      finish_save(root, tmp_dir, final_dir, step, context.world_size, global_meta, keep_last);
    } catch (const fs::filesystem_error& e) {
      error = std::make_exception_ptr(UserError(std::string("checkpoint save to ") + root + ": " + e.what()));
    } catch (...) {
      error = std::current_exception();
    }
  }
  barrier();
  if (error) {
    // Every rank is past its writes: a partial save would only fill the disk for the next try.
    std::error_code ignored;
    if (leader) fs::remove_all(tmp_dir, ignored);
    std::rethrow_exception(error);
  }
  if (!leader && !save_confirmed(final_dir, context.rank, checksum)) {
    throw UserError("checkpoint save of step " + std::to_string(step) + " to " + root +
                    " failed (rank 0 reports the cause)");
  }
  return final_dir;
}

}  // namespace strata
