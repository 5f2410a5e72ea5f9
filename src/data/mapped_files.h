// Internal to src/data: the token shards' memory maps, known to a SIGBUS handler. A shard cut
// short while a run reads it makes the pages past its new end fault; instead of a raw crash the
// process then ends with exit code 2 and a message naming the file.
#pragma once
#include <cstddef>
#include <string>

namespace strata {

// Records [base, base + bytes) as the map of `path` (installs the handler on first use).
void register_mapped_file(const void* base, size_t bytes, const std::string& path);
void unregister_mapped_file(const void* base);

}  // namespace strata
