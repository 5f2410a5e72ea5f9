// Checkpoint life cycle on disk: corruption is caught by checksum and size, old step dirs are
// pruned, interrupted or failed saves never touch the previous checkpoint or `latest`, and a
// failure on one rank surfaces on every rank instead of hanging them.
#include <algorithm>
#include "catch_compat.h"
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint_test_util.h"
#include "core/error.h"

using namespace strata;
using namespace strata::test;
namespace fs = std::filesystem;

namespace {

// Each rank saves rows [rank * rows_per_rank, ...) of a (world * rows_per_rank, 4) tensor
// whose values encode the step, so tests can tell checkpoints apart.
std::string save_step(const std::string& root, int64_t step, int world, int keep_last = 0) {
  const int64_t rows_per_rank = 2, cols = 4;
  std::string dir;
  const auto errors = run_ranks(world, [&](int rank, const SaveContext& context) {
    std::vector<float> rows(static_cast<size_t>(rows_per_rank * cols));
    for (size_t i = 0; i < rows.size(); ++i)
      rows[i] = static_cast<float>(step * 100 + rank * 10) + static_cast<float>(i);
    TensorPiece piece{
        "w",         DType::F32, {world * rows_per_rank, cols}, {rank * rows_per_rank, 0}, {rows_per_rank, cols},
        rows.data(), {}};
    const std::string saved =
        save_checkpoint(root, step, context, {piece}, {{"rank", rank}}, {{"step", step}}, keep_last);
    if (rank == 0) dir = saved;
  });
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return dir;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

float first_value(const std::string& path) {
  const CheckpointReader reader = CheckpointReader::open(path);
  float v = 0;
  reader.read_box("w", {0, 0}, {1, 1}, DType::F32, &v);
  return v;
}

}  // namespace

TEST_CASE("a flipped byte is caught by the checksum and named by file") {
  QuietLogs quiet;
  ScratchDir root;
  const std::string dir = save_step(root.path(), 1, 2);
  const std::string victim = dir + "/rank_00001.safetensors";
  std::string bytes = read_bytes(victim);
  bytes[bytes.size() - 3] ^= 0x01;  // inside rank 1's data, size unchanged
  write_bytes(victim, bytes);

  const CheckpointReader reader = CheckpointReader::open(dir);  // sizes still match
  std::vector<float> out(4 * 4);
  float row0 = 0;
  reader.read_box("w", {0, 0}, {1, 1}, DType::F32, &row0);  // rank 0's file is intact
  CHECK(row0 == 100.0f);
  CHECK_THROWS_WITH(reader.read_full("w", DType::F32, out.data()),
                    strata_catch::Contains(victim) && strata_catch::Contains("checksum mismatch"));
  CHECK_THROWS_WITH(reader.verify_all(), strata_catch::Contains("rank_00001.safetensors"));
  // Without verification the corrupt value is returned: proof that the check did the work.
  const CheckpointReader unchecked = CheckpointReader::open(dir, "checkpoint.resume", false);
  CHECK_NOTHROW(unchecked.read_full("w", DType::F32, out.data()));
}

TEST_CASE("a file of the wrong size is rejected at open") {
  QuietLogs quiet;
  ScratchDir root;
  const std::string dir = save_step(root.path(), 1, 2);
  const std::string victim = dir + "/rank_00000.safetensors";
  fs::resize_file(victim, fs::file_size(victim) - 1);
  CHECK_THROWS_WITH(CheckpointReader::open(dir), strata_catch::Contains(victim) && strata_catch::Contains("truncated"));
  fs::remove(victim);
  CHECK_THROWS_WITH(CheckpointReader::open(dir), strata_catch::Contains(victim) && strata_catch::Contains("missing"));
}

TEST_CASE("keep_last prunes the oldest step dirs but never the one just saved") {
  QuietLogs quiet;
  ScratchDir root;
  for (int64_t step = 1; step <= 5; ++step) save_step(root.path(), step, 2, 2);
  CHECK(entries(root.path()) == std::vector<std::string>{"latest", "step_00000004", "step_00000005"});
  CHECK(read_bytes(root / "latest") == "step_00000005\n");
  // Resumed from an older step: the new save is kept, with the newest of the rest.
  save_step(root.path(), 3, 2, 2);
  CHECK(entries(root.path()) == std::vector<std::string>{"latest", "step_00000003", "step_00000005"});
  CHECK(read_bytes(root / "latest") == "step_00000003\n");
  save_step(root.path(), 6, 2, 0);  // 0 keeps everything
  CHECK(entries(root.path()).size() == 4);
}

TEST_CASE("an interrupted save leaves the previous checkpoint and latest untouched") {
  QuietLogs quiet;
  ScratchDir root;
  const std::string first = save_step(root.path(), 1, 2);
  // What a save killed before its rename leaves behind.
  fs::create_directory(root / "step_00000002.tmp");
  write_bytes(root / "step_00000002.tmp/rank_00000.safetensors", "partial");
  fs::create_directory(root / "step_00000007.tmp");
  CHECK(find_latest_checkpoint(root.path()) == first);
  CHECK(read_bytes(root / "latest") == "step_00000001\n");
  CHECK(first_value(root.path()) == 100.0f);
  fs::remove(root / "latest");  // even without latest, the tmp dirs are not mistaken for checkpoints
  CHECK(find_latest_checkpoint(root.path()) == first);

  // The next save of that step replaces the leftover and removes the other stale dir.
  const std::string second = save_step(root.path(), 2, 2);
  CHECK(entries(root.path()) == std::vector<std::string>{"latest", "step_00000001", "step_00000002"});
  CHECK(first_value(root.path()) == 200.0f);
  CHECK(entries(second) == std::vector<std::string>{"manifest.checksum", "manifest.json", "rank_00000.safetensors",
                                                    "rank_00001.safetensors"});
}

TEST_CASE("a failing rank fails the save on every rank without touching latest") {
  QuietLogs quiet;
  ScratchDir root;
  save_step(root.path(), 1, 2);
  // Rank 1 hands in a bad piece: both ranks throw (neither hangs), rank 0 names rank 1.
  std::vector<std::exception_ptr> errors = run_ranks(2, [&](int rank, const SaveContext& context) {
    std::vector<float> rows(8, 1.0f);
    TensorPiece piece{"w", DType::F32, {4, 4}, {rank == 1 ? 9 : 0, 0}, {2, 4}, rows.data(), {}};
    save_checkpoint(root.path(), 2, context, {piece}, nullptr, nullptr, 0);
  });
  REQUIRE(errors[0]);
  REQUIRE(errors[1]);
  CHECK_THAT(error_message(errors[0]), strata_catch::Contains("failed on rank 1") && strata_catch::Contains("outside"));
  CHECK_THAT(error_message(errors[1]), strata_catch::Contains("outside"));
  CHECK(read_bytes(root / "latest") == "step_00000001\n");
  CHECK(!fs::exists(root / "step_00000002"));

  // Pieces that leave a row uncovered are refused by rank 0; rank 1 learns the save failed.
  errors = run_ranks(2, [&](int rank, const SaveContext& context) {
    std::vector<float> rows(8, 1.0f);
    TensorPiece piece{"w", DType::F32, {4, 4}, {rank * 2, 0}, {rank == 0 ? 1 : 2, 4}, rows.data(), {}};
    save_checkpoint(root.path(), 3, context, {piece}, nullptr, nullptr, 0);
  });
  CHECK_THAT(error_message(errors[0]), strata_catch::Contains("element [1, 0] is in no rank's pieces"));
  CHECK_THAT(error_message(errors[1]), strata_catch::Contains("rank 0 reports the cause"));
  CHECK(read_bytes(root / "latest") == "step_00000001\n");
  CHECK(first_value(root.path()) == 100.0f);

  // Ranks disagreeing on a tensor's shape are refused too.
  errors = run_ranks(2, [&](int rank, const SaveContext& context) {
    std::vector<float> rows(8, 1.0f);
    TensorPiece piece{"w", DType::F32, {4 + rank * 2, 4}, {rank * 2, 0}, {2, 4}, rows.data(), {}};
    save_checkpoint(root.path(), 4, context, {piece}, nullptr, nullptr, 0);
  });
  CHECK_THAT(error_message(errors[0]), strata_catch::Contains("tensor 'w' is saved as"));
  CHECK(errors[1]);
  CHECK(read_bytes(root / "latest") == "step_00000001\n");
}

TEST_CASE("saving a step again replaces it whole") {
  QuietLogs quiet;
  ScratchDir root;
  save_step(root.path(), 5, 2);
  save_step(root.path(), 5, 1);  // same step, now from one rank with different data
  CHECK(entries(root.path()) == std::vector<std::string>{"latest", "step_00000005"});
  CHECK(entries(root / "step_00000005") ==
        std::vector<std::string>{"manifest.checksum", "manifest.json", "rank_00000.safetensors"});
  const CheckpointReader reader = CheckpointReader::open(root.path());
  CHECK(reader.saved_world_size() == 1);
  CHECK(reader.info("w").global_shape == std::vector<int64_t>{2, 4});
}

TEST_CASE("save_checkpoint rejects misuse before touching the disk") {
  ScratchDir root;
  const float x = 0;
  const TensorPiece piece{"x", DType::F32, {1}, {0}, {1}, &x, {}};
  CHECK_THROWS_AS(save_checkpoint(root.path(), 1, SaveContext{0, 2, nullptr}, {piece}, nullptr, nullptr, 0),
                  std::invalid_argument);
  CHECK_THROWS_AS(save_checkpoint(root.path(), 1, SaveContext{2, 2, [] {}}, {piece}, nullptr, nullptr, 0),
                  std::invalid_argument);
  CHECK_THROWS_AS(save_checkpoint(root.path(), -1, SaveContext{0, 1, nullptr}, {piece}, nullptr, nullptr, 0),
                  std::invalid_argument);
  CHECK(entries(root.path()).empty());
}
