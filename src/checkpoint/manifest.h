// Internal to src/checkpoint: names and constants of the on-disk checkpoint layout, shared by
// the saver and the reader so the two cannot drift apart.
//
// root/latest                       text: the name of the newest complete step dir
// root/step_%08d/manifest.json      the index (format below)
// root/step_%08d/manifest.checksum  "checksum64 <16 hex digits>" of manifest.json's bytes
//                                   (format_version 2 and later): an edited manifest is refused
// root/step_%08d/rank_%05d.safetensors
//
// manifest.json: {"format": "strata-checkpoint", "format_version": 2, "step", "world_size",
//   "checksum": "checksum64", "global_meta": {...},
//   "files": [{"file", "rank", "bytes", "checksum": 16 hex digits}],
//   "rank_state": [one JSON value per rank],
//   "tensors": {name: {"dtype", "shape", "pieces": [{"file", "key", "offset", "shape", "view"?}]}}}
// A piece's "view" appears only when its box is expressed in a view other than "shape".
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace strata::ckpt {

constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kLatestFile = "latest";
constexpr const char* kFormatName = "strata-checkpoint";
constexpr const char* kManifestChecksumFile = "manifest.checksum";
// 2: manifest.checksum guards the manifest. Version 1 checkpoints (without it) still load.
constexpr int kFormatVersion = 2;
constexpr const char* kChecksumName = "checksum64";
constexpr const char* kTmpSuffix = ".tmp";

inline std::string rank_file_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05d.safetensors", rank);
  return name;
}
// Per-rank record (pieces, checksum, rank_state) that rank 0 folds into the manifest.
inline std::string rank_record_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05d.json", rank);
  return name;
}
// Written instead of the record when a rank fails, so rank 0 can report why.
inline std::string rank_error_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05d.error", rank);
  return name;
}
// Step number of a "step_<digits>" dir name, or -1.
int64_t parse_step_dir_name(const std::string& name);
// The sidecar's text for manifest bytes `manifest`.
std::string manifest_checksum_text(const std::string& manifest);
// `text` for an error message: control and non-ASCII bytes (a NUL would cut the message short)
// written as \xNN, at most `limit` bytes of it.
std::string printable(const std::string& text, size_t limit = 200);

}  // namespace strata::ckpt
