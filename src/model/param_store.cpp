// Layer groups, the default flat parameter store, and GPT-2 initial values computed for any
// slice of any parameter (so sharded layouts initialise exactly what a single rank would).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "model/model.h"

namespace strata {
namespace {

// Runs fn(begin, end) over disjoint chunks of [0, n) on all cores. Only for work whose result
// does not depend on the split (each element a pure function of its index).
template <typename Fn>
void parallel_chunks(int64_t n, Fn fn) {
  const int64_t min_chunk = 1 << 16;
  const int64_t threads = std::max<int64_t>(
      1, std::min<int64_t>(std::thread::hardware_concurrency(), n / min_chunk));
  if (threads == 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> workers;
  const int64_t chunk = (n + threads - 1) / threads;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    workers.emplace_back(fn, begin, std::min(n, begin + chunk));
  }
  for (std::thread& w : workers) w.join();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<LayerGroup> gpt_layer_groups(const std::vector<ParamSpec>& specs, int group_count) {
  std::vector<LayerGroup> groups;
  int64_t end = 0;  // of the layout so far: where an empty group sits
  for (const ParamSpec& spec : specs) {
    const size_t g = static_cast<size_t>(param_group(spec));
    if (g + 1 == groups.size() && groups.back().end == spec.offset && groups.back().numel() > 0) {
      groups.back().end += spec.numel;
    } else if (g >= groups.size() && spec.offset == end) {
      while (groups.size() < g) groups.push_back({end, end});  // groups this layout does not hold
      groups.push_back({spec.offset, spec.offset + spec.numel});
    } else {
      throw std::logic_error("gpt_layer_groups: parameter " + spec.name + " breaks the group order");
    }
    end = spec.offset + spec.numel;
  }
  while (static_cast<int>(groups.size()) < group_count) groups.push_back({end, end});
  return groups;
}

void gpt_init_values(const GptDims& dims, const ParamSpec& spec, uint64_t seed, int64_t begin, int64_t count,
                     float* out) {
  if (begin < 0 || count < 0 || begin + count > spec.numel) {
    throw std::out_of_range("gpt_init_values: slice outside " + spec.name);
  }
  const bool is_ln_weight =
      ends_with(spec.name, "ln_1.weight") || ends_with(spec.name, "ln_2.weight") || spec.name == "ln_f.weight";
  if (is_ln_weight) {
    std::fill(out, out + count, 1.0f);
    return;
  }
  std::fill(out, out + count, 0.0f);
  if (!spec.weight_decay) return;  // every 2-D weight is drawn; biases stay 0
  const float std_base = 0.02f;
  const float std_proj = static_cast<float>(0.02 / std::sqrt(2.0 * dims.n_layer));
  const float std = ends_with(spec.name, "c_proj.weight") ? std_proj : std_base;
  // Padding rows of wte never see a token; they start (and, without gradient, stay) at 0.
  int64_t drawn = 1;
  for (int64_t d : spec.global_shape) drawn *= d;
  if (spec.name == "wte.weight") drawn = int64_t{dims.vocab_size} * dims.d_model;
  const uint64_t stream = rng_stream_id(spec.name.c_str());
  // Element g of the global tensor is draw g of the parameter's stream, whichever rank holds it.
  const TpPlacement place = tp_placement(spec);
  parallel_chunks(count, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) {
      const int64_t global = place.global_index(begin + i);
      if (global < drawn) out[i] = rng_normal(seed, stream, static_cast<uint64_t>(global)) * std;
    }
  });
}

FlatParamStore::FlatParamStore(Backend& backend, const std::vector<ParamSpec>& specs, int64_t capacity,
                               DType param_dtype)
    : groups_(gpt_layer_groups(specs)), numel_(specs.back().offset + specs.back().numel), param_dtype_(param_dtype) {
  capacity_ = std::max(capacity, numel_);
  params_ = backend.allocate(static_cast<size_t>(capacity_) * dtype_size(param_dtype));
  grads_ = backend.allocate(static_cast<size_t>(capacity_) * sizeof(float));
}

}  // namespace strata
