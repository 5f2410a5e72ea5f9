// safetensors writer and validating reader. The reader trusts nothing in the header: every
// length, dtype, shape and byte range is checked against the file before any data is used.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "checkpoint/box.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"
#include "core/error.h"

namespace strata {
namespace {

// Real headers are kilobytes; the reference implementation caps them at 100 MB too, so a
// larger value means the file is something else.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr const char* kMetadataKey = "__metadata__";

uint64_t tensor_bytes(DType dtype, const std::vector<int64_t>& shape) {
  int64_t numel = 0;
  ckpt::checked_numel(shape, &numel);
  return static_cast<uint64_t>(numel) * dtype_size(dtype);
}

}  // namespace

void SafetensorsWriter::check_new_tensor(const std::string& name, const std::vector<int64_t>& shape) {
  if (name.empty() || name == kMetadataKey) {
    throw std::invalid_argument("SafetensorsWriter: invalid tensor name '" + name + "'");
  }
  if (names_.count(name)) throw std::invalid_argument("SafetensorsWriter: tensor '" + name + "' added twice");
  int64_t numel = 0;
  if (!ckpt::checked_numel(shape, &numel) || numel > std::numeric_limits<int64_t>::max() / 8) {
    throw std::invalid_argument("SafetensorsWriter: tensor '" + name + "' has invalid shape " +
                                ckpt::shape_string(shape));
  }
}

void SafetensorsWriter::add(const std::string& name, DType dtype, const std::vector<int64_t>& shape, const void* data) {
  check_new_tensor(name, shape);
  if (data == nullptr && tensor_bytes(dtype, shape) > 0) {
    throw std::invalid_argument("SafetensorsWriter: tensor '" + name + "' has no data");
  }
  tensors_.push_back({name, dtype, shape, data, nullptr});
  names_.insert(name);
}

void SafetensorsWriter::add_streamed(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                                     std::function<void(void* buffer)> produce) {
  check_new_tensor(name, shape);
  if (!produce) throw std::invalid_argument("SafetensorsWriter: tensor '" + name + "' has no producer");
  tensors_.push_back({name, dtype, shape, nullptr, std::move(produce)});
  names_.insert(name);
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

SafetensorsWriter::Written SafetensorsWriter::write(const std::string& path) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header[kMetadataKey] = metadata_;
  uint64_t data_size = 0;
  for (const Pending& t : tensors_) {
    const uint64_t bytes = tensor_bytes(t.dtype, t.shape);
    header[t.name] = {
        {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {data_size, data_size + bytes}}};
    data_size += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));

  ckpt::FileHandle file = ckpt::FileHandle::create_write(path);
  Checksum64 checksum;
  auto emit = [&](const void* data, size_t n) {
    file.write_all(data, n);
    checksum.update(data, n);
  };
  emit(length, 8);
  emit(text.data(), text.size());
  std::vector<unsigned char> staging;
  for (const Pending& t : tensors_) {
    const uint64_t bytes = tensor_bytes(t.dtype, t.shape);
    if (t.produce) {
      staging.assign(bytes, 0);
      t.produce(staging.data());
      emit(staging.data(), bytes);
    } else if (bytes > 0) {
      emit(t.data, bytes);
    }
  }
  file.sync();
  file.close();
  return {8 + text.size() + data_size, checksum.digest()};
}

// ---------------------------------------------------------------------------------------

SafetensorsReader::SafetensorsReader(SafetensorsReader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(other.fd_),
      data_start_(other.data_start_),
      entries_(std::move(other.entries_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {
  other.fd_ = -1;
}

SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    data_start_ = other.data_start_;
    entries_ = std::move(other.entries_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
    other.fd_ = -1;
  }
  return *this;
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

bool json_to_size(const nlohmann::json& value, int64_t* out) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (value.is_number_integer()) {
    *out = value.get<int64_t>();
    return *out >= 0;
  }
  return false;
}

SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& spec,
                             uint64_t data_size) {
  const std::string where = path + ": tensor '" + name + "'";
  if (!spec.is_object()) throw UserError(where + ": header entry is not an object");
  SafetensorsEntry entry;
  entry.name = name;
  const auto dtype = spec.find("dtype");
  if (dtype == spec.end() || !dtype->is_string()) throw UserError(where + ": missing \"dtype\"");
  if (!dtype_from_name(dtype->get<std::string>(), &entry.dtype)) {
    throw UserError(where + ": unknown dtype '" + dtype->get<std::string>() +
                    "' (strata reads F32, BF16, F16, I32, U16)");
  }
  const auto shape = spec.find("shape");
  if (shape == spec.end() || !shape->is_array()) throw UserError(where + ": missing \"shape\" array");
  for (const auto& dim : *shape) {
    int64_t d = 0;
    if (!json_to_size(dim, &d))
      throw UserError(where + ": shape " + shape->dump() + " has a non-integer or negative dim");
    entry.shape.push_back(d);
  }
  const auto offsets = spec.find("data_offsets");
  int64_t begin = 0, end = 0;
  if (offsets == spec.end() || !offsets->is_array() || offsets->size() != 2 || !json_to_size((*offsets)[0], &begin) ||
      !json_to_size((*offsets)[1], &end) || begin > end) {
    throw UserError(where + ": \"data_offsets\" must be [begin, end] with 0 <= begin <= end");
  }
  entry.begin = static_cast<uint64_t>(begin);
  entry.end = static_cast<uint64_t>(end);
  int64_t numel = 0;
  if (!ckpt::checked_numel(entry.shape, &numel)) throw UserError(where + ": shape " + shape->dump() + " is too large");
  const uint64_t expected = static_cast<uint64_t>(numel) * dtype_size(entry.dtype);
  if (entry.bytes() != expected) {
    throw UserError(where + ": data_offsets span " + std::to_string(entry.bytes()) + " bytes but shape " +
                    ckpt::shape_string(entry.shape) + " of " + dtype_name(entry.dtype) + " needs " +
                    std::to_string(expected));
  }
  if (entry.end > data_size) {
    throw UserError(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                    "] run past the end of the data section (" + std::to_string(data_size) +
                    " bytes); the file is truncated or its offsets are out of range");
  }
  return entry;
}

}  // namespace

SafetensorsReader SafetensorsReader::open(const std::string& path) {
  ckpt::FileHandle file = ckpt::FileHandle::open_read(path);
  const uint64_t file_size = file.size();
  if (file_size < 8) {
    throw UserError(path + ": file is truncated (" + std::to_string(file_size) +
                    " bytes, less than the 8-byte safetensors header length)");
  }
  unsigned char length_bytes[8];
  file.pread_all(length_bytes, 8, 0);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | length_bytes[i];
  if (header_size > kMaxHeaderBytes) {
    throw UserError(path + ": header length " + std::to_string(header_size) +
                    " is implausibly large; this is not a safetensors file");
  }
  if (header_size > file_size - 8) {
    throw UserError(path + ": file is truncated (header length says " + std::to_string(header_size) + " bytes, only " +
                    std::to_string(file_size - 8) + " follow)");
  }
  std::string text(header_size, '\0');
  file.pread_all(text.data(), header_size, 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": header is not valid JSON (" + e.what() + ")");
  }
  if (!header.is_object()) throw UserError(path + ": header is not a JSON object");

  SafetensorsReader reader;
  reader.path_ = path;
  reader.data_start_ = 8 + header_size;
  const uint64_t data_size = file_size - reader.data_start_;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) throw UserError(path + ": __metadata__ is not an object of strings");
      for (const auto& [mkey, mvalue] : value.items()) {
        if (!mvalue.is_string()) throw UserError(path + ": __metadata__ value of '" + mkey + "' is not a string");
        reader.metadata_[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    reader.entries_.push_back(parse_entry(path, key, value, data_size));
  }
  std::sort(reader.entries_.begin(), reader.entries_.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : reader.entries_) {
    if (e.bytes() == 0) continue;
    if (previous && e.begin < previous->end) {
      throw UserError(path + ": tensors '" + previous->name + "' and '" + e.name + "' have overlapping data_offsets");
    }
    previous = &e;
  }
  for (size_t i = 0; i < reader.entries_.size(); ++i) reader.index_[reader.entries_[i].name] = i;
  reader.fd_ = file.release();
  return reader;
}

bool SafetensorsReader::contains(const std::string& name) const { return index_.count(name) > 0; }

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) throw UserError(path_ + ": no tensor named '" + name + "'");
  return entries_[it->second];
}

void SafetensorsReader::read(const std::string& name, void* dst) const {
  const SafetensorsEntry& e = entry(name);
  read_bytes(name, 0, e.bytes(), dst);
}

void SafetensorsReader::read_bytes(const std::string& name, uint64_t byte_offset, uint64_t nbytes, void* dst) const {
  const SafetensorsEntry& e = entry(name);
  if (byte_offset > e.bytes() || nbytes > e.bytes() - byte_offset) {
    throw std::out_of_range("SafetensorsReader::read_bytes: range past the end of tensor '" + name + "' in " + path_);
  }
  if (nbytes == 0) return;
  ckpt::pread_exact(fd_, path_, dst, nbytes, data_start_ + e.begin + byte_offset);
}

}  // namespace strata
