// A checkpoint root as one run's folder: checks made at start-up (before any training it would
// lose), the lock that keeps a second job out, and the run identity that keeps two runs' lineages
// apart (root/run.json, and "run_id" in every manifest's global_meta).
#include <fcntl.h>
#include <fmt/core.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"
#include "checkpoint/manifest.h"
#include "core/error.h"
#include "core/log.h"

namespace strata {
namespace fs = std::filesystem;

namespace {

constexpr const char* kLockFile = ".lock";
constexpr const char* kRunFile = "run.json";
constexpr const char* kAbandonedDir = "abandoned";

std::string host_name() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown host";
  return name;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

}  // namespace

void check_checkpoint_dir(const std::string& root, bool create) {
  const std::string key = "checkpoint.dir " + root;
  std::error_code ec;
  const fs::file_status status = fs::status(root, ec);
  if (fs::exists(status) && !fs::is_directory(status)) {
    throw UserError(key + ": is not a directory (a file of that name is in the way); point checkpoint.dir at a "
                          "directory");
  }
  if (!fs::exists(status)) {
    if (!create) throw UserError(key + ": does not exist (is it on a file system every rank shares?)");
    fs::path parent = fs::path(root).parent_path();
    while (!parent.empty() && !fs::exists(parent, ec)) parent = parent.parent_path();
    fs::create_directories(root, ec);
    if (ec) {
      throw UserError(fmt::format("{}: cannot be created ({}{}); create it, or point checkpoint.dir elsewhere", key,
                                  ec.message(), parent.empty() ? "" : ", under " + parent.string()));
    }
  }
  // Written to for real: permissions, read-only mounts and quotas all show here.
  const std::string probe = ckpt::join_path(root, fmt::format(".write_probe.{}.{}", host_name(), ::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) {
    throw UserError(fmt::format("{}: cannot be written to ({}); every rank writes its part of each checkpoint there: "
                                "fix its permissions or mount, or point checkpoint.dir elsewhere",
                                key, std::strerror(errno)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  const std::string latest = ckpt::join_path(root, ckpt::kLatestFile);
  const fs::file_status latest_status = fs::symlink_status(latest, ec);
  if (fs::exists(latest_status) && !fs::is_regular_file(latest_status)) {
    throw UserError(fmt::format("{}: {} is not a regular file; it must hold the name of the newest checkpoint: "
                                "remove it (the newest complete step dir is then used)",
                                key, latest));
  }
}

CheckpointDirLock::CheckpointDirLock(const std::string& root) {
  const std::string path = ckpt::join_path(root, kLockFile);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw UserError(fmt::format("checkpoint.dir {}: cannot open {}: {}", root, path, std::strerror(errno)));
  // flock: released by the kernel when the process ends, however it ends (no stale lock).
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EWOULDBLOCK) {
      char holder[512] = {0};
      const ssize_t n = ::pread(fd_, holder, sizeof(holder) - 1, 0);
      std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : std::string("another process");
      while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
      ::close(fd_);
      fd_ = -1;
      throw UserError(fmt::format("checkpoint.dir {}: in use by another strata job ({}); two jobs saving into one "
                                  "folder would overwrite each other's checkpoints: wait for it to end or stop it, or "
                                  "give this job another checkpoint.dir",
                                  root, ckpt::printable(who)));
    }
    log_warn("checkpoint.dir {}: cannot lock {} ({}): a second job on this folder would not be kept out", root, path,
             std::strerror(error));
    return;
  }
  const std::string who = fmt::format("pid {} on {}, since {}\n", ::getpid(), host_name(), utc_now());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    log_warn("checkpoint.dir {}: cannot write who holds {}: {}", root, path, std::strerror(errno));
  }
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

std::string new_run_id() {
  std::random_device device;
  const uint64_t high = (static_cast<uint64_t>(device()) << 32) ^ device();
  const uint64_t time = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  return ckpt::hex64(high ^ (time * 0x9E3779B97F4A7C15ull));
}

std::string folder_run_id(const std::string& root) {
  const std::string path = ckpt::join_path(root, kRunFile);
  if (!ckpt::path_exists(path)) return "";
  try {
    return nlohmann::json::parse(ckpt::read_text_file(path)).at("run_id").get<std::string>();
  } catch (const std::exception& e) {
    throw UserError(fmt::format("checkpoint.dir {}: {} is damaged ({}); it names the run this folder holds: remove "
                                "it only if the folder holds one run's checkpoints",
                                root, path, e.what()));
  }
}

void write_folder_run_id(const std::string& root, const std::string& run_id) {
  const nlohmann::json record = {{"run_id", run_id}, {"started", utc_now()}, {"host", host_name()}};
  ckpt::write_file_atomic(ckpt::join_path(root, kRunFile), record.dump() + "\n");
}

std::string checkpoint_run_id(const std::string& step_dir) {
  try {
    const nlohmann::json manifest =
        nlohmann::json::parse(ckpt::read_text_file(ckpt::join_path(step_dir, ckpt::kManifestFile)));
    const nlohmann::json& meta = manifest.at("global_meta");
    return meta.contains("run_id") ? meta.at("run_id").get<std::string>() : "";
  } catch (const std::exception&) {
    return "";  // damaged: the reader says how when it is opened
  }
}

void clear_checkpoint_dir(const std::string& root) {
  std::vector<std::string> doomed = complete_checkpoints(root);
  const size_t checkpoints = doomed.size();
  const std::string aside = ckpt::join_path(root, kAbandonedDir);
  const size_t set_aside = ckpt::is_directory(aside) ? complete_checkpoints(aside).size() : 0;
  for (const std::string& path : {ckpt::join_path(root, ckpt::kLatestFile), ckpt::join_path(root, kRunFile), aside}) {
    if (ckpt::path_exists(path)) doomed.push_back(path);
  }
  for (const std::string& path : doomed) {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) throw UserError(fmt::format("checkpoint.overwrite: cannot delete {}: {}", path, ec.message()));
  }
  if (!doomed.empty()) {
    log_warn("checkpoint.overwrite: deleted the previous run's {} checkpoint(s){} and its records in {}", checkpoints,
             set_aside > 0 ? fmt::format(" and the {} it had set aside in {}/", set_aside, kAbandonedDir) : "", root);
  }
}

// Moves each of `run_id`'s complete checkpoints after `step` (and those saved before run ids)
// into root/abandoned/, numbering a name already there; `latest` then names `resumed_dir` when it
// lies in root, else it is removed. Returns the moved dirs' new paths.
std::vector<std::string> set_aside_checkpoints_after(const std::string& root, int64_t step, const std::string& run_id,
                                                     const std::string& resumed_dir) {
  std::vector<std::string> moved;
  const std::string aside = ckpt::join_path(root, kAbandonedDir);
  for (const std::string& dir : complete_checkpoints(root)) {
    if (checkpoint_dir_step(dir) <= step) continue;
    const std::string lineage = checkpoint_run_id(dir);
    if (!lineage.empty() && lineage != run_id) continue;  // another run's: the identity check's business
    std::error_code ec;
    fs::create_directories(aside, ec);
    std::string target = ckpt::join_path(aside, fs::path(dir).filename().string());
    for (int n = 2; ckpt::path_exists(target); ++n)
      target = ckpt::join_path(aside, fs::path(dir).filename().string() + "." + std::to_string(n));
    if (!ec) fs::rename(dir, target, ec);
    if (ec) {
      throw UserError(fmt::format("checkpoint.dir {}: cannot move {} (a checkpoint after the resumed step {}) into {}: {}",
                                  root, dir, step, aside, ec.message()));
    }
    moved.push_back(target);
  }
  if (moved.empty()) return moved;
  const std::string latest = ckpt::join_path(root, ckpt::kLatestFile);
  fs::path resumed = fs::path(resumed_dir).lexically_normal();
  if (resumed.filename().empty()) resumed = resumed.parent_path();  // "ck/step_00000002/"
  std::error_code same_ec;
  const bool in_root = fs::equivalent(resumed.parent_path(), fs::path(root), same_ec);
  if (in_root && ckpt::path_exists(resumed.string())) {
    ckpt::write_file_atomic(latest, resumed.filename().string() + "\n");
  } else {
    std::error_code ec;
    fs::remove(latest, ec);
  }
  return moved;
}

}  // namespace strata
