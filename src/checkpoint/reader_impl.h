// Internal to src/checkpoint: the state behind a CheckpointReader — files and which boxes of
// each tensor they hold — shared by the reader of strata checkpoints and the one of HuggingFace
// weight folders, so that both are read through the same resharding code.
#pragma once
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/box.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"
#include "checkpoint/manifest.h"
#include "core/error.h"

namespace strata {

struct CheckpointReader::Impl {
  struct File {
    std::string name;
    uint64_t bytes = 0;
    uint64_t checksum = 0;
    bool verified = false;
    std::optional<SafetensorsReader> reader;
  };
  struct Piece {
    size_t file = 0;
    std::string key;
    std::vector<int64_t> view, offset, shape;
  };
  struct Tensor {
    TensorInfo info;
    std::vector<Piece> pieces;
  };

  std::string dir;
  bool verify = true;
  int64_t step = 0;
  nlohmann::json global_meta;
  std::vector<nlohmann::json> rank_states;
  std::vector<File> files;
  std::map<std::string, Tensor> tensors;
  mutable std::mutex mutex;  // guards the lazy open/verify of files

  std::string file_path(size_t index) const { return ckpt::join_path(dir, files[index].name); }
  const Tensor& tensor(const std::string& name) const {
    const auto it = tensors.find(name);
    if (it == tensors.end()) throw UserError("checkpoint " + dir + ": no tensor named '" + name + "'");
    return it->second;
  }
  void verify_file(File& file, size_t index) {
    const uint64_t actual = checksum_file(file_path(index));
    if (actual != file.checksum) {
      throw UserError(file_path(index) + ": checksum mismatch (file has " + ckpt::hex64(actual) + ", " +
                      ckpt::kManifestFile + " says " + ckpt::hex64(file.checksum) +
                      "): the file is corrupt or was modified; restore it or resume from another checkpoint");
    }
    file.verified = true;
  }
  // The file's reader, verified and cross-checked against the manifest on first use.
  const SafetensorsReader& reader(size_t index) {
    std::lock_guard<std::mutex> lock(mutex);
    File& file = files[index];
    if (file.reader) return *file.reader;
    if (verify && !file.verified) verify_file(file, index);
    SafetensorsReader opened = SafetensorsReader::open(file_path(index));
    for (const auto& [name, t] : tensors) {
      for (const Piece& p : t.pieces) {
        if (p.file != index) continue;
        if (!opened.contains(p.key))
          throw UserError(file_path(index) + ": has no tensor '" + p.key + "' (manifest lists it)");
        const SafetensorsEntry& e = opened.entry(p.key);
        if (e.dtype != t.info.dtype || e.shape != p.shape) {
          throw UserError(file_path(index) + ": tensor '" + p.key + "' is " + dtype_name(e.dtype) + " " +
                          ckpt::shape_string(e.shape) + " but the manifest says " + dtype_name(t.info.dtype) + " " +
                          ckpt::shape_string(p.shape));
        }
      }
    }
    file.reader.emplace(std::move(opened));
    return *file.reader;
  }
};

}  // namespace strata
