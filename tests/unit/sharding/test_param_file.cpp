// ParamFile (offload_param nvme): records written through the update's sink read back as written,
// padding zero; gathers that follow a pass find each group read ahead once the pass is under
// way, so only its first two groups wait on the disk, pass after pass.
#include "catch_compat.h"

#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "backend/backend.h"
#include "sharding/sharded_param_store.h"

using namespace strata;

namespace {

constexpr int kGroups = 6;
constexpr int64_t kPiece = 3000;  // elements of each group's piece (BF16: 6000 B, two 4 KiB blocks)
constexpr int64_t kOwned = 2900;  // the rest is padding

std::vector<PartitionUnit> units() {
  std::vector<PartitionUnit> out;
  for (int g = 0; g < kGroups; ++g) {
    PartitionUnit u;
    u.begin = g * kPiece;
    u.numel = kPiece;
    u.padded = kPiece;
    u.piece = kPiece;
    u.shard_offset = g * kPiece;
    out.push_back(u);
  }
  return out;
}

float value(int g, int64_t i) { return static_cast<float>(g * 16 + i % 16); }  // exact in bf16

struct PassDriver {
  ParamFile& file;
  // As ShardedParamStore drives it: the group in hand (prefetched by the step before, or held
  // now), its gather done and released, the next one held for its prefetch, the one after read
  // ahead. Checks every group's values.
  void run(const std::vector<int>& order) {
    int held = -1, held_buffer = -1;
    for (size_t k = 0; k < order.size(); ++k) {
      const int g = order[k];
      const int b = held == g ? held_buffer : file.hold(g);
      const Tensor piece = file.piece(b);
      std::vector<float> got(static_cast<size_t>(kPiece));
      convert_elements(piece.data, DType::BF16, got.data(), DType::F32, got.size());
      for (int64_t i = 0; i < kPiece; ++i) REQUIRE(got[static_cast<size_t>(i)] == (i < kOwned ? value(g, i) : 0.0f));
      file.release(b);
      held = -1;
      if (k + 1 < order.size()) {
        held = order[k + 1];
        held_buffer = file.hold(held);
        if (k + 2 < order.size()) file.read_ahead(order[k + 2]);
      }
    }
    if (held >= 0) file.release(held_buffer);
  }
};

}  // namespace

TEST_CASE("ParamFile reads each layer group a group ahead of its gather, pass after pass") {
  char dir[] = "/tmp/strata-param-file.XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  std::unique_ptr<Backend> backend = make_cpu_backend();
  ParamFile file(*backend, dir, 3, /*pinned=*/false, units(), DType::BF16);
  CHECK(file.host_bytes() == 3 * (ParamFile::buffer_bytes(kPiece, DType::BF16) + 4096));
  // An update writes every owned element, piece by piece in shard order (two pieces a group).
  for (int g = 0; g < kGroups; ++g) {
    for (int64_t at : {int64_t{0}, int64_t{1000}}) {
      const int64_t count = at == 0 ? 1000 : kOwned - 1000;
      void* target = file.piece_target(g * kPiece + at, count);
      std::vector<float> values(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = value(g, at + i);
      convert_elements(values.data(), DType::F32, target, DType::BF16, values.size());
    }
  }
  file.finish();
  std::vector<int> forward, backward;
  for (int g = 0; g < kGroups; ++g) forward.push_back(g);
  for (int g = kGroups - 1; g >= 0; --g) backward.push_back(g);
  PassDriver pass{file};
  for (int round = 0; round < 3; ++round) {
    for (const std::vector<int>* order : {&forward, &backward}) {
      const int64_t before = file.reads_waited();
      pass.run(*order);
      // The pass's first two groups may wait (nothing reads them ahead); the rest must not.
      CHECK(file.reads_waited() - before <= 2);
    }
  }
  CHECK(rmdir(dir) == 0);  // the file went from it as soon as it was open
}
