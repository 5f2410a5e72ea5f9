// Helpers shared by the config tests: load a config from text and capture the reported
// problems, so each test can assert on the exact messages.
#pragma once
#include "catch_compat.h"

#include <string>
#include <vector>

#include "config/config.h"
#include "core/error.h"

namespace strata_test {

// A small valid model and batch; tests append or override what they exercise.
inline const char* kTinyConfig = R"(
train_micro_batch_size_per_gpu: 4
model:
  n_layer: 2
  n_head: 2
  d_model: 64
  vocab_size: 256
  seq_len: 32
)";

// data.train as one glob reads back as this one source of weight 1.
inline std::vector<strata::DataSource> one_source(const std::string& glob) { return {{glob, 1}}; }

inline strata::Config load(const std::string& text, const std::vector<std::string>& overrides = {},
                           int world_size = 1) {
  return strata::load_config_text(text, overrides, world_size, "test.yaml");
}

// The problems loading `text` reports; empty when it loads.
inline std::vector<std::string> problems(const std::string& text, const std::vector<std::string>& overrides = {},
                                         int world_size = 1) {
  try {
    load(text, overrides, world_size);
  } catch (const strata::UserErrors& e) {
    return e.errors();
  }
  return {};
}

inline std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// True when some problem starts with `prefix` (a "key.path: message" head).
inline bool has_problem(const std::vector<std::string>& list, const std::string& prefix) {
  for (const auto& p : list) {
    if (p.compare(0, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

}  // namespace strata_test
