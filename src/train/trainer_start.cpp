// `strata train`, part 2: where a run starts — resume from a checkpoint (read by each rank on its
// own, then agreed) or fresh weights — and the checks that every rank starts from the same step
// and reads the same data, with a warning when a resume changes the order of the data.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace strata {

// Each rank finds and reads its checkpoint on its own (ranks on different nodes may see
// different files); the ranks agree that all of them succeeded and start from the same step
// before the first collective.
void Trainer::start_state() {  // after prepare_checkpoint_dir
  std::string resume_path;
  const std::string source_key = "checkpoint.resume";
  bool resumed = false;
  const std::string& resume = cfg_.checkpoint.resume;
  if (resume == "auto") {
    resumed = resume_newest_sound(&resume_path);
  } else if (resume != "none") {
    // A named checkpoint is read as it is, or not at all.
    agree_on_user_errors(mpi_, "resuming from a checkpoint", [&] {
      state_ = read_training_checkpoint(resume, source_key, engine_, mpi_.world_rank());
    });
    check_same_start(state_.step);
    engine_.params_loaded();
    const std::string bad = engine_.first_nonfinite_state();
    if (!bad.empty()) {
      throw UserError(fmt::format("{}: {}: {} holds a non-finite value; resume from another checkpoint",
                                  source_key, resume, bad),
                      RaisedOn::EveryRank);
    }
    resume_path = resume;
    resumed = true;
  }
  if (!resumed) check_same_start(-1);
  settle_run_identity(resumed ? resume_path : std::string(), resume == "auto");
  metrics_.start_run(resumed);
  if (resumed) {
    if (!cfg_.model.init_from.empty()) {
      log_info("model.init_from ({}) is not used: the run resumes from a checkpoint", cfg_.model.init_from);
    }
    schedule_.set_iteration(state_.scheduler_iteration);
    sample_rng_.restore(state_.sample_rng);
    log_info("resumed from {} at step {}", resume_path, state_.step);
    // The metrics file is appended to: the steps a killed run got past its checkpoint come again
    // after this record (readers keep a step's last record).
    metrics_.write({{"type", "resume"}, {"step", state_.step}, {"checkpoint", resume_path}});
    last_saved_step_ = state_.step;
    const int64_t by_batch = state_.step * cfg_.derived.global_batch;
    if (state_.next_sequence < 0) {
      state_.next_sequence = by_batch;  // a checkpoint from before the field existed
    } else if (state_.next_sequence != by_batch) {
      log_info("the data continues at sequence {}, not at step x global batch = {} x {} = {}: the run so far used "
               "another global batch",
               state_.next_sequence, state_.step, cfg_.derived.global_batch, by_batch);
    }
    warn_if_data_order_changed(state_.data_order);
  } else {
    engine_.init_weights(static_cast<uint64_t>(cfg_.train.seed));
    if (!cfg_.model.init_from.empty()) load_pretrained();
    state_.next_sequence = 0;
    sample_rng_ = Rng(static_cast<uint64_t>(cfg_.train.seed), rng_stream_id("sample"));
    state_.sample_rng = sample_rng_.state();
    if (engine_.precision() == DType::F16) state_.loss_scaler = engine_.loss_scaler_state();
    if (cfg_.model.init_from.empty()) log_info("initialised weights (seed {})", cfg_.train.seed);
    if (cfg_.checkpoint.save_initial && !cfg_.checkpoint.dir.empty()) save(0);
  }
  loader_->seek(state_.step, state_.next_sequence);
}

// model.init_from: every rank reads the parameters it holds from the HuggingFace folder (after
// the seeded initialisation, so any state the folder does not hold starts as it would anyway);
// the optimizer state stays fresh.
void Trainer::load_pretrained() {
  const std::string& dir = cfg_.model.init_from;
  agree_on_user_errors(mpi_, "reading model.init_from", [&] { read_pretrained_weights(dir, engine_); });
  engine_.params_loaded();
  const std::string bad = engine_.first_nonfinite_state();
  if (!bad.empty()) {
    throw UserError(fmt::format("model.init_from: {}: {} holds a non-finite value", dir, bad), RaisedOn::EveryRank);
  }
  log_info("initialised weights from {} (HuggingFace GPT-2; fresh optimizer state)", dir);
}

namespace {

// "\n  PATH, PATH: REASON" per reason of the skipped checkpoints (in the order tried): a changed
// config fails every checkpoint of the run alike.
std::string grouped_reasons(const nlohmann::json& skipped) {
  std::string reasons, paths, why;
  const auto flush = [&] {
    if (!paths.empty()) reasons += "\n  " + paths + ": " + why;
  };
  for (const auto& s : skipped) {
    const std::string& reason = s["reason"].get_ref<const std::string&>();
    const std::string& where = s["path"].get_ref<const std::string&>();
    if (reason == why && !paths.empty()) {
      paths += ", " + where;
      continue;
    }
    flush();
    paths = where;
    why = reason;
  }
  flush();
  return reasons;
}

}  // namespace

// checkpoint.resume: auto. The newest checkpoint that loads whole (manifest, sizes, checksums of
// what every rank reads) and holds a finite state wins; a damaged newer one is skipped with a
// loud warning (and a JSONL record), so that a requeued job goes on rather than failing for
// ever. The ranks try the same candidates in the same order, agreeing on each.
bool Trainer::resume_newest_sound(std::string* path) {
  const std::string& dir = cfg_.checkpoint.dir;
  if (dir.empty()) return false;
  std::vector<std::string> candidates;
  nlohmann::json skipped = nlohmann::json::array();
  std::string last_why;  // a config change fails every checkpoint of the run alike: said once
  const auto skip = [&](const std::string& where, std::string why) {
    // The reader's message names the checkpoint again ("checkpoint.resume: DIR: ..."): said once.
    const std::string prefix = "checkpoint.resume: " + where + ": ";
    if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
    skipped.push_back({{"path", where}, {"reason", why}});
    if (mpi_.world_rank() == 0)
      log_warn("checkpoint.resume auto: skipping {}: {}", where, why == last_why ? "the same" : why);
    last_why = why;
  };
  int64_t below = INT64_MAX;
  try {
    if (auto latest = find_latest_checkpoint(dir)) {
      candidates.push_back(*latest);
      below = checkpoint_dir_step(*latest);
    }
  } catch (const UserError& e) {
    skip(dir + "/latest", e.what());
  }
  for (const std::string& d : complete_checkpoints(dir)) {
    if (checkpoint_dir_step(d) < below) candidates.push_back(d);
  }
  // The folder's run (run.json): another run's checkpoints are never resumed (those saved before
  // run ids carry none and count as the folder's).
  std::string folder_run;
  agree_on_user_errors(mpi_, "reading " + dir + "/run.json", [&] { folder_run = folder_run_id(dir); });
  for (const std::string& candidate : candidates) {
    const std::string lineage = folder_run.empty() ? "" : checkpoint_run_id(candidate);
    if (!lineage.empty() && lineage != folder_run) {
      skip(candidate, fmt::format("belongs to another run (run {}; this folder holds run {})", lineage, folder_run));
      continue;
    }
    check_same_start(checkpoint_dir_step(candidate));
    try {
      agree_on_user_errors(mpi_, "resuming from " + candidate, [&] {
        state_ = read_training_checkpoint(candidate, "checkpoint.resume", engine_, mpi_.world_rank());
      });
      engine_.params_loaded();
      const std::string bad = engine_.first_nonfinite_state();
      if (!bad.empty()) throw UserError(bad + " holds a non-finite value", RaisedOn::EveryRank);
    } catch (const UserError& e) {
      skip(candidate, e.what());
      continue;
    }
    if (skipped.size() > 0) {
      if (mpi_.world_rank() == 0) {
        log_warn("checkpoint.resume auto: resuming from {} ({} skipped, see above)",
                 candidate, skipped.size());
      }
      metrics_.write({{"type", "resume_fallback"}, {"resumed_from", candidate}, {"skipped", skipped}});
    }
    *path = candidate;
    return true;
  }
  if (!candidates.empty()) {
    const std::string reasons = grouped_reasons(skipped);
    throw UserError(fmt::format("checkpoint.resume auto: no checkpoint in {} loads whole and finite with this "
                                "config:{}\nchange the config where they say it differs, repair one and name it in "
                                "checkpoint.resume, or start over (checkpoint.resume: none with "
                                "checkpoint.overwrite: true, or another checkpoint.dir)",
                                dir, reasons),
                    RaisedOn::EveryRank);
  }
  return false;
}

// Before anything is read or saved: rank 0 checks checkpoint.dir (creating it), takes the
// folder's lock and removes leftovers of killed saves (a full-size step_N.tmp on a full disk would
// fail every save of the next run too); then every other rank checks it can write there.
void Trainer::prepare_checkpoint_dir() {
  const std::string& root = cfg_.checkpoint.dir;
  agree_on_user_errors(mpi_, "checking checkpoint.dir", [&] {
    if (mpi_.world_rank() != 0) return;
    check_checkpoint_dir(root, true);
    dir_lock_ = std::make_unique<CheckpointDirLock>(root);
    remove_interrupted_saves(root);
  });
  agree_on_user_errors(mpi_, "checking checkpoint.dir", [&] {
    if (mpi_.world_rank() != 0) check_checkpoint_dir(root, false);
  });
}

// One run per folder. A run from fresh weights gets a new identity; a resumed run keeps its
// checkpoint's. Rank 0 refuses to start a run in a folder that holds another run's checkpoints
// (unless checkpoint.overwrite, which deletes them), records the run in run.json, and checks
// that one checkpoint fits; every rank adopts the identity.
void Trainer::settle_run_identity(const std::string& resumed_from, bool from_folder) {
  const bool resumed = !resumed_from.empty();
  const std::string& root = cfg_.checkpoint.dir;
  std::string id = resumed ? state_.run_id : std::string();
  agree_on_user_errors(mpi_, "checking checkpoint.dir's run", [&] {
    if (mpi_.world_rank() != 0) return;
    const std::string folder_run = root.empty() ? "" : folder_run_id(root);
    if (id.empty()) id = resumed && from_folder && !folder_run.empty() ? folder_run : new_run_id();
    if (root.empty()) return;
    const std::vector<std::string> held = complete_checkpoints(root);
    // A fresh run never shares a used folder; a resumed one only with its own run.
    const bool conflict = !held.empty() && !(resumed && from_folder) && (!resumed || folder_run != state_.run_id);
    if (conflict && !cfg_.checkpoint.overwrite) {
      throw UserError(fmt::format(
          "checkpoint.dir {} holds the checkpoints of another run ({}, newest {}); {} would mix a new run with them. "
          "Give this run another checkpoint.dir, continue that run with checkpoint.resume: auto, or set "
          "checkpoint.overwrite: true to delete them and start over",
          root, folder_run.empty() ? "no run.json: saved before run ids" : "run " + folder_run, held.front(),
          resumed ? "resuming " + cfg_.checkpoint.resume + " here" : "checkpoint.resume: " + cfg_.checkpoint.resume));
    }
    if (conflict) clear_checkpoint_dir(root);
    if (conflict || folder_run != id) write_folder_run_id(root, id);
    if (resumed) set_aside_later_checkpoints(root, id, resumed_from);
  });
  mpi_.broadcast(id, 0);
  state_.run_id = id;
  if (root.empty()) return;
  const uint64_t bytes = checkpoint_bytes();
  agree_on_user_errors(mpi_, "checking the room for a checkpoint", [&] {
    if (mpi_.world_rank() == 0) check_checkpoint_room(root, cfg_.checkpoint.keep_last, id, bytes);
  });
}

// A rewind (or a fallback past damaged checkpoints) in the run's own folder: its checkpoints
// after the resumed step move aside, so that keep_last and resume: auto see one line.
void Trainer::set_aside_later_checkpoints(const std::string& root, const std::string& id,
                                          const std::string& resumed_from) {
  const std::vector<std::string> moved = set_aside_checkpoints_after(root, state_.step, id, resumed_from);
  if (moved.empty()) return;
  std::string names;
  for (const std::string& m : moved) names += (names.empty() ? "" : ", ") + std::filesystem::path(m).filename().string();
  log_warn("checkpoint.dir {}: resuming at step {} leaves this run's {} later checkpoint(s) behind ({}): moved into "
           "{}/abandoned/, where keep_last and checkpoint.resume: auto do not see them; delete them there when no "
           "longer needed",
           root, state_.step, moved.size(), names, root);
}

uint64_t Trainer::checkpoint_bytes() {
  uint64_t total = 0;
  for (int64_t b : mpi_.all_gather({static_cast<int64_t>(checkpoint_bytes_of_rank(engine_))}))
    total += static_cast<uint64_t>(b);
  return total;
}

// `step` is the checkpoint's step, or -1 for fresh weights. A UserError on every rank when the
// ranks differ: with checkpoint.dir on storage that is not shared, a node may see an older
// checkpoint or none, and a run from mixed states would be wrong (or hang).
void Trainer::check_same_start(int64_t step) {
  if (mpi_.world_size() == 1) return;
  const std::vector<int64_t> steps = mpi_.all_gather({step});
  const int differs = first_rank_unlike_rank0(steps, 1);
  if (differs < 0) return;
  const auto start = [&](int r) {
    const int64_t s = steps[static_cast<size_t>(r)];
    return s < 0 ? std::string("fresh weights (no checkpoint found)") : fmt::format("a checkpoint at step {}", s);
  };
  throw UserError(fmt::format(
      "checkpoint.resume: {}: the ranks found different checkpoints: rank 0 would start from {}, rank {} from {}; "
      "checkpoint.dir must be storage that every node shares, or name one checkpoint in checkpoint.resume",
      cfg_.checkpoint.resume, start(0), differs, start(differs)),
      RaisedOn::EveryRank);
}

// Every rank reads the data on its own node: copies that differ (another version of the corpus)
// would give each rank other sequences than the global order assigns it.
void Trainer::check_same_data() {
  if (mpi_.world_size() == 1) return;
  std::vector<std::string> keys;
  std::vector<int64_t> tokens;
  for (const TrainSequences::Source& s : train_data_.sources()) {
    keys.push_back(s.dataset.key());
    tokens.push_back(s.dataset.num_tokens());
  }
  keys.push_back("data.val");
  tokens.push_back(val_data_ ? val_data_->num_tokens() : -1);
  check_same_token_counts(mpi_, keys, tokens);
}

// What decides the order of the training sequences; a checkpoint keeps it to compare on resume.
nlohmann::json Trainer::data_order() const {
  nlohmann::json order = {
      {"tokens", train_data_.num_tokens()}, {"shuffle", cfg_.data.shuffle}, {"seed", cfg_.train.seed}};
  if (train_data_.blended()) {
    nlohmann::json sources = nlohmann::json::array();
    for (const TrainSequences::Source& s : train_data_.sources())
      sources.push_back({{"tokens", s.dataset.num_tokens()}, {"weight", s.weight}});
    order["sources"] = sources;
  }
  return order;
}

namespace {

// Two blends order the data alike when their sources have the same tokens and the same shares:
// weights 7 and 3 are 0.7 and 0.3 (the order reads only the normalised shares).
bool same_blend(const nlohmann::json& a, const nlohmann::json& b) {
  if (!a.is_array() || !b.is_array()) return a == b;
  if (a.size() != b.size()) return false;
  double total_a = 0, total_b = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].value("tokens", int64_t{0}) != b[i].value("tokens", int64_t{0})) return false;
    total_a += a[i].value("weight", 0.0);
    total_b += b[i].value("weight", 0.0);
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const double share_a = a[i].value("weight", 0.0) / total_a, share_b = b[i].value("weight", 0.0) / total_b;
    if (std::fabs(share_a - share_b) > 1e-12 * std::max(share_a, share_b)) return false;
  }
  return true;
}

}  // namespace

// A resumed run may change its data on purpose (more text, shuffling on, other weights); it is
// told that the sequences from here differ from those an uninterrupted run would have read.
void Trainer::warn_if_data_order_changed(const nlohmann::json& saved) const {
  if (saved.is_null() || mpi_.world_rank() != 0) return;
  const nlohmann::json now = data_order();
  const auto at = [](const nlohmann::json& j, const char* key) { return j.contains(key) ? j.at(key) : nlohmann::json(); };
  std::string changes;
  // A blend's sources read as "[1000 tokens x weight 3, 500 tokens x weight 1]"; a plain glob has none.
  const auto text = [](const nlohmann::json& v) {
    if (v.is_null()) return std::string("one source (no blend)");
    if (!v.is_array()) return v.dump();
    std::string out;
    for (const nlohmann::json& s : v)
      out += fmt::format("{}{} tokens x weight {}", out.empty() ? "" : ", ", s.value("tokens", 0), s.value("weight", 0.0));
    return "[" + out + "]";
  };
  const auto add = [&](const std::string& what, const char* key) {
    changes += fmt::format("{}{} is now {} ({} at the checkpoint)", changes.empty() ? "" : "; ", what,
                           text(at(now, key)), text(at(saved, key)));
  };
  if (at(saved, "tokens") != at(now, "tokens")) add("the token count of data.train", "tokens");
  if (!same_blend(at(saved, "sources"), at(now, "sources"))) add("the blend of data.train (tokens and weight per source)", "sources");
  if (at(saved, "shuffle") != at(now, "shuffle")) {
    add("data.shuffle", "shuffle");
  } else if (cfg_.data.shuffle && at(saved, "seed") != at(now, "seed")) {
    add("train.seed (which orders the shuffled data)", "seed");
  }
  if (changes.empty()) return;
  log_warn("the data order differs from the checkpoint's run ({}): from here on this run reads other sequences than "
           "an uninterrupted run would",
           changes);
}

}  // namespace strata
