// Internal to src/checkpoint: what a checkpoint root keeps and what it may drop — pruning by
// keep_last, leftovers of interrupted saves, and making room on a full disk before a save.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::ckpt {

// The complete step dirs that keep_last would delete once `current_step` is saved (keep_last 0
// keeps all; the current step is always kept), oldest last. With a run_id, only that run's
// lineage counts (and checkpoints saved before run ids): another run's checkpoints are neither
// counted nor deleted.
std::vector<std::string> dirs_pruned_after(const std::string& root, int64_t current_step, int keep_last,
                                           const std::string& run_id);
// Deletes those dirs and every leftover of an interrupted save (step_*.tmp). Failures only warn:
// the new checkpoint is already safe.
void prune(const std::string& root, int64_t current_step, int keep_last, const std::string& run_id);
// Before rank 0 writes a checkpoint of `bytes` (all ranks' files) into root: when the file
// system lacks the room, deletes first what the save would prune anyway (keep_last) and
// leftovers of interrupted saves if that makes room; otherwise a UserError saying how much is
// needed and free.
void ensure_room(const std::string& root, int64_t step, int keep_last, const std::string& run_id, uint64_t bytes);

}  // namespace strata::ckpt
