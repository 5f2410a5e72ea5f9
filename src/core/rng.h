// Counter-based random numbers: every value is a pure function of (seed, stream, index),
// so a parameter element gets the same initial value whatever rank or layout holds it,
// and a generator's whole state is three integers that checkpoints save and restore.
#pragma once
#include <cstdint>

namespace strata {

struct RngState {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t counter = 0;
};

// Stateless draws.
uint64_t rng_bits(uint64_t seed, uint64_t stream, uint64_t index);
float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);  // [0, 1)
float rng_normal(uint64_t seed, uint64_t stream, uint64_t index);   // N(0, 1)
uint64_t rng_stream_id(const char* name);                            // stable hash of a name

class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0) : state_{seed, stream, 0} {}
  uint64_t next_u64() { return rng_bits(state_.seed, state_.stream, state_.counter++); }
  float uniform() { return rng_uniform(state_.seed, state_.stream, state_.counter++); }
  float normal() { return rng_normal(state_.seed, state_.stream, state_.counter++); }
  uint64_t below(uint64_t n);  // uniform integer in [0, n), unbiased
  const RngState& state() const { return state_; }
  void restore(const RngState& state) { state_ = state; }

 private:
  RngState state_;
};

}  // namespace strata
