// Sharded checkpoints: single-rank round trip, resharding between layouts saved by simulated
// ranks (threads + barrier), dtype conversion on read, and every error path the reader
// promises (gaps, bad boxes, wrong dtype).
#include <algorithm>
#include "catch_compat.h"
#include <cstring>

#include "checkpoint/checkpoint.h"
#include "checkpoint_test_util.h"
#include "core/error.h"
#include "core/rng.h"

using namespace strata;
using namespace strata::test;

namespace {

struct Original {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
  int64_t numel() const { return static_cast<int64_t>(values.size()); }
};

std::vector<Original> originals() {
  std::vector<Original> list = {{"layer.w", {6, 8}, {}}, {"layer.b", {10}, {}}, {"block.c", {4, 6, 5}, {}}};
  for (size_t t = 0; t < list.size(); ++t) {
    int64_t n = 1;
    for (int64_t d : list[t].shape) n *= d;
    for (int64_t i = 0; i < n; ++i)
      list[t].values.push_back(static_cast<float>(t * 1000) + 0.5f * static_cast<float>(i));
  }
  return list;
}

// A piece of `t`: the box (offset, shape) of `view` (empty view = the tensor's own shape).
TensorPiece make_piece(const Original& t, std::vector<int64_t> view, std::vector<int64_t> offset,
                       std::vector<int64_t> shape, std::vector<std::vector<float>>& storage) {
  const std::vector<int64_t>& v = view.empty() ? t.shape : view;
  storage.push_back(extract_box(t.values, v, offset, shape));
  TensorPiece piece;
  piece.name = t.name;
  piece.dtype = DType::F32;
  piece.global_shape = t.shape;
  piece.view_shape = view;
  piece.offset = offset;
  piece.shape = shape;
  piece.data = storage.back().data();
  return piece;
}

// Layouts: per rank, the list of pieces it holds.
using Layout = std::function<std::vector<TensorPiece>(int rank, const std::vector<Original>&,
                                                      std::vector<std::vector<float>>& storage)>;

// 2 ranks: rows of w split, b replicated on both, c split along dim 1 (a TP column split).
std::vector<TensorPiece> layout_rows(int rank, const std::vector<Original>& t, std::vector<std::vector<float>>& s) {
  return {make_piece(t[0], {}, {rank * 3, 0}, {3, 8}, s), make_piece(t[1], {}, {0}, {10}, s),
          make_piece(t[2], {}, {0, rank * 3, 0}, {4, 3, 5}, s)};
}

// 4 ranks: every tensor flattened and cut into uneven ZeRO-style ranges.
std::vector<TensorPiece> layout_flat(int rank, const std::vector<Original>& t, std::vector<std::vector<float>>& s) {
  std::vector<TensorPiece> pieces;
  for (const Original& o : t) {
    const int64_t n = o.numel();
    const int64_t cuts[5] = {0, n / 5, n / 2, n / 2 + 1, n};
    pieces.push_back(make_piece(o, {n}, {cuts[rank]}, {cuts[rank + 1] - cuts[rank]}, s));
  }
  return pieces;
}

std::string save_layout(const std::string& root, int64_t step, int world, const Layout& layout, int keep_last = 0,
                        const nlohmann::json& meta = {{"layout", "test"}}) {
  const std::vector<Original> t = originals();
  std::string saved;
  const auto errors = run_ranks(world, [&](int rank, const SaveContext& context) {
    std::vector<std::vector<float>> storage;
    const std::vector<TensorPiece> pieces = layout(rank, t, storage);
    const std::string dir =
        save_checkpoint(root, step, context, pieces, {{"rank", rank}, {"rng", 100 + rank}}, meta, keep_last);
    if (rank == 0) saved = dir;
  });
  for (int r = 0; r < world; ++r) INFO("rank " << r << ": " << error_message(errors[static_cast<size_t>(r)]));
  for (const auto& e : errors) REQUIRE(!e);
  return saved;
}

void check_all_reads(const CheckpointReader& reader) {
  const std::vector<Original> t = originals();
  Rng rng(7, 1);
  for (const Original& o : t) {
    std::vector<float> full(o.values.size());
    reader.read_full(o.name, DType::F32, full.data());
    REQUIRE(full == o.values);
    for (int trial = 0; trial < 25; ++trial) {  // arbitrary boxes
      std::vector<int64_t> offset, shape;
      for (int64_t d : o.shape) {
        const int64_t lo = static_cast<int64_t>(rng.below(static_cast<uint64_t>(d)));
        offset.push_back(lo);
        shape.push_back(1 + static_cast<int64_t>(rng.below(static_cast<uint64_t>(d - lo))));
      }
      std::vector<float> box(static_cast<size_t>(extract_box(o.values, o.shape, offset, shape).size()));
      reader.read_box(o.name, offset, shape, DType::F32, box.data());
      REQUIRE(box == extract_box(o.values, o.shape, offset, shape));
    }
    const int64_t begin = o.numel() / 3, count = o.numel() / 2;
    std::vector<float> flat(static_cast<size_t>(count));
    reader.read_flat(o.name, begin, count, DType::F32, flat.data());
    REQUIRE(flat == std::vector<float>(o.values.begin() + begin, o.values.begin() + begin + count));
  }
  // w (6, 8) seen as (12, 4): a box in a view neither layout used.
  std::vector<float> viewed(3 * 2);
  reader.read_view_box("layer.w", {12, 4}, {5, 1}, {3, 2}, DType::F32, viewed.data());
  CHECK(viewed == extract_box(t[0].values, {12, 4}, {5, 1}, {3, 2}));
}

}  // namespace

TEST_CASE("single-rank save and load round trip") {
  QuietLogs quiet;
  ScratchDir root;
  const std::vector<Original> t = originals();
  std::vector<std::vector<float>> storage;
  storage.reserve(8);
  std::vector<TensorPiece> pieces;
  for (const Original& o : t)
    pieces.push_back(make_piece(o, {}, std::vector<int64_t>(o.shape.size(), 0), o.shape, storage));
  const nlohmann::json meta = {{"model", {{"n_layer", 2}}}, {"layout", {{"dp", 1}}}};
  const std::string dir = save_checkpoint(root.path(), 12, SaveContext{0, 1, nullptr}, pieces, {{"rng", 5}}, meta, 0);
  CHECK(dir == root / "step_00000012");
  CHECK(read_bytes(root / "latest") == "step_00000012\n");
  CHECK(find_latest_checkpoint(root.path()) == dir);
  CHECK(!std::filesystem::exists(root / "step_00000012.tmp"));

  for (const std::string& path : {dir, root.path()}) {  // a step dir or the root
    const CheckpointReader reader = CheckpointReader::open(path);
    CHECK(reader.path() == dir);
    CHECK(reader.step() == 12);
    CHECK(reader.saved_world_size() == 1);
    CHECK(reader.global_meta() == meta);
    CHECK(reader.rank_state(0) == nlohmann::json({{"rng", 5}}));
    CHECK_THROWS_AS(reader.rank_state(1), UserError);
    CHECK(reader.tensor_names() == std::vector<std::string>{"block.c", "layer.b", "layer.w"});
    CHECK(reader.info("block.c").global_shape == std::vector<int64_t>{4, 6, 5});
    CHECK(reader.info("block.c").dtype == DType::F32);
    check_all_reads(reader);
    reader.verify_all();
  }
  // The rank file is a plain safetensors file with the tensors under their own names.
  const SafetensorsReader file = SafetensorsReader::open(dir + "/rank_00000.safetensors");
  CHECK(file.contains("layer.w"));
  CHECK(file.metadata().at("format") == "pt");
}

TEST_CASE("resharding: checkpoints saved by different layouts read back identically") {
  QuietLogs quiet;
  ScratchDir root;
  const std::string rows = save_layout(root / "rows", 3, 2, layout_rows);
  const std::string flat = save_layout(root / "flat", 3, 4, layout_flat);
  for (const std::string& dir : {rows, flat}) {
    INFO(dir);
    const CheckpointReader reader = CheckpointReader::open(dir);
    check_all_reads(reader);
  }
  const CheckpointReader reader = CheckpointReader::open(flat);
  CHECK(reader.saved_world_size() == 4);
  CHECK(reader.rank_state(3) == nlohmann::json({{"rank", 3}, {"rng", 103}}));
  // A rank holding two pieces of one tensor stores them under distinct keys.
  const auto two_pieces = [](int /*rank*/, const std::vector<Original>& t, std::vector<std::vector<float>>& s) {
    std::vector<TensorPiece> pieces = {make_piece(t[1], {}, {0}, {10}, s),
                                       make_piece(t[2], {}, {0, 0, 0}, {4, 6, 5}, s)};
    for (int64_t row = 0; row < 6; ++row) pieces.push_back(make_piece(t[0], {}, {row, 0}, {1, 8}, s));
    return pieces;
  };
  check_all_reads(CheckpointReader::open(save_layout(root / "many", 1, 1, two_pieces)));
}

TEST_CASE("reads convert between F32, BF16 and F16, integers read only as themselves") {
  QuietLogs quiet;
  ScratchDir root;
  const std::vector<float> values = {1.0f, -2.5f, 0.1f, 3.0e4f, -1e-6f, 7.125f};
  std::vector<uint16_t> as_bf16(values.size());
  convert_elements(values.data(), DType::F32, as_bf16.data(), DType::BF16, values.size());
  const std::vector<int32_t> ints = {3, -4, 5};
  std::vector<TensorPiece> pieces(3);
  pieces[0] = {"f32", DType::F32, {2, 3}, {0, 0}, {2, 3}, values.data(), {}};
  pieces[1] = {"bf16", DType::BF16, {6}, {0}, {6}, as_bf16.data(), {}};
  pieces[2] = {"steps", DType::I32, {3}, {0}, {3}, ints.data(), {}};
  save_checkpoint(root.path(), 1, SaveContext{0, 1, nullptr}, pieces, nullptr, nullptr, 0);
  const CheckpointReader reader = CheckpointReader::open(root.path());

  std::vector<uint16_t> bf16_out(6), f16_out(6);
  reader.read_full("f32", DType::BF16, bf16_out.data());
  CHECK(bf16_out == as_bf16);
  reader.read_full("f32", DType::F16, f16_out.data());
  for (size_t i = 0; i < values.size(); ++i) CHECK(f16_out[i] == float_to_fp16(values[i]));
  std::vector<float> widened(6);
  reader.read_full("bf16", DType::F32, widened.data());
  for (size_t i = 0; i < values.size(); ++i) CHECK(widened[i] == bf16_to_float(as_bf16[i]));
  std::vector<int32_t> ints_back(3);
  reader.read_full("steps", DType::I32, ints_back.data());
  CHECK(ints_back == ints);
  std::vector<float> wrong(3);
  CHECK_THROWS_WITH(reader.read_full("steps", DType::F32, wrong.data()), strata_catch::Contains("cannot be read as F32"));
}

TEST_CASE("reader errors: missing tensor, box outside, uncovered elements") {
  QuietLogs quiet;
  ScratchDir root;
  const std::string dir = save_layout(root.path(), 1, 2, layout_rows);
  std::vector<float> buffer(64);
  {
    const CheckpointReader reader = CheckpointReader::open(dir);
    CHECK_THROWS_WITH(reader.read_full("nope", DType::F32, buffer.data()), strata_catch::Contains("no tensor named 'nope'"));
    CHECK_THROWS_WITH(reader.read_box("layer.w", {5, 0}, {2, 8}, DType::F32, buffer.data()),
                      strata_catch::Contains("outside"));
    CHECK_THROWS_WITH(reader.read_box("layer.w", {0}, {2}, DType::F32, buffer.data()), strata_catch::Contains("dims"));
    CHECK_THROWS_AS(reader.read_view_box("layer.w", {7, 7}, {0, 0}, {1, 1}, DType::F32, buffer.data()), UserError);
  }
  // Drop rank 1's piece of w from the manifest: rows 3..5 are then stored nowhere.
  const std::string manifest_path = dir + "/manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(read_bytes(manifest_path));
  auto& pieces = manifest["tensors"]["layer.w"]["pieces"];
  pieces.erase(std::remove_if(pieces.begin(), pieces.end(),
                              [](const nlohmann::json& p) { return p["file"] == "rank_00001.safetensors"; }),
               pieces.end());
  write_sealed_manifest(dir, manifest.dump());
  const CheckpointReader reader = CheckpointReader::open(dir);
  reader.read_box("layer.w", {1, 2}, {2, 3}, DType::F32, buffer.data());  // rows 1-2 still fine
  CHECK_THROWS_WITH(reader.read_box("layer.w", {2, 2}, {3, 3}, DType::F32, buffer.data()),
                    strata_catch::Contains("element [3, 2]") && strata_catch::Contains("no saved piece"));
}

TEST_CASE("opening a path without a checkpoint explains what is missing") {
  QuietLogs quiet;
  ScratchDir root;
  CHECK_THROWS_WITH(
      CheckpointReader::open(root.path()),
      "checkpoint.resume: " + root.path() + ": no checkpoint found (no manifest.json and no latest file)");
  CHECK_THROWS_WITH(CheckpointReader::open(root / "absent"), strata_catch::Contains("no such file or directory"));
  CHECK(!find_latest_checkpoint(root.path()));
  CHECK(!find_latest_checkpoint(root / "absent"));
  write_bytes(root / "latest", "step_00000009\n");
  CHECK_THROWS_WITH(find_latest_checkpoint(root.path()), strata_catch::Contains("not a complete checkpoint"));
  CHECK_THROWS_WITH(CheckpointReader::open(root.path()), strata_catch::StartsWith("checkpoint.resume: "));
  write_bytes(root / "latest", "../elsewhere\n");
  CHECK_THROWS_AS(find_latest_checkpoint(root.path()), UserError);
}

TEST_CASE("the manifest is read with its format checked") {
  QuietLogs quiet;
  ScratchDir root;
  const std::string dir = save_layout(root.path(), 1, 2, layout_rows);
  const std::string manifest_path = dir + "/manifest.json";
  const std::string good = read_bytes(manifest_path);
  nlohmann::json manifest = nlohmann::json::parse(good);
  manifest["format_version"] = 99;
  write_sealed_manifest(dir, manifest.dump());
  CHECK_THROWS_WITH(CheckpointReader::open(dir), strata_catch::Contains("newer strata"));
  write_sealed_manifest(dir, "{\"format\": \"strata-checkpoint\"");
  CHECK_THROWS_WITH(CheckpointReader::open(dir), strata_catch::Contains("malformed manifest"));
  manifest = nlohmann::json::parse(good);
  manifest.erase("step");
  write_sealed_manifest(dir, manifest.dump());
  CHECK_THROWS_WITH(CheckpointReader::open(dir), strata_catch::Contains(manifest_path));
}

TEST_CASE("an edited manifest, a missing seal or a step unlike the dir's name is refused") {
  QuietLogs quiet;
  ScratchDir root;
  const std::string dir = save_layout(root.path(), 1, 2, layout_rows);
  const std::string manifest_path = dir + "/manifest.json";
  const std::string good = read_bytes(manifest_path);
  CHECK_NOTHROW(CheckpointReader::open(dir));
  // One digit of the step changed, the JSON still valid: the seal no longer matches.
  std::string edited = good;
  const size_t at = edited.find("\"step\": 1");
  REQUIRE(at != std::string::npos);
  edited[at + 8] = '2';
  write_bytes(manifest_path, edited);
  CHECK_THROWS_WITH(CheckpointReader::open(dir), strata_catch::Contains("do not match") && strata_catch::Contains("manifest.checksum"));
  // Sealed anew, the step still disagrees with the dir's name.
  write_sealed_manifest(dir, edited);
  CHECK_THROWS_WITH(CheckpointReader::open(dir), strata_catch::Contains("says step 2 but its dir is step_00000001"));
  write_bytes(manifest_path, good);
  std::filesystem::remove(dir + "/manifest.checksum");
  CHECK_THROWS_WITH(CheckpointReader::open(dir), strata_catch::Contains("manifest.checksum: missing"));
  // A format-1 manifest (written before the seal existed) is read without one.
  nlohmann::json old = nlohmann::json::parse(good);
  old["format_version"] = 1;
  write_bytes(manifest_path, old.dump());
  CHECK_NOTHROW(CheckpointReader::open(dir));
}

TEST_CASE("a latest file holding binary junk is reported whole") {
  QuietLogs quiet;
  ScratchDir root;
  save_layout(root.path(), 1, 2, layout_rows);
  write_bytes(root / "latest", std::string("step_0000\0\x01junk\n", 16));
  try {
    find_latest_checkpoint(root.path());
    FAIL("expected a UserError");
  } catch (const UserError& e) {
    const std::string message = e.what();
    CHECK(message.find("step_0000\\x00\\x01junk") != std::string::npos);
    CHECK(message.find("not the name of a step dir") != std::string::npos);
    CHECK(message.find('\0') == std::string::npos);
  }
}

TEST_CASE("large tensors: direct reads, chunked conversion and sparse column reads agree") {
  QuietLogs quiet;
  ScratchDir root;
  // 12 MiB of F32: bigger than the reader's 8 MiB staging buffer and its 1 MiB direct-read size.
  const int64_t rows = 3, cols = int64_t{1} << 20;
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 100003) * 0.25f;
  const int64_t split = rows * cols / 3 + 17;  // two uneven flat ranges
  const std::vector<TensorPiece> pieces = {
      {"big", DType::F32, {rows, cols}, {0}, {split}, values.data(), {rows * cols}},
      {"big", DType::F32, {rows, cols}, {split}, {rows * cols - split}, values.data() + split, {rows * cols}}};
  save_checkpoint(root.path(), 1, SaveContext{0, 1, nullptr}, pieces, nullptr, nullptr, 0);
  const CheckpointReader reader = CheckpointReader::open(root.path());

  std::vector<float> full(values.size());
  reader.read_full("big", DType::F32, full.data());
  CHECK(full == values);
  std::vector<uint16_t> half(values.size()), expected(values.size());
  reader.read_full("big", DType::BF16, half.data());
  convert_elements(values.data(), DType::F32, expected.data(), DType::BF16, values.size());
  CHECK(half == expected);
  // Ten columns from each row: runs 4 MiB apart, so each is its own small read.
  std::vector<float> columns(rows * 10);
  reader.read_box("big", {0, cols - 12}, {rows, 10}, DType::F32, columns.data());
  CHECK(columns == extract_box(values, {rows, cols}, {0, cols - 12}, {rows, 10}));
}
