// Resharding load. The manifest says which boxes of each tensor every file holds; a request
// for any box (in any view) is met piece by piece through run intersection, each element read
// once even when pieces overlap, and a gap in coverage is reported by its coordinates.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include "checkpoint/box.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"
#include "checkpoint/manifest.h"
#include "checkpoint/reader_impl.h"
#include "core/error.h"

namespace strata {
namespace fs = std::filesystem;

int64_t TensorInfo::numel() const {
  int64_t n = 0;
  ckpt::checked_numel(global_shape, &n);
  return n;
}

std::optional<std::string> find_latest_checkpoint(const std::string& root) {
  const std::string latest_path = ckpt::join_path(root, ckpt::kLatestFile);
  if (ckpt::path_exists(latest_path)) {
    std::string name = ckpt::read_text_file(latest_path);
    while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
    if (ckpt::parse_step_dir_name(name) < 0) {
      throw UserError(latest_path + " holds '" + ckpt::printable(name) + "', which is not the name of a step dir "
                      "(step_ and digits); delete " + latest_path + " or write the name of a complete step dir into it");
    }
    const std::string dir = ckpt::join_path(root, name);
    if (!ckpt::path_exists(ckpt::join_path(dir, ckpt::kManifestFile))) {
      throw UserError(latest_path + " names '" + name + "', which is not a complete checkpoint (no " +
                      ckpt::join_path(dir, ckpt::kManifestFile) + "); delete " + latest_path +
                      " or write the name of a complete step dir into it");
    }
    return dir;
  }
  if (!ckpt::is_directory(root)) return std::nullopt;
  int64_t best_step = -1;
  std::string best;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    const int64_t step = ckpt::parse_step_dir_name(entry.path().filename().string());
    if (step > best_step && ckpt::path_exists((entry.path() / ckpt::kManifestFile).string())) {
      best_step = step;
      best = entry.path().string();
    }
  }
  if (best_step < 0) return std::nullopt;
  return best;
}

namespace {

// The manifest must be the one the save wrote: its checksum sidecar (format_version 2 on)
// matches its bytes, and its step is the one its dir is named after. An edited step, optimizer
// step count or loader position would otherwise resume a run silently in the wrong place.
void check_manifest_integrity(const std::string& dir, const std::string& text, const nlohmann::json& manifest) {
  const std::string manifest_path = ckpt::join_path(dir, ckpt::kManifestFile);
  if (manifest.is_object() && manifest.value("format_version", 0) >= 2) {
    const std::string sidecar = ckpt::join_path(dir, ckpt::kManifestChecksumFile);
    if (!ckpt::path_exists(sidecar)) {
      throw UserError(sidecar + ": missing; it guards " + manifest_path +
                      " against changes, so this checkpoint cannot be trusted (restore the file, or use "
                      "another checkpoint)");
    }
    if (ckpt::read_text_file(sidecar) != ckpt::manifest_checksum_text(text)) {
      throw UserError(manifest_path + ": its bytes do not match " + sidecar +
                      ": the manifest was edited or damaged after the save; use another checkpoint (or "
                      "restore the original manifest)");
    }
  }
  const int64_t named = ckpt::parse_step_dir_name(fs::path(dir).filename().string());
  if (named >= 0 && manifest.is_object() && manifest.contains("step") && manifest["step"].is_number_integer() &&
      manifest["step"].get<int64_t>() != named) {
    throw UserError(manifest_path + ": says step " + manifest["step"].dump() + " but its dir is " +
                    fs::path(dir).filename().string() + "; the checkpoint was edited or moved");
  }
}

std::string resolve_checkpoint_dir(const std::string& path, const std::string& source_key) {
  if (!ckpt::path_exists(path)) throw UserError(source_key + ": " + path + ": no such file or directory");
  if (!ckpt::is_directory(path)) {
    if (fs::path(path).filename() == ckpt::kManifestFile) return ckpt::parent_directory(path);
    throw UserError(source_key + ": " + path + ": not a checkpoint directory");
  }
  if (ckpt::path_exists(ckpt::join_path(path, ckpt::kManifestFile))) return path;
  std::optional<std::string> latest;
  try {
    latest = find_latest_checkpoint(path);
  } catch (const UserError& e) {
    throw UserError(source_key + ": " + e.what());
  }
  if (!latest)
    throw UserError(source_key + ": " + path + ": no checkpoint found (no manifest.json and no latest file)");
  return *latest;
}

std::vector<int64_t> dims(const nlohmann::json& value) { return value.get<std::vector<int64_t>>(); }

// Removes from `copy` what `covered` already holds (pieces may overlap), appends the rest to
// `out`, and marks the copy's destination range as covered.
void take_uncovered(std::map<int64_t, int64_t>& covered, const ckpt::ElementCopy& copy,
                    std::vector<ckpt::ElementCopy>& out) {
  const int64_t lo = copy.dst, hi = copy.dst + copy.count;
  int64_t pos = lo;
  auto it = covered.upper_bound(pos);
  if (it != covered.begin() && std::prev(it)->second > pos) pos = std::prev(it)->second;
  while (pos < hi) {
    it = covered.lower_bound(pos);
    const int64_t gap_end = it == covered.end() ? hi : std::min(it->first, hi);
    if (gap_end > pos) out.push_back({pos, copy.src + (pos - lo), gap_end - pos});
    pos = it == covered.end() ? hi : std::max(gap_end, it->second);
  }
  // Insert [lo, hi), merging with every interval it touches.
  int64_t new_lo = lo, new_hi = hi;
  it = covered.upper_bound(lo);
  if (it != covered.begin() && std::prev(it)->second >= lo) --it;
  while (it != covered.end() && it->first <= hi) {
    new_lo = std::min(new_lo, it->first);
    new_hi = std::max(new_hi, it->second);
    it = covered.erase(it);
  }
  covered.emplace(new_lo, new_hi);
}

bool is_float(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::F16; }

}  // namespace

CheckpointReader::CheckpointReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;
CheckpointReader::~CheckpointReader() = default;

CheckpointReader CheckpointReader::open(const std::string& path, const std::string& source_key, bool verify_checksums) {
  auto impl = std::make_unique<Impl>();
  impl->dir = resolve_checkpoint_dir(path, source_key);
  impl->verify = verify_checksums;
  const std::string manifest_path = ckpt::join_path(impl->dir, ckpt::kManifestFile);
  const std::string text = ckpt::read_text_file(manifest_path);
  try {
    const nlohmann::json manifest = nlohmann::json::parse(text);
    check_manifest_integrity(impl->dir, text, manifest);
    if (manifest.value("format", "") != ckpt::kFormatName) {
      throw UserError(manifest_path + ": not a strata checkpoint manifest (\"format\" is not \"" +
                      std::string(ckpt::kFormatName) + "\")");
    }
    const int version = manifest.at("format_version").get<int>();
    if (version > ckpt::kFormatVersion) {
      throw UserError(manifest_path + ": format_version " + std::to_string(version) +
                      " was written by a newer strata; this build reads version " +
                      std::to_string(ckpt::kFormatVersion) + " and older");
    }
    impl->step = manifest.at("step").get<int64_t>();
    impl->global_meta = manifest.at("global_meta");
    for (const nlohmann::json& state : manifest.at("rank_state")) impl->rank_states.push_back(state);
    std::map<std::string, size_t> file_index;
    for (const nlohmann::json& f : manifest.at("files")) {
      Impl::File file;
      file.name = f.at("file").get<std::string>();
      file.bytes = f.at("bytes").get<uint64_t>();
      if (file.name.find('/') != std::string::npos ||
          !ckpt::parse_hex64(f.at("checksum").get<std::string>(), &file.checksum)) {
        throw UserError(manifest_path + ": malformed entry for file '" + file.name + "'");
      }
      file_index[file.name] = impl->files.size();
      impl->files.push_back(std::move(file));
    }
    for (const auto& [name, t] : manifest.at("tensors").items()) {
      Impl::Tensor tensor;
      if (!dtype_from_name(t.at("dtype").get<std::string>(), &tensor.info.dtype)) {
        throw UserError(manifest_path + ": tensor '" + name + "' has unknown dtype " + t.at("dtype").dump());
      }
      tensor.info.global_shape = dims(t.at("shape"));
      int64_t numel = 0;
      if (!ckpt::checked_numel(tensor.info.global_shape, &numel)) {
        throw UserError(manifest_path + ": tensor '" + name + "' has an invalid shape");
      }
      for (const nlohmann::json& p : t.at("pieces")) {
        Impl::Piece piece;
        const auto file = file_index.find(p.at("file").get<std::string>());
        if (file == file_index.end()) throw UserError(manifest_path + ": tensor '" + name + "' names an unlisted file");
        piece.file = file->second;
        piece.key = p.at("key").get<std::string>();
        piece.view = p.contains("view") ? dims(p.at("view")) : tensor.info.global_shape;
        piece.offset = dims(p.at("offset"));
        piece.shape = dims(p.at("shape"));
        int64_t view_numel = 0;
        if (!ckpt::checked_numel(piece.view, &view_numel) || view_numel != numel ||
            !ckpt::box_problem(piece.view, piece.offset, piece.shape).empty()) {
          throw UserError(manifest_path + ": tensor '" + name + "' has a piece outside the tensor");
        }
        tensor.pieces.push_back(std::move(piece));
      }
      impl->tensors.emplace(name, std::move(tensor));
    }
  } catch (const nlohmann::json::exception& e) {
    throw UserError(manifest_path + ": malformed manifest (" + e.what() + ")");
  }
  for (size_t i = 0; i < impl->files.size(); ++i) {
    const std::string file_path = impl->file_path(i);
    if (!ckpt::path_exists(file_path)) throw UserError(file_path + ": missing (listed in manifest.json)");
    const uint64_t size = fs::file_size(file_path);
    if (size != impl->files[i].bytes) {
      throw UserError(file_path + ": size " + std::to_string(size) + " bytes, manifest.json says " +
                      std::to_string(impl->files[i].bytes) + " (truncated or replaced)");
    }
  }
  return CheckpointReader(std::move(impl));
}

const std::string& CheckpointReader::path() const { return impl_->dir; }
int64_t CheckpointReader::step() const { return impl_->step; }
int CheckpointReader::saved_world_size() const { return static_cast<int>(impl_->rank_states.size()); }
const nlohmann::json& CheckpointReader::global_meta() const { return impl_->global_meta; }

const nlohmann::json& CheckpointReader::rank_state(int rank) const {
  if (rank < 0 || static_cast<size_t>(rank) >= impl_->rank_states.size()) {
    throw UserError("checkpoint " + impl_->dir + " was saved by " + std::to_string(impl_->rank_states.size()) +
                    " ranks; it holds no state for rank " + std::to_string(rank));
  }
  return impl_->rank_states[static_cast<size_t>(rank)];
}

std::vector<std::string> CheckpointReader::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& entry : impl_->tensors) names.push_back(entry.first);
  return names;
}

bool CheckpointReader::contains(const std::string& name) const { return impl_->tensors.count(name) > 0; }
const TensorInfo& CheckpointReader::info(const std::string& name) const { return impl_->tensor(name).info; }

void CheckpointReader::read_box(const std::string& name, const std::vector<int64_t>& offset,
                                const std::vector<int64_t>& shape, DType dst_dtype, void* dst) const {
  read_view_box(name, impl_->tensor(name).info.global_shape, offset, shape, dst_dtype, dst);
}

void CheckpointReader::read_flat(const std::string& name, int64_t begin, int64_t count, DType dst_dtype,
                                 void* dst) const {
  read_view_box(name, {impl_->tensor(name).info.numel()}, {begin}, {count}, dst_dtype, dst);
}

void CheckpointReader::read_full(const std::string& name, DType dst_dtype, void* dst) const {
  const TensorInfo& info = impl_->tensor(name).info;
  read_view_box(name, info.global_shape, std::vector<int64_t>(info.global_shape.size(), 0), info.global_shape,
                dst_dtype, dst);
}

namespace {

// Reads of nearby small runs are staged through one buffer instead of one syscall each.
constexpr int64_t kStageBytes = 8 << 20, kMaxGapBytes = 64 << 10, kDirectBytes = 1 << 20;

// The element copies (in source order, none larger than the stage) out of one piece's tensor
// `key` in `file`, converted from src_dtype into dst's dst_dtype: large same-type runs read
// straight into dst, the others grouped into staged reads.
void read_copies(const SafetensorsReader& file, const std::string& key, const std::vector<ckpt::ElementCopy>& copies,
                 DType src_dtype, DType dst_dtype, std::vector<unsigned char>& stage, char* dst) {
  const size_t src_size = dtype_size(src_dtype), dst_size = dtype_size(dst_dtype);
  const int64_t stage_elements = kStageBytes / static_cast<int64_t>(src_size);
  for (size_t i = 0; i < copies.size();) {
    const ckpt::ElementCopy& c = copies[i];
    if (src_dtype == dst_dtype && c.count * static_cast<int64_t>(src_size) >= kDirectBytes) {
      file.read_bytes(key, c.src * src_size, c.count * src_size, dst + c.dst * dst_size);
      ++i;
      continue;
    }
    size_t j = i + 1;
    int64_t span_end = c.src + c.count;
    while (j < copies.size() && (copies[j].src + copies[j].count - c.src) <= stage_elements &&
           (copies[j].src - span_end) * static_cast<int64_t>(src_size) <= kMaxGapBytes) {
      span_end = copies[j].src + copies[j].count;
      ++j;
    }
    stage.resize(static_cast<size_t>(span_end - c.src) * src_size);
    file.read_bytes(key, c.src * src_size, stage.size(), stage.data());
    for (size_t k = i; k < j; ++k) {
      convert_elements(stage.data() + (copies[k].src - c.src) * src_size, src_dtype, dst + copies[k].dst * dst_size,
                       dst_dtype, static_cast<size_t>(copies[k].count));
    }
    i = j;
  }
}

}  // namespace

void CheckpointReader::read_view_box(const std::string& name, const std::vector<int64_t>& view,
                                     const std::vector<int64_t>& offset, const std::vector<int64_t>& shape,
                                     DType dst_dtype, void* dst) const {
  const Impl::Tensor& tensor = impl_->tensor(name);
  const std::string where = "checkpoint " + impl_->dir + ": tensor '" + name + "'";
  const DType src_dtype = tensor.info.dtype;
  if (src_dtype != dst_dtype && !(is_float(src_dtype) && is_float(dst_dtype))) {
    throw UserError(where + " is stored as " + dtype_name(src_dtype) + " and cannot be read as " +
                    dtype_name(dst_dtype));
  }
  int64_t view_numel = 0;
  if (!ckpt::checked_numel(view, &view_numel) || view_numel != tensor.info.numel()) {
    throw UserError(where + " " + ckpt::shape_string(tensor.info.global_shape) + " cannot be viewed as " +
                    ckpt::shape_string(view));
  }
  const std::string problem = ckpt::box_problem(view, offset, shape);
  if (!problem.empty()) throw UserError(where + ": " + problem);
  int64_t wanted = 0;
  ckpt::checked_numel(shape, &wanted);
  if (wanted == 0) return;

  const std::vector<ckpt::ElementRun> request = ckpt::box_runs(view, offset, shape);
  int64_t first = 0, last = 0;
  ckpt::box_extent(view, offset, shape, &first, &last);
  const int64_t stage_elements = kStageBytes / static_cast<int64_t>(dtype_size(src_dtype));
  std::vector<unsigned char> stage;
  std::map<int64_t, int64_t> covered;
  char* out = static_cast<char*>(dst);

  for (const Impl::Piece& piece : tensor.pieces) {
    int64_t piece_first = 0, piece_last = 0;
    ckpt::box_extent(piece.view, piece.offset, piece.shape, &piece_first, &piece_last);
    if (piece_last <= first || piece_first >= last) continue;
    std::vector<ckpt::ElementCopy> copies;
    for (const ckpt::ElementCopy& copy :
         ckpt::intersect_runs(request, ckpt::box_runs(piece.view, piece.offset, piece.shape))) {
      std::vector<ckpt::ElementCopy> fresh;
      take_uncovered(covered, copy, fresh);
      for (const ckpt::ElementCopy& c : fresh) {
        for (int64_t done = 0; done < c.count; done += stage_elements) {  // no copy larger than the stage
          copies.push_back({c.dst + done, c.src + done, std::min(stage_elements, c.count - done)});
        }
      }
    }
    if (!copies.empty()) read_copies(impl_->reader(piece.file), piece.key, copies, src_dtype, dst_dtype, stage, out);
  }
  int64_t reached = 0;
  if (!covered.empty() && covered.begin()->first == 0) reached = covered.begin()->second;
  if (reached < wanted) {
    std::vector<int64_t> coords = ckpt::unravel(reached, shape);
    for (size_t d = 0; d < coords.size(); ++d) coords[d] += offset[d];
    throw UserError(where + ": element " + ckpt::shape_string(coords) + " of view " + ckpt::shape_string(view) +
                    " is in no saved piece (the checkpoint does not cover box offset " + ckpt::shape_string(offset) +
                    " shape " + ckpt::shape_string(shape) + ")");
  }
}

void CheckpointReader::verify_all() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (size_t i = 0; i < impl_->files.size(); ++i) impl_->verify_file(impl_->files[i], i);
}

}  // namespace strata
