// Box arithmetic for resharding: validation, decomposition into maximal runs of consecutive
// elements, and the merge of two run lists into copy instructions.
#include "checkpoint/box.h"

#include <algorithm>

namespace strata::ckpt {

bool checked_numel(const std::vector<int64_t>& shape, int64_t* numel) {
  constexpr int64_t kLimit = int64_t{1} << 62;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > kLimit / d) return false;
    n *= d;
  }
  *numel = n;
  return true;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string box_problem(const std::vector<int64_t>& view, const std::vector<int64_t>& offset,
                        const std::vector<int64_t>& shape) {
  if (offset.size() != view.size() || shape.size() != view.size()) {
    return "box offset " + shape_string(offset) + " / shape " + shape_string(shape) + " does not have the " +
           std::to_string(view.size()) + " dims of " + shape_string(view);
  }
  for (size_t d = 0; d < view.size(); ++d) {
    if (offset[d] < 0 || shape[d] < 0 || offset[d] > view[d] || shape[d] > view[d] - offset[d]) {
      return "box offset " + shape_string(offset) + " shape " + shape_string(shape) + " lies outside " +
             shape_string(view) + " in dim " + std::to_string(d);
    }
  }
  return "";
}

namespace {

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& view) {
  std::vector<int64_t> strides(view.size(), 1);
  for (size_t d = view.size(); d-- > 1;) strides[d - 1] = strides[d] * view[d];
  return strides;
}

}  // namespace

std::vector<ElementRun> box_runs(const std::vector<int64_t>& view, const std::vector<int64_t>& offset,
                                 const std::vector<int64_t>& shape) {
  std::vector<ElementRun> runs;
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (numel == 0) return runs;
  const size_t ndim = view.size();
  if (ndim == 0) return {{0, 1, 0}};
  // Dims after `split` are taken whole, so one run spans dim `split` and everything inside.
  size_t split = ndim - 1;
  while (split > 0 && shape[split] == view[split]) --split;
  const std::vector<int64_t> strides = row_major_strides(view);
  int64_t run_length = 1;
  for (size_t d = split; d < ndim; ++d) run_length *= shape[d];
  const int64_t run_count = numel / run_length;
  runs.reserve(static_cast<size_t>(run_count));
  std::vector<int64_t> outer(split, 0);  // odometer over the dims before `split`
  int64_t base = 0;
  for (size_t d = 0; d < ndim; ++d) base += offset[d] * strides[d];
  int64_t begin = base;
  for (int64_t r = 0; r < run_count; ++r) {
    runs.push_back({begin, run_length, r * run_length});
    for (size_t d = split; d-- > 0;) {
      if (++outer[d] < shape[d]) {
        begin += strides[d];
        break;
      }
      begin -= (shape[d] - 1) * strides[d];
      outer[d] = 0;
    }
  }
  return runs;
}

void box_extent(const std::vector<int64_t>& view, const std::vector<int64_t>& offset, const std::vector<int64_t>& shape,
                int64_t* first, int64_t* last) {
  const std::vector<int64_t> strides = row_major_strides(view);
  int64_t lo = 0, hi = 0;
  for (size_t d = 0; d < view.size(); ++d) {
    if (shape[d] == 0) {
      *first = *last = 0;
      return;
    }
    lo += offset[d] * strides[d];
    hi += (offset[d] + shape[d] - 1) * strides[d];
  }
  *first = lo;
  *last = hi + 1;
}

std::vector<ElementCopy> intersect_runs(const std::vector<ElementRun>& dst_runs,
                                        const std::vector<ElementRun>& src_runs) {
  std::vector<ElementCopy> copies;
  size_t i = 0, j = 0;
  while (i < dst_runs.size() && j < src_runs.size()) {
    const ElementRun& a = dst_runs[i];
    const ElementRun& b = src_runs[j];
    const int64_t lo = std::max(a.begin, b.begin);
    const int64_t hi = std::min(a.begin + a.length, b.begin + b.length);
    if (lo < hi) {
      const int64_t dst = a.local + (lo - a.begin);
      const int64_t src = b.local + (lo - b.begin);
      if (!copies.empty() && copies.back().dst + copies.back().count == dst &&
          copies.back().src + copies.back().count == src) {
        copies.back().count += hi - lo;
      } else {
        copies.push_back({dst, src, hi - lo});
      }
    }
    if (a.begin + a.length <= b.begin + b.length)
      ++i;
    else
      ++j;
  }
  return copies;
}

std::vector<int64_t> unravel(int64_t index, const std::vector<int64_t>& shape) {
  std::vector<int64_t> coords(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 0) continue;
    coords[d] = index % shape[d];
    index /= shape[d];
  }
  return coords;
}

}  // namespace strata::ckpt
