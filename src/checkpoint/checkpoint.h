// Public header of src/checkpoint: safetensors files, sharded checkpoints (every rank saves
// its pieces; any layout can load any box of any tensor back), and HuggingFace GPT-2 export.
// Nothing here knows about the model or the config: tensors are names, dtypes and boxes.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace strata {

// ---------------------------------------------------------------------------------------
// safetensors: 8-byte little-endian header length N, N bytes of JSON (space-padded here to a
// multiple of 8), then the packed row-major tensor data in insertion order.

class SafetensorsWriter {
 public:
  // `data` is not copied: it must stay valid until write() returns.
  void add(const std::string& name, DType dtype, const std::vector<int64_t>& shape, const void* data);
  // For data too large to hold all at once: write() calls `produce` with a buffer of exactly
  // this tensor's byte size, one tensor at a time, and writes what it fills in.
  void add_streamed(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                    std::function<void(void* buffer)> produce);
  void set_metadata(const std::string& key, const std::string& value);

  struct Written {
    uint64_t bytes = 0;     // total file size
    uint64_t checksum = 0;  // checksum64 of the whole file
  };
  // Writes the file (replacing any existing one) and fsyncs it. Errors are UserErrors naming
  // the path (e.g. disk full).
  Written write(const std::string& path) const;

  size_t size() const { return tensors_.size(); }

 private:
  struct Pending {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;
    std::function<void(void*)> produce;
  };
  void check_new_tensor(const std::string& name, const std::vector<int64_t>& shape);
  std::vector<Pending> tensors_;
  std::set<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte range relative to the start of the data section
  uint64_t end = 0;
  uint64_t bytes() const { return end - begin; }
};

class SafetensorsReader {
 public:
  // Reads and validates the header: length, JSON, dtypes, shapes against byte ranges, ranges
  // inside the file and not overlapping. Any problem is a UserError naming the file.
  static SafetensorsReader open(const std::string& path);

  SafetensorsReader(SafetensorsReader&&) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) noexcept;
  ~SafetensorsReader();

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // in file order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;  // UserError if absent
  uint64_t data_start() const { return data_start_; }            // file offset of the data section

  // Copies the whole tensor into dst (entry(name).bytes() bytes).
  void read(const std::string& name, void* dst) const;
  // Copies `nbytes` starting `byte_offset` bytes into the tensor (a slice of it).
  void read_bytes(const std::string& name, uint64_t byte_offset, uint64_t nbytes, void* dst) const;

 private:
  SafetensorsReader() = default;
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// 64-bit checksum of a byte stream (a 4-lane multiply-rotate hash: fast, and any single
// changed byte always changes it). Feeding the bytes in any chunking gives the same value.
class Checksum64 {
 public:
  Checksum64();
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  uint64_t lanes_[4];
  unsigned char pending_[32];
  size_t pending_size_ = 0;
  uint64_t total_ = 0;
};
uint64_t checksum_file(const std::string& path);  // UserError if unreadable

// ---------------------------------------------------------------------------------------
// Sharded checkpoints.
//
// A piece is a row-major box of one global tensor: `offset` and `shape` (per dim) place it in
// `view_shape`, a row-major view of the tensor. view_shape empty means the tensor's own
// global_shape (whole tensors, TP slices along a dim). A flat range [a, a + n) of the tensor
// flattened to 1-D (ZeRO partitions) is view_shape = {numel}, offset = {a}, shape = {n}.
// view_shape must have the same number of elements as global_shape. Pieces of one tensor may
// overlap (replicas); together they must cover it.
struct TensorPiece {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // packed row-major, shape's element count
  std::vector<int64_t> view_shape;
  // Instead of data, for state not in host memory (a device's, or offloaded to a file): writes
  // the packed values into a buffer of the piece's bytes while the file is written, so that a
  // save holds one piece at a time, not the rank's state.
  std::function<void(void* buffer)> produce = nullptr;
};

struct SaveContext {
  int rank = 0;
  int world_size = 1;
  std::function<void()> barrier;  // collective over all ranks; may be empty when world_size == 1
  // Collective: the sum of every rank's value (the bytes each will write), so that rank 0 can
  // check the room for the whole checkpoint first; empty: this rank's bytes stand for all.
  std::function<uint64_t(uint64_t)> sum_over_ranks = nullptr;
};

// Collective: every rank calls it with its own pieces. Rank 0 first checks that the file system
// has room for every rank's bytes (deleting first what keep_last would delete after the save,
// when that makes room; else failing with how much is needed). Writes root/step_%08d.tmp/, then
// rank 0 writes manifest.json, renames the directory to root/step_%08d, atomically replaces
// root/latest, prunes all but the newest `keep_last` step dirs of the run global_meta["run_id"]
// names (0 = keep all; the one just saved is always kept; another run's are left alone) and removes stale *.tmp dirs. Returns after the checkpoint is complete
// on every rank; returns the step dir. A failure on any rank throws on every rank (rank 0 with
// the cause), removes the partial step_%08d.tmp/ and leaves the previous checkpoint and
// `latest` untouched; every throw comes after the last barrier, so a caller may agree on the
// outcome collectively. root must be shared by all ranks.
std::string save_checkpoint(const std::string& root, int64_t step, const SaveContext& context,
                            const std::vector<TensorPiece>& pieces, const nlohmann::json& rank_state,
                            const nlohmann::json& global_meta, int keep_last);

// ---- a checkpoint root as one run's folder ----
// Start-up checks on a rank that writes checkpoints into root, before the training they would
// lose: root is a directory (created with its parents when `create` and absent), a file can be
// created in it, and root/latest is a regular file or absent. UserError naming the problem.
void check_checkpoint_dir(const std::string& root, bool create);
// One job per folder: an exclusive lock on root/.lock (flock, so the kernel releases it however
// the holder ends: a killed job leaves no stale lock), held for the object's life; it records who
// holds it. UserError naming the holder when another process has it; a file system without locks
// only warns.
class CheckpointDirLock {
 public:
  explicit CheckpointDirLock(const std::string& root);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

 private:
  int fd_ = -1;
};
// A run's identity: a fresh random id for a run started from new weights, kept by every run that
// resumes from its checkpoints (global_meta "run_id"). root/run.json names the run a folder holds.
std::string new_run_id();
std::string folder_run_id(const std::string& root);  // "" when root has no run.json
void write_folder_run_id(const std::string& root, const std::string& run_id);
// The run id in a step dir's manifest; "" for a checkpoint saved before run ids (or unreadable).
std::string checkpoint_run_id(const std::string& step_dir);
// At start-up: UserError when the run's next checkpoint of `bytes` (all ranks' files) could not
// fit in root even after deleting what its save may delete first (nothing is deleted here).
void check_checkpoint_room(const std::string& root, int keep_last, const std::string& run_id, uint64_t bytes);
// checkpoint.overwrite: deletes root's complete checkpoints, latest and run.json.
void clear_checkpoint_dir(const std::string& root);
// A run resumed at `step` leaves behind its folder's later checkpoints of the same run (a rewind,
// or a fallback past damaged ones): they move into root/abandoned/, so that keep_last and
// resume: auto see one line of checkpoints, and `latest` names the resumed checkpoint (removed
// when that lies elsewhere). For rank 0 at start-up. Returns the moved dirs; UserError when one
// cannot be moved.
std::vector<std::string> set_aside_checkpoints_after(const std::string& root, int64_t step, const std::string& run_id,
                                                     const std::string& resumed_dir);

// Removes the leftovers of interrupted saves (step_*.tmp) in root; returns how many. For rank 0
// at start-up, before anyone saves: a partial save of full size would otherwise keep a full
// disk full. UserError when one cannot be removed.
int remove_interrupted_saves(const std::string& root);

// The checkpoint `root/latest` names, or, without a latest file, the highest complete step dir
// in root; nullopt when there is none. UserError when latest names a missing checkpoint.
std::optional<std::string> find_latest_checkpoint(const std::string& root);

std::string checkpoint_dir_name(int64_t step);  // "step_00001000"
// The step a dir named "step_%08d" (any path ending in one) holds; -1 for other names.
int64_t checkpoint_dir_step(const std::string& path);
// The complete step dirs in root (those with a manifest), newest first; empty when root does not
// exist.
std::vector<std::string> complete_checkpoints(const std::string& root);

struct TensorInfo {
  DType dtype = DType::F32;
  std::vector<int64_t> global_shape;
  int64_t numel() const;
};

class CheckpointReader {
 public:
  // `path` is a step dir (holding manifest.json) or a root (then `latest` is followed).
  // `source_key` names where the path came from in error messages (a config key or a flag).
  // File sizes are checked here; each file's checksum is checked the first time it is read
  // from (unless verify_checksums is false).
  static CheckpointReader open(const std::string& path, const std::string& source_key = "checkpoint.resume",
                               bool verify_checksums = true);
  // A HuggingFace GPT-2 folder (config.json with model.safetensors, or shards named by
  // model.safetensors.index.json) read as a checkpoint of parameters only: each parameter is
  // "model.<HF name>" (a "transformer." prefix dropped), whole, in its file's dtype (F32, BF16 or
  // F16); global_meta()["model"] holds config.json's dimensions under strata's names. Buffers
  // (attn.bias, attn.masked_bias) and the tied lm_head.weight are skipped; any other name that is
  // no GPT-2 parameter is a UserError naming it and `source_key`.
  static CheckpointReader open_huggingface(const std::string& dir, const std::string& source_key);

  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;
  ~CheckpointReader();

  const std::string& path() const;  // the step dir
  int64_t step() const;
  int saved_world_size() const;
  const nlohmann::json& global_meta() const;
  const nlohmann::json& rank_state(int rank) const;  // UserError if rank >= saved_world_size()
  std::vector<std::string> tensor_names() const;     // sorted
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // UserError if absent

  // Fills dst (packed row-major, `shape`, dst_dtype) with the box of the global tensor at
  // `offset`, assembled from whichever pieces cover it. F32/BF16/F16 convert into each other;
  // integer tensors read only as themselves. UserError for a missing name, a box outside the
  // tensor, or a part of the box no piece holds.
  void read_box(const std::string& name, const std::vector<int64_t>& offset, const std::vector<int64_t>& shape,
                DType dst_dtype, void* dst) const;
  // The same with the box expressed in another row-major view of the tensor (same numel).
  void read_view_box(const std::string& name, const std::vector<int64_t>& view_shape,
                     const std::vector<int64_t>& offset, const std::vector<int64_t>& shape, DType dst_dtype,
                     void* dst) const;
  // Elements [begin, begin + count) of the tensor flattened to 1-D.
  void read_flat(const std::string& name, int64_t begin, int64_t count, DType dst_dtype, void* dst) const;
  void read_full(const std::string& name, DType dst_dtype, void* dst) const;

  // Checks the checksum of every file now (a checkpoint audit).
  void verify_all() const;

 private:
  struct Impl;
  explicit CheckpointReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The layer index of a GPT-2 tensor named "h.<i>.<suffix>" (HuggingFace's and strata's names),
// with the suffix after it; -1 when the name is no layer tensor.
int64_t gpt2_layer_of(const std::string& name, std::string* suffix);

// ---------------------------------------------------------------------------------------
// HuggingFace export. The checkpoint's global_meta["model"] holds n_layer, n_head, d_model,
// vocab_size, padded_vocab, seq_len; parameters are stored as "model.<HF name>" in HF Conv1D
// [in, out] layout. Writes out_dir/model.safetensors (F32, HF names, wte cut to vocab_size
// rows) and out_dir/config.json, each via a temporary file and a rename.
void export_huggingface(const std::string& checkpoint_path, const std::string& out_dir);

}  // namespace strata
