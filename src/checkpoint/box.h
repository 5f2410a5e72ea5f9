// Internal to src/checkpoint: boxes of row-major tensors as sorted runs of consecutive
// elements. Two boxes expressed in different views of the same tensor (e.g. a 2-D TP slice
// and a 1-D ZeRO range) meet in linear element space, so resharding is a merge of run lists.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::ckpt {

// Element count of a shape; false on a negative dim or when it would pass 2^62.
bool checked_numel(const std::vector<int64_t>& shape, int64_t* numel);
std::string shape_string(const std::vector<int64_t>& shape);  // "[2, 3]"

// Why (offset, shape) is not a box of `view`, or "" when it is.
std::string box_problem(const std::vector<int64_t>& view, const std::vector<int64_t>& offset,
                        const std::vector<int64_t>& shape);

// `length` consecutive elements starting at linear index `begin` of the whole tensor, which
// sit at element `local` of the box's packed buffer.
struct ElementRun {
  int64_t begin;
  int64_t length;
  int64_t local;
};
// The runs of a valid box, in increasing `begin` (and `local`) order, each as long as possible.
std::vector<ElementRun> box_runs(const std::vector<int64_t>& view, const std::vector<int64_t>& offset,
                                 const std::vector<int64_t>& shape);
// Linear range [first, last) the box spans; first == last for an empty box.
void box_extent(const std::vector<int64_t>& view, const std::vector<int64_t>& offset, const std::vector<int64_t>& shape,
                int64_t* first, int64_t* last);

// `count` elements copied from element `src` of one box's buffer to element `dst` of another's.
struct ElementCopy {
  int64_t dst;
  int64_t src;
  int64_t count;
};
// Where the two run lists overlap, as copies from the `src` box into the `dst` box; adjacent
// copies that are contiguous on both sides are merged.
std::vector<ElementCopy> intersect_runs(const std::vector<ElementRun>& dst_runs,
                                        const std::vector<ElementRun>& src_runs);

// Row-major coordinates of linear `index` inside `shape`.
std::vector<int64_t> unravel(int64_t index, const std::vector<int64_t>& shape);

}  // namespace strata::ckpt
