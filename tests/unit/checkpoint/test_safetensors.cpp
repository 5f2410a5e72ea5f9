// safetensors writer/reader: byte-exact layout, round trips, parsing of a hand-built file,
// and one test per kind of corrupt file; plus the Checksum64 properties checkpoints rely on.
#include "catch_compat.h"
#include <cstring>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint_test_util.h"
#include "core/error.h"

using namespace strata;
using strata::test::read_bytes;
using strata::test::ScratchDir;
using strata::test::write_bytes;

namespace {

uint64_t le64(const std::string& bytes) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return v;
}

std::string le64_bytes(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

// A file of a header (as given, unpadded) followed by `data_bytes` bytes.
std::string make_file(const std::string& header, size_t data_bytes) {
  return le64_bytes(header.size()) + header + std::string(data_bytes, '\x01');
}

void require_open_error(const std::string& path, const std::string& expected) {
  try {
    SafetensorsReader::open(path);
    FAIL("opened a corrupt file: " << path);
  } catch (const UserError& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find(expected) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("safetensors round trip keeps order, padding, metadata and data") {
  ScratchDir dir;
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f};
  const std::vector<uint16_t> b = {float_to_bf16(1.0f), float_to_bf16(-0.5f), float_to_bf16(2.0f)};
  const std::vector<int32_t> c = {-7, 8, 1 << 30, 0};
  const uint16_t scalar = float_to_fp16(0.75f);
  SafetensorsWriter writer;
  writer.add("z.first", DType::F32, {2, 3}, a.data());
  writer.add("a.second", DType::BF16, {3}, b.data());
  writer.add("empty", DType::F32, {0, 3}, nullptr);
  writer.add("ints", DType::I32, {2, 2}, c.data());
  writer.add("scalar", DType::F16, {}, &scalar);
  writer.set_metadata("format", "pt");
  writer.set_metadata("note", "hello");
  const std::string path = dir / "t.safetensors";
  const SafetensorsWriter::Written written = writer.write(path);

  const std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() == written.bytes);
  const uint64_t header_size = le64(bytes);
  CHECK(header_size % 8 == 0);
  const std::string header = bytes.substr(8, header_size);
  CHECK(header.front() == '{');
  const size_t last_brace = header.rfind('}');
  CHECK(header.find_first_not_of(' ', last_brace + 1) == std::string::npos);  // only space padding
  const auto json = nlohmann::json::parse(header);
  CHECK(json["__metadata__"]["note"] == "hello");
  CHECK(json["z.first"]["data_offsets"] == nlohmann::json({0, 24}));  // insertion order, contiguous
  CHECK(json["a.second"]["data_offsets"] == nlohmann::json({24, 30}));
  CHECK(json["ints"]["data_offsets"] == nlohmann::json({30, 46}));
  CHECK(json["scalar"]["shape"] == nlohmann::json::array());
  CHECK(bytes.size() == 8 + header_size + 48);
  CHECK(std::memcmp(bytes.data() + 8 + header_size, a.data(), 24) == 0);
  CHECK(written.checksum == checksum_file(path));

  const SafetensorsReader reader = SafetensorsReader::open(path);
  REQUIRE(reader.entries().size() == 5);
  CHECK(reader.entries()[0].name == "z.first");  // entries come in file order
  CHECK(reader.entries()[3].name == "ints");
  CHECK(reader.metadata().at("format") == "pt");
  CHECK(reader.entry("a.second").dtype == DType::BF16);
  CHECK(reader.entry("z.first").shape == std::vector<int64_t>{2, 3});
  CHECK(reader.entry("empty").bytes() == 0);
  std::vector<float> a_back(6);
  reader.read("z.first", a_back.data());
  CHECK(a_back == a);
  std::vector<int32_t> c_back(4);
  reader.read("ints", c_back.data());
  CHECK(c_back == c);
  uint16_t scalar_back = 0;
  reader.read("scalar", &scalar_back);
  CHECK(fp16_to_float(scalar_back) == 0.75f);
  std::vector<float> slice(2);
  reader.read_bytes("z.first", 3 * 4, 8, slice.data());  // second row, first two columns
  CHECK(slice == std::vector<float>{0.0f, 1e-3f});
  CHECK_THROWS_AS(reader.read_bytes("z.first", 20, 8, slice.data()), std::out_of_range);
  CHECK_THROWS_AS(reader.entry("missing"), UserError);
}

TEST_CASE("safetensors streamed tensors are written like in-memory ones") {
  ScratchDir dir;
  const std::vector<float> values = {1, 2, 3, 4};
  SafetensorsWriter direct, streamed;
  direct.add("w", DType::F32, {2, 2}, values.data());
  streamed.add_streamed("w", DType::F32, {2, 2}, [&](void* buffer) { std::memcpy(buffer, values.data(), 16); });
  direct.write(dir / "a.safetensors");
  streamed.write(dir / "b.safetensors");
  CHECK(read_bytes(dir / "a.safetensors") == read_bytes(dir / "b.safetensors"));
  CHECK_THROWS_AS(direct.add("w", DType::F32, {1}, values.data()), std::invalid_argument);
  CHECK_THROWS_AS(direct.add("__metadata__", DType::F32, {1}, values.data()), std::invalid_argument);
  CHECK_THROWS_AS(direct.add("neg", DType::F32, {-1}, values.data()), std::invalid_argument);
}

TEST_CASE("safetensors reader parses a hand-built file") {
  ScratchDir dir;
  // Unpadded header, keys out of data order, metadata last: all legal.
  const std::string header = R"({"b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                             R"("a":{"dtype":"F32","shape":[1,2],"data_offsets":[8,16]},"__metadata__":{"k":"v"}})";
  const int32_t ints[2] = {42, -1};
  const float floats[2] = {0.5f, -8.0f};
  std::string data(16, '\0');
  std::memcpy(data.data(), ints, 8);
  std::memcpy(data.data() + 8, floats, 8);
  const std::string path = dir / "hand.safetensors";
  write_bytes(path, le64_bytes(header.size()) + header + data);

  const SafetensorsReader reader = SafetensorsReader::open(path);
  REQUIRE(reader.entries().size() == 2);
  CHECK(reader.entries()[0].name == "b");
  CHECK(reader.data_start() == 8 + header.size());
  CHECK(reader.metadata().at("k") == "v");
  int32_t ints_back[2];
  float floats_back[2];
  reader.read("b", ints_back);
  reader.read("a", floats_back);
  CHECK(ints_back[0] == 42);
  CHECK(ints_back[1] == -1);
  CHECK(floats_back[1] == -8.0f);
}

TEST_CASE("safetensors reader names the file and the problem for each corruption") {
  ScratchDir dir;
  const std::string path = dir / "bad.safetensors";
  const std::string good_entry = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

  write_bytes(path, "abc");
  require_open_error(path, "truncated");

  write_bytes(path, le64_bytes(200) + "{}");
  require_open_error(path, "truncated");

  write_bytes(path, le64_bytes(uint64_t{1} << 40) + "{}");
  require_open_error(path, "not a safetensors file");

  write_bytes(path, make_file("{\"t\": [", 0));
  require_open_error(path, "not valid JSON");

  write_bytes(path, make_file("[1, 2]", 0));
  require_open_error(path, "not a JSON object");

  write_bytes(path, make_file(R"({"t":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8));
  require_open_error(path, "unknown dtype 'F64'");

  write_bytes(path, make_file("{" + good_entry + "}", 4));  // data cut short
  require_open_error(path, "run past the end");

  write_bytes(path, make_file(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 12));
  require_open_error(path, "needs 12");

  write_bytes(path, make_file("{" + good_entry + R"(,"u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12));
  require_open_error(path, "overlapping");

  write_bytes(path, make_file(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8));
  require_open_error(path, "negative");

  write_bytes(path, make_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8));
  require_open_error(path, "data_offsets");

  write_bytes(path, make_file(R"({"t":{"dtype":"F32","shape":[2]}})", 8));
  require_open_error(path, "data_offsets");

  write_bytes(path, make_file("{" + good_entry + R"(,"__metadata__":{"k":1}})", 8));
  require_open_error(path, "not a string");

  CHECK_THROWS_AS(SafetensorsReader::open(dir / "absent.safetensors"), UserError);
}

TEST_CASE("Checksum64 is chunking-independent and sees every single-byte change") {
  std::vector<unsigned char> data(203);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 37 + 11);
  Checksum64 whole;
  whole.update(data.data(), data.size());
  const uint64_t reference = whole.digest();
  for (size_t chunk : {1, 3, 7, 31, 32, 33, 64, 100}) {
    Checksum64 pieces;
    for (size_t at = 0; at < data.size(); at += chunk)
      pieces.update(data.data() + at, std::min(chunk, data.size() - at));
    CHECK(pieces.digest() == reference);
  }
  for (size_t i = 0; i < data.size(); ++i) {
    std::vector<unsigned char> changed = data;
    changed[i] ^= 0x10;
    Checksum64 sum;
    sum.update(changed.data(), changed.size());
    REQUIRE(sum.digest() != reference);
  }
  Checksum64 shorter, zeros_a, zeros_b;
  shorter.update(data.data(), data.size() - 1);
  CHECK(shorter.digest() != reference);
  const std::vector<unsigned char> zeros(65, 0);
  zeros_a.update(zeros.data(), 64);
  zeros_b.update(zeros.data(), 65);
  CHECK(zeros_a.digest() != zeros_b.digest());  // the length counts, not only the content
}
