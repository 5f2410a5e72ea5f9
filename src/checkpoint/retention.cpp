// What a checkpoint root keeps: pruning by keep_last, removal of the leftovers of interrupted
// saves, and room for the next save on a full disk (pruning first what the save would prune
// anyway, or saying how much is needed).
#include "checkpoint/retention.h"

#include <fmt/core.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"
#include "checkpoint/manifest.h"
#include "core/error.h"
#include "core/log.h"

namespace strata {
namespace fs = std::filesystem;
namespace ckpt {
namespace {

bool is_partial_save(const std::string& name) {
  const std::string suffix = kTmpSuffix;
  return name.size() > suffix.size() && name.compare(0, 5, "step_") == 0 &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> partial_saves(const std::string& root) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    if (is_partial_save(entry.path().filename().string())) found.push_back(entry.path().string());
  }
  return found;
}

uint64_t tree_bytes(const std::string& path) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) total += it->file_size(size_ec);
  }
  return total;
}

std::string gigabytes(uint64_t bytes) {
  return bytes >= (uint64_t{1} << 30) ? fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1 << 30))
                                      : fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

void remove_paths(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) log_warn("checkpoint: cannot delete {}: {}", path, ec.message());
  }
}

}  // namespace

std::vector<std::string> dirs_pruned_after(const std::string& root, int64_t current_step, int keep_last,
                                           const std::string& run_id) {
  if (keep_last <= 0) return {};
  std::vector<std::pair<int64_t, std::string>> complete;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    const int64_t step = parse_step_dir_name(entry.path().filename().string());
    if (step < 0 || step == current_step || !path_exists((entry.path() / kManifestFile).string())) continue;
    const std::string lineage = run_id.empty() ? "" : checkpoint_run_id(entry.path().string());
    if (lineage.empty() || lineage == run_id) complete.emplace_back(step, entry.path().string());
  }
  if (ec) log_warn("checkpoint: cannot list {}: {}", root, ec.message());
  std::sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> doomed;
  for (size_t i = static_cast<size_t>(keep_last - 1); i < complete.size(); ++i) doomed.push_back(complete[i].second);
  return doomed;
}

void prune(const std::string& root, int64_t current_step, int keep_last, const std::string& run_id) {
  remove_paths(partial_saves(root));
  remove_paths(dirs_pruned_after(root, current_step, keep_last, run_id));
}

namespace {

// The room a save of `bytes` needs in root and what it has, with what the save may delete first.
struct Room {
  bool known = false;
  uint64_t needed = 0, free_bytes = 0, reclaimable = 0;
  std::vector<std::string> removable;
};

Room measure_room(const std::string& root, int64_t step, int keep_last, const std::string& run_id, uint64_t bytes) {
  Room room;
  struct statvfs fs_info {};
  if (::statvfs(root.c_str(), &fs_info) != 0) {
    log_warn("checkpoint: cannot tell the free space of {} ({}); saving anyway", root, std::strerror(errno));
    return room;
  }
  room.known = true;
  // The manifest and the per-rank records come on top of the tensor files: a little slack.
  room.needed = bytes + bytes / 50 + (uint64_t{256} << 10);
  room.free_bytes = static_cast<uint64_t>(fs_info.f_bavail) * fs_info.f_frsize;
  if (room.free_bytes >= room.needed) return room;
  room.removable = partial_saves(root);
  // Deleted before the save, never the newest checkpoint: a save that then fails (a full disk, a
  // kill) must leave one to resume from. So keep_last 1 needs room for two checkpoints at a save.
  const int keep_before_save = keep_last <= 0 ? keep_last : std::max(keep_last, 2);  // 0 keeps every one
  for (const std::string& dir : dirs_pruned_after(root, step, keep_before_save, run_id))
    room.removable.push_back(dir);
  for (const std::string& path : room.removable) room.reclaimable += tree_bytes(path);
  return room;
}

// `what`: the save ("the checkpoint of step 40"), or at start-up each save of the run.
void throw_if_no_room(const Room& room, const std::string& root, const std::string& what, int keep_last) {
  if (!room.known || room.free_bytes + room.reclaimable >= room.needed) return;
  const std::string keep_advice = keep_last == 0   ? "set checkpoint.keep_last (0 keeps every checkpoint), "
                                  : keep_last >= 2 ? "lower checkpoint.keep_last, "
                                                   : "";
  throw UserError(fmt::format(
      "checkpoint.dir {}: {} needs about {} but the file system has {} free{}{}; free up space there, {}or point "
      "checkpoint.dir at a larger file system",
      root, what, gigabytes(room.needed), gigabytes(room.free_bytes),
      room.reclaimable > 0 ? fmt::format(" ({} more after deleting what checkpoint.keep_last {} drops)",
                                         gigabytes(room.reclaimable), keep_last)
                           : std::string(),
      keep_last == 1 ? " (keep_last 1 deletes the previous checkpoint only once the new one is complete)" : "",
      keep_advice));
}

}  // namespace

void ensure_room(const std::string& root, int64_t step, int keep_last, const std::string& run_id, uint64_t bytes) {
  const Room room = measure_room(root, step, keep_last, run_id, bytes);
  if (!room.known || room.free_bytes >= room.needed) return;
  throw_if_no_room(room, root, fmt::format("the checkpoint of step {}", step), keep_last);
  log_warn("checkpoint: {} free in {} but the checkpoint of step {} needs about {}: deleting now what the save "
           "would prune after it (checkpoint.keep_last {}): {} dir(s), {}",
           gigabytes(room.free_bytes), root, step, gigabytes(room.needed), keep_last, room.removable.size(),
           gigabytes(room.reclaimable));
  remove_paths(room.removable);
}

}  // namespace ckpt

void check_checkpoint_room(const std::string& root, int keep_last, const std::string& run_id, uint64_t bytes) {
  // The next save is at a step after every checkpoint in root (-1: none of theirs).
  ckpt::throw_if_no_room(ckpt::measure_room(root, -1, keep_last, run_id, bytes), root,
                         "each checkpoint of this run", keep_last);
}

int64_t checkpoint_dir_step(const std::string& path) {
  return ckpt::parse_step_dir_name(fs::path(path).filename().string());
}

std::vector<std::string> complete_checkpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    const int64_t step = ckpt::parse_step_dir_name(entry.path().filename().string());
    if (step >= 0 && ckpt::path_exists((entry.path() / ckpt::kManifestFile).string())) {
      found.emplace_back(step, entry.path().string());
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> dirs;
  for (auto& f : found) dirs.push_back(std::move(f.second));
  return dirs;
}

int remove_interrupted_saves(const std::string& root) {
  if (!ckpt::is_directory(root)) return 0;
  const std::vector<std::string> found = ckpt::partial_saves(root);
  for (const std::string& path : found) {
    log_info("checkpoint: removing {}, left by an interrupted save", path);
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) throw UserError("checkpoint.dir: cannot remove " + path + " (left by an interrupted save): " + ec.message());
  }
  return static_cast<int>(found.size());
}

}  // namespace strata
