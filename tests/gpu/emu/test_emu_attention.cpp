// The tensor-core attention kernels on the CPU emulator against the CPU backend, with the GPU
// tests' metrics and bounds (out, lse, dq, dk, dv; bf16 and fp16; head dims 64 and 128), plus
// bit-repeatability across thread schedules, the launchers' refusals and planted bugs (a missing
// cp.async wait, a wrong lane mapping).
#include "catch_compat.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "emu_attention.h"
#include "tolerances.h"
#include "ulp_compare.h"

using namespace strata;

namespace {

using emu::AttentionShape;
using emu::HalfType;

constexpr size_t kGuardBytes = 256;
constexpr uint8_t kGuardByte = 0xAB;

// Host memory for one tensor, 256-byte aligned like a device allocation, between two guard
// zones that every kernel must leave alone.
class GuardedTensor {
 public:
  GuardedTensor(std::initializer_list<int64_t> dims, DType dtype)
      : tensor_(nullptr, dtype, dims, Device::CPU), storage_(tensor_.bytes() + 2 * kGuardBytes + 256, kGuardByte) {
    const uintptr_t raw = reinterpret_cast<uintptr_t>(storage_.data()) + kGuardBytes;
    offset_ = kGuardBytes + (256 - raw % 256) % 256;
    tensor_.data = storage_.data() + offset_;
  }
  const Tensor& tensor() const { return tensor_; }
  void* data() const { return tensor_.data; }
  float* f32() const { return tensor_.f32(); }

  void randomize(uint64_t seed, float scale) {
    Rng rng(seed, 7);
    std::vector<float> values(static_cast<size_t>(tensor_.numel()));
    for (float& v : values) v = rng.normal() * scale;
    convert_elements(values.data(), DType::F32, tensor_.data, tensor_.dtype, values.size());
  }
  // All bytes 0xFF: NaN in every float type, so an element a kernel forgot to write fails.
  void poison() { std::memset(tensor_.data, 0xFF, tensor_.bytes()); }
  std::vector<float> values() const {
    std::vector<float> out(static_cast<size_t>(tensor_.numel()));
    convert_elements(tensor_.data, tensor_.dtype, out.data(), DType::F32, out.size());
    return out;
  }
  std::vector<uint8_t> bytes() const {
    const uint8_t* p = static_cast<const uint8_t*>(tensor_.data);
    return std::vector<uint8_t>(p, p + tensor_.bytes());
  }
  bool guards_intact() const {
    const auto is_guard = [](uint8_t b) { return b == kGuardByte; };
    return std::all_of(storage_.begin(), storage_.begin() + static_cast<std::ptrdiff_t>(offset_), is_guard) &&
           std::all_of(storage_.begin() + static_cast<std::ptrdiff_t>(offset_ + tensor_.bytes()), storage_.end(),
                       is_guard);
  }

 private:
  Tensor tensor_;
  std::vector<uint8_t> storage_;
  size_t offset_ = 0;
};

DType dtype_of(HalfType type) { return type == HalfType::BF16 ? DType::BF16 : DType::F16; }

// The GPU tests' bounds for the tensor-core path, in ulps of the 16-bit type (tolerances.h).
double ulp_bound(HalfType type, emu::Bf16Operands operands = emu::Bf16Operands::Split) {
  if (type == HalfType::F16) return gpu_test::kAttentionF16Ulps;
  return operands == emu::Bf16Operands::Rounded ? gpu_test::kAttentionRoundedOperandsUlps : gpu_test::kAttentionBf16Ulps;
}

std::string describe(HalfType type, const AttentionShape& s) {
  return std::string(dtype_name(dtype_of(type))) + " B=" + std::to_string(s.batch) + " T=" + std::to_string(s.seq) +
         " NH=" + std::to_string(s.heads) + " hd=" + std::to_string(s.head_dim);
}

// The GPU tests' metric: max_i |actual − expected| / max(|expected|, mean |expected|), NaN
// counting as infinitely wrong. Judging small elements against the typical magnitude keeps
// cancellation near zero from reading as a large relative error.
double worst_relative_error(const std::vector<float>& actual, const std::vector<float>& expected) {
  double mean_abs = 0.0;
  for (float e : expected) mean_abs += std::abs(static_cast<double>(e));
  mean_abs /= static_cast<double>(expected.size());
  double worst = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::abs(static_cast<double>(actual[i]) - expected[i]) /
                       std::max(std::abs(static_cast<double>(expected[i])), mean_abs);
    if (!(err <= worst)) worst = std::isnan(err) ? INFINITY : err;
  }
  return worst;
}

void require_comparable(const std::vector<float>& actual, const std::vector<float>& expected) {
  REQUIRE(actual.size() == expected.size());
  REQUIRE(!expected.empty());
  REQUIRE(std::any_of(expected.begin(), expected.end(), [](float e) { return e != 0.0f; }));
}

// The fp32 log-sum-exp.
void check_close(const std::vector<float>& actual, const std::vector<float>& expected, double tol,
                 const std::string& what) {
  require_comparable(actual, expected);
  const double worst = worst_relative_error(actual, expected);
  INFO(what << ": worst relative error " << worst << " (tolerance " << tol << ")");
  CHECK(worst <= tol);
}

// A 16-bit output, in ulps of its type.
void check_ulps(const std::vector<float>& actual, const std::vector<float>& expected, HalfType type, double max_ulps,
                const std::string& what) {
  require_comparable(actual, expected);
  const test::UlpError e = test::worst_ulp_error(actual, expected, dtype_of(type));
  INFO(what << ": worst " << e.worst << " ulps at " << e.at << " (bound " << max_ulps << ")");
  CHECK(e.worst <= max_ulps);
}

// One third (q, k or v) of a (B, T, 3C) gradient, as a flat list.
std::vector<float> third_of(const std::vector<float>& dqkv, int part, int64_t rows, int64_t channels) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(rows * channels));
  for (int64_t row = 0; row < rows; ++row) {
    const auto begin = dqkv.begin() + static_cast<std::ptrdiff_t>(row * 3 * channels + part * channels);
    out.insert(out.end(), begin, begin + static_cast<std::ptrdiff_t>(channels));
  }
  return out;
}

// The inputs of one attention problem and the CPU backend's results for them.
struct Problem {
  HalfType type;
  AttentionShape shape;
  int64_t channels;
  GuardedTensor qkv, dout, out, lse, dqkv, delta;

  Problem(HalfType type_, const AttentionShape& s)
      : type(type_),
        shape(s),
        channels(s.heads * s.head_dim),
        qkv({s.batch, s.seq, 3 * channels}, dtype_of(type_)),
        dout({s.batch, s.seq, channels}, dtype_of(type_)),
        out({s.batch, s.seq, channels}, dtype_of(type_)),
        lse({s.batch, s.heads, s.seq}, DType::F32),
        dqkv({s.batch, s.seq, 3 * channels}, dtype_of(type_)),
        delta({s.batch, s.heads, s.seq}, DType::F32) {
    qkv.randomize(static_cast<uint64_t>(s.seq * 131 + s.head_dim + s.heads), 1.5f);
    dout.randomize(static_cast<uint64_t>(s.seq * 137 + s.head_dim + s.heads), 1.0f);
    const auto cpu = make_cpu_backend();
    const int heads = static_cast<int>(s.heads);
    cpu->attention_forward(out.tensor(), lse.tensor(), qkv.tensor(), heads);
    cpu->attention_backward(dqkv.tensor(), dout.tensor(), qkv.tensor(), out.tensor(), lse.tensor(), heads);
    // delta = rowsum(dout ∘ out) per (b, h, t) in double, as the CUDA launcher's row-dot kernel
    // computes it before the tensor-core backward (that kernel is not part of the emulation).
    const std::vector<float> dy = dout.values(), o = out.values();
    float* d = delta.f32();
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t t = 0; t < s.seq; ++t) {
          double dot = 0.0;
          for (int64_t e = 0; e < s.head_dim; ++e) {
            const size_t at = static_cast<size_t>((b * s.seq + t) * channels + h * s.head_dim + e);
            dot += static_cast<double>(dy[at]) * o[at];
          }
          d[(b * s.heads + h) * s.seq + t] = static_cast<float>(dot);
        }
  }
};

// The emulated kernels' results for a Problem.
struct Emulated {
  GuardedTensor out, lse, dqkv;
  explicit Emulated(const Problem& p)
      : out({p.shape.batch, p.shape.seq, p.channels}, dtype_of(p.type)),
        lse({p.shape.batch, p.shape.heads, p.shape.seq}, DType::F32),
        dqkv({p.shape.batch, p.shape.seq, 3 * p.channels}, dtype_of(p.type)) {
    out.poison();
    lse.poison();
    dqkv.poison();
  }
};

// Forward from qkv; backward from the CPU's out and lse (as the GPU tests do, so that the
// backward is judged alone).
void run_emulated(const Problem& p, Emulated& e, emu::Bf16Operands operands = emu::Bf16Operands::Split) {
  REQUIRE(emu::attention_forward(e.out.data(), e.lse.f32(), p.qkv.data(), p.type, p.shape, operands) == 0);
  REQUIRE(emu::attention_backward(e.dqkv.data(), p.dout.data(), p.qkv.data(), p.lse.f32(), p.delta.f32(), p.type,
                                  p.shape, operands) == 0);
  CHECK(e.out.guards_intact());
  CHECK(e.lse.guards_intact());
  CHECK(e.dqkv.guards_intact());
}

void check_against_cpu(const Problem& p, emu::Bf16Operands operands = emu::Bf16Operands::Split) {
  const std::string what = describe(p.type, p.shape);
  const double max_ulps = ulp_bound(p.type, operands);
  Emulated e(p);
  run_emulated(p, e, operands);
  check_ulps(e.out.values(), p.out.values(), p.type, max_ulps, "out " + what);
  check_close(e.lse.values(), p.lse.values(), 1e-5, "lse " + what);

  const int64_t rows = p.shape.batch * p.shape.seq;
  const std::vector<float> got = e.dqkv.values(), expected = p.dqkv.values();
  const auto check_third = [&](int part, const std::string& name) {
    check_ulps(third_of(got, part, rows, p.channels), third_of(expected, part, rows, p.channels), p.type, max_ulps,
               name + " " + what);
  };
  check_third(2, "dv");
  if (p.shape.seq > 1) {
    check_third(0, "dq");
    check_third(1, "dk");
    return;
  }
  // T = 1: one key per query, so dq and dk are zero and both sides hold only rounding noise;
  // it must stay far below the size of dv.
  double mean_dv = 0.0, largest = 0.0;
  for (float v : third_of(expected, 2, rows, p.channels)) mean_dv += std::abs(static_cast<double>(v));
  mean_dv /= static_cast<double>(rows * p.channels);
  for (int part = 0; part < 2; ++part)
    for (float v : third_of(got, part, rows, p.channels))
      largest = std::isnan(v) ? INFINITY : std::max(largest, std::abs(static_cast<double>(v)));
  INFO("dq, dk at T = 1 " << what << ": largest " << largest << ", mean |dv| " << mean_dv);
  CHECK(largest <= 1e-3 * mean_dv);
}

// T on and off the 64-row tile grid, in two batch·heads shapes.
void check_sequence_lengths(HalfType type, int64_t head_dim) {
  for (int64_t seq : {1, 17, 64, 100, 129}) {
    const bool short_rows = seq == 64 || seq == 129;  // (1, 2) there, (2, 3) elsewhere
    const AttentionShape shape{short_rows ? 1 : 2, seq, short_rows ? 2 : 3, head_dim};
    check_against_cpu(Problem(type, shape));
  }
}

}  // namespace

TEST_CASE("bf16 tensor-core attention at head dim 64 matches the CPU backend") {
  check_sequence_lengths(HalfType::BF16, 64);
}

TEST_CASE("bf16 tensor-core attention at head dim 128 matches the CPU backend") {
  check_sequence_lengths(HalfType::BF16, 128);
}

TEST_CASE("fp16 tensor-core attention at head dim 64 matches the CPU backend") {
  check_sequence_lengths(HalfType::F16, 64);
}

TEST_CASE("fp16 tensor-core attention at head dim 128 matches the CPU backend") {
  check_sequence_lengths(HalfType::F16, 128);
}

TEST_CASE("bf16 tensor-core attention with operands rounded once stays within its ulp bound and differs from the split") {
  for (const AttentionShape& shape : {AttentionShape{1, 17, 2, 64}, AttentionShape{1, 129, 2, 64},
                                      AttentionShape{1, 17, 1, 128}, AttentionShape{1, 129, 1, 128}}) {
    const Problem p(HalfType::BF16, shape);
    check_against_cpu(p, emu::Bf16Operands::Rounded);
    // Really another kernel: its products see other operands than the split's.
    Emulated split(p), rounded(p);
    run_emulated(p, split);
    run_emulated(p, rounded, emu::Bf16Operands::Rounded);
    CHECK(split.out.bytes() != rounded.out.bytes());
    CHECK(split.dqkv.bytes() != rounded.dqkv.bytes());
  }
}

TEST_CASE("tensor-core attention over many batch entries and heads with T a tile multiple plus one") {
  check_against_cpu(Problem(HalfType::BF16, AttentionShape{3, 65, 4, 64}));
  check_against_cpu(Problem(HalfType::F16, AttentionShape{2, 65, 5, 128}));
}

TEST_CASE("tensor-core attention repeats bit for bit under different thread schedules") {
  for (HalfType type : {HalfType::BF16, HalfType::F16}) {
    for (int64_t head_dim : {64, 128}) {
      const Problem p(type, AttentionShape{2, 100, 1, head_dim});
      INFO(describe(type, p.shape));
      Emulated first(p), second(p);
      emu::set_schedule_seed(1);
      emu::reset_emulator_stats();
      run_emulated(p, first);
      const emu::EmulatorStats first_stats = emu::emulator_stats();
      emu::set_schedule_seed(2);
      emu::reset_emulator_stats();
      run_emulated(p, second);
      const emu::EmulatorStats second_stats = emu::emulator_stats();
      // The two runs really were scheduled differently, with copies landing both early and late.
      CHECK(first_stats.schedule_hash != second_stats.schedule_hash);
      CHECK(first_stats.copies_landed_at_issue > 0);
      CHECK(first_stats.copies_landed_at_wait > 0);
      CHECK(first_stats.block_barriers == second_stats.block_barriers);
      CHECK(first.out.bytes() == second.out.bytes());
      CHECK(first.lse.bytes() == second.lse.bytes());
      CHECK(first.dqkv.bytes() == second.dqkv.bytes());
    }
  }
}

TEST_CASE("forward kernels missing a cp.async wait or with a wrong lane mapping are caught") {
  const std::pair<emu::Mutant, const char*> mutants[] = {
      {emu::Mutant::MmaMissingCpAsyncWait, "mma.sync without the cp.async wait before it reads a key tile"},
      {emu::Mutant::MmaWrongLaneMapping, "mma.sync with V's ldmatrix.trans lanes in K's mapping"}};
  for (const auto& [mutant, name] : mutants) {
    for (HalfType type : {HalfType::BF16, HalfType::F16}) {
      const Problem p(type, AttentionShape{1, 129, 2, 64});
      const std::string what = std::string(name) + ", " + describe(type, p.shape);
      Emulated intact(p), broken(p);
      REQUIRE(emu::attention_forward(intact.out.data(), intact.lse.f32(), p.qkv.data(), type, p.shape) == 0);
      CHECK(test::worst_ulp_error(intact.out.values(), p.out.values(), dtype_of(type)).worst <= ulp_bound(type));

      std::string emulator_report;
      double worst_ulps = 0.0, worst_lse = 0.0;
      int rc = 0;
      try {
        rc = emu::mutant_attention_forward(mutant, broken.out.data(), broken.lse.f32(), p.qkv.data(), type, p.shape);
        worst_ulps = test::worst_ulp_error(broken.out.values(), p.out.values(), dtype_of(type)).worst;
        worst_lse = worst_relative_error(broken.lse.values(), p.lse.values());
      } catch (const emu::EmulationError& e) {
        emulator_report = e.what();
      }
      REQUIRE(rc == 0);
      INFO(what << ": mutant's worst out " << worst_ulps << " ulps, lse " << worst_lse << " relative, emulator report '"
                << emulator_report << "'");
      CHECK((!emulator_report.empty() || !(worst_ulps <= ulp_bound(type)) || !(worst_lse <= 1e-5)));
    }
  }
}

TEST_CASE("the emulated launchers refuse head dims other than 64 and 128 and misaligned tensors") {
  const Problem p(HalfType::BF16, AttentionShape{1, 17, 2, 64});
  Emulated e(p);
  AttentionShape wrong_dim = p.shape;
  wrong_dim.head_dim = 32;  // same buffers, read as 4 heads of 32
  wrong_dim.heads = 4;
  CHECK(emu::attention_forward(e.out.data(), e.lse.f32(), p.qkv.data(), p.type, wrong_dim) != 0);
  void* shifted = static_cast<char*>(e.out.data()) + 2;  // one bf16 element in
  CHECK(emu::attention_forward(shifted, e.lse.f32(), p.qkv.data(), p.type, p.shape) != 0);
  CHECK(emu::attention_backward(e.dqkv.data(), p.dout.data(), p.qkv.data(), p.lse.f32(), p.delta.f32(), p.type,
                                wrong_dim) != 0);
  // Refusals write nothing: the outputs still hold their poison.
  const std::vector<float> out = e.out.values();
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return std::isnan(v); }));
}
