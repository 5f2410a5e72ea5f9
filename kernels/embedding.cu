// Embedding kernels. Forward: one block per token row, 16-byte packs when rows are aligned.
// Backward: dwpe by one thread per (t, c) summing the batch in order; dwte by sorting
// (id, position) pairs stably, then summing pieces of kEmbeddingPieceRows sorted positions in
// parallel and joining each long row's pieces in order. The table may be one rank's vocabulary
// slice (tensor parallelism): ids are offset by its first row.
#include <cub/device/device_radix_sort.cuh>

#include "device_helpers.cuh"
#include "embedding.cuh"

namespace strata::cuda {
namespace {

using detail::from_float;
using detail::Pack;
using detail::to_float;

constexpr int kRowThreads = 128;

// Row `row` holds wte[id − vocab_start] + wpe[t]. An id outside the vocabulary is reported
// through bad_id (null: the host checked the ids); one outside the table's rows, which another
// rank's slice holds, gives a zero row; wpe null adds no positions.
template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t seq,
                                         int64_t channels, int64_t table_rows, int64_t vocab_start,
                                         int64_t vocab_size, bool packed, BadIdFlag* bad_id) {
  const int64_t row = blockIdx.x;
  const int32_t id = tokens[row];
  if (bad_id && (id < 0 || id >= vocab_size)) {
    if (threadIdx.x == 0) detail::report_bad_id(bad_id, row, id);
    return;
  }
  const int64_t local = static_cast<int64_t>(id) - vocab_start;
  const bool inside = local >= 0 && local < table_rows;
  const int64_t t = row % seq;
  const T* e = inside ? wte + local * channels : nullptr;
  const T* p = wpe ? wpe + t * channels : nullptr;
  T* o = out + row * channels;
  if (packed) {
    using P = Pack<T>;
    for (int64_t k = threadIdx.x; k < channels / P::kSize; k += kRowThreads) {
      P a{}, b{}, y;
      if (e) a = reinterpret_cast<const P*>(e)[k];
      if (p) b = reinterpret_cast<const P*>(p)[k];
#pragma unroll
      for (int i = 0; i < P::kSize; ++i) {
        const float ea = e ? to_float(a.v[i]) : 0.0f, pb = p ? to_float(b.v[i]) : 0.0f;
        y.v[i] = from_float<T>(__fadd_rn(ea, pb));
      }
      reinterpret_cast<P*>(o)[k] = y;
    }
  } else {
    for (int64_t c = threadIdx.x; c < channels; c += kRowThreads) {
      o[c] = from_float<T>(__fadd_rn(e ? to_float(e[c]) : 0.0f, p ? to_float(p[c]) : 0.0f));
    }
  }
}

// keys = the id's row of the table, id − vocab_start (or vocab for an id outside it), values =
// position: the sort's input.
__global__ void sort_input_kernel(const int32_t* tokens, int64_t n, int64_t vocab, int64_t vocab_start,
                                  uint32_t* keys, int32_t* positions) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t local = static_cast<int64_t>(tokens[i]) - vocab_start;
  keys[i] = (local >= 0 && local < vocab) ? static_cast<uint32_t>(local) : static_cast<uint32_t>(vocab);
  positions[i] = static_cast<int32_t>(i);
}

// dwpe[t, c] += Σ_b dout[b, t, c], b in order (the CPU backend's order).
template <typename T>
__global__ void dwpe_kernel(void* dwpe, ElemType dwpe_type, const T* dout, int64_t batch, int64_t seq,
                            int64_t channels) {
  const int64_t n = seq * channels;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float acc = detail::load_any(dwpe, dwpe_type, i);
    for (int64_t b = 0; b < batch; ++b) acc = __fadd_rn(acc, to_float(dout[b * n + i]));
    detail::store_any(dwpe, dwpe_type, i, acc);
  }
}

// A thread holds kDwteColumns columns (kRowThreads apart, so a warp's loads stay contiguous) and
// walks its piece once per such group: each step of the walk issues that many independent loads.
constexpr int kDwteColumns = 8;

// Piece group `group` covers sorted indices [group · P, group · P + P) (P = kEmbeddingPieceRows).
// Its block walks them: each maximal run of one key inside the group is a piece, summed from zero
// in sorted order, kDwteColumns columns per thread at a time with kPieceLoads positions' loads in
// flight. A piece that is its row's whole run is added to dwte here (no other block touches that
// row); the others go to partials, slot 2·group for the piece continuing a run from the group
// before, 2·group + 1 for the piece starting a run that continues into the next group.
constexpr int kPieceLoads = 4;

template <typename T>
__global__ void dwte_pieces_kernel(void* dwte, ElemType dwte_type, float* partials, const T* dout,
                                   const uint32_t* keys, const int32_t* positions, int64_t n, int64_t channels,
                                   int64_t vocab) {
  const int64_t group = blockIdx.x, g0 = group * kEmbeddingPieceRows;
  const int64_t g1 = g0 + kEmbeddingPieceRows < n ? g0 + kEmbeddingPieceRows : n;
  constexpr int64_t kGroupWidth = int64_t{kRowThreads} * kDwteColumns;
  for (int64_t s = g0; s < g1;) {
    const uint32_t key = keys[s];
    int64_t e = s + 1;
    while (e < g1 && keys[e] == key) ++e;
    if (key < vocab) {
      const bool continues_before = s == g0 && s > 0 && keys[s - 1] == key;
      const bool continues_after = e == g1 && e < n && keys[e] == key;
      float* partial = continues_before ? partials + 2 * group * channels
                       : continues_after ? partials + (2 * group + 1) * channels
                                         : nullptr;
      const int64_t row = static_cast<int64_t>(key) * channels;
      for (int64_t first = threadIdx.x; first < channels; first += kGroupWidth) {
        float acc[kDwteColumns] = {};
        for (int64_t k = s; k < e; k += kPieceLoads) {
          float loaded[kPieceLoads][kDwteColumns];
#pragma unroll
          for (int u = 0; u < kPieceLoads; ++u) {
            const T* g = k + u < e ? dout + static_cast<int64_t>(positions[k + u]) * channels : nullptr;
#pragma unroll
            for (int i = 0; i < kDwteColumns; ++i) {
              const int64_t c = first + int64_t{i} * kRowThreads;
              loaded[u][i] = g && c < channels ? to_float(g[c]) : 0.0f;
            }
          }
#pragma unroll
          for (int u = 0; u < kPieceLoads; ++u) {
            if (k + u >= e) break;
#pragma unroll
            for (int i = 0; i < kDwteColumns; ++i) acc[i] = __fadd_rn(acc[i], loaded[u][i]);
          }
        }
#pragma unroll
        for (int i = 0; i < kDwteColumns; ++i) {
          const int64_t c = first + int64_t{i} * kRowThreads;
          if (c >= channels) continue;
          if (partial) partial[c] = acc[i];
          else detail::store_any(dwte, dwte_type, row + c, __fadd_rn(detail::load_any(dwte, dwte_type, row + c), acc[i]));
        }
      }
    }
    s = e;
  }
}

// The block of the group where a run starts that continues past the group's end adds that row's
// pieces to dwte in order: its own last piece, then the first piece of each later group the run
// reaches.
__global__ void dwte_join_kernel(void* dwte, ElemType dwte_type, const float* partials, const uint32_t* keys,
                                 int64_t n, int64_t channels, int64_t vocab) {
  const int64_t group = blockIdx.x, g0 = group * kEmbeddingPieceRows, g1 = g0 + kEmbeddingPieceRows;
  if (g1 >= n) return;
  const uint32_t key = keys[g1 - 1];
  if (key >= vocab || keys[g1] != key) return;              // the group's last run ends inside it
  if (keys[g0] == key && g0 > 0 && keys[g0 - 1] == key) return;  // it started in an earlier group
  const int64_t row = static_cast<int64_t>(key) * channels;
  for (int64_t c = threadIdx.x; c < channels; c += kRowThreads) {
    float acc = __fadd_rn(detail::load_any(dwte, dwte_type, row + c), partials[(2 * group + 1) * channels + c]);
    for (int64_t h = group + 1;; ++h) {
      acc = __fadd_rn(acc, partials[2 * h * channels + c]);
      const int64_t h1 = (h + 1) * kEmbeddingPieceRows;
      if (h1 >= n || keys[h1] != key) break;
    }
    detail::store_any(dwte, dwte_type, row + c, acc);
  }
}

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

struct SortLayout {
  size_t keys_in, keys_out, vals_in, vals_out, temp, temp_bytes, partials, total;
};

SortLayout sort_layout(int64_t n, int64_t vocab, int64_t channels) {
  SortLayout l{};
  const size_t words = align256(static_cast<size_t>(n) * 4);
  l.keys_in = 0;
  l.keys_out = words;
  l.vals_in = 2 * words;
  l.vals_out = 3 * words;
  l.temp = 4 * words;
  cub::DeviceRadixSort::SortPairs(nullptr, l.temp_bytes, static_cast<const uint32_t*>(nullptr),
                                  static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), static_cast<int>(n), 0,
                                  embedding_sort_bits(vocab));
  l.partials = l.temp + align256(l.temp_bytes);
  l.total = l.partials + align256(static_cast<size_t>(2 * ceil_div(n, kEmbeddingPieceRows) * channels) * 4);
  return l;
}

}  // namespace

cudaError_t embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe, ElemType type,
                              int64_t batch, int64_t seq, int64_t channels, int64_t table_rows, int64_t vocab_start,
                              int64_t vocab_size, BadIdFlag* bad_id, cudaStream_t stream) {
  const int64_t n = batch * seq;
  if (n <= 0 || channels <= 0) return cudaSuccess;
  const bool packed = aligned16(out) && aligned16(wte) && aligned16(wpe) &&
                      channels % pack_width(type) == 0;
  return detail::dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    embedding_forward_kernel<T><<<static_cast<unsigned>(n), kRowThreads, 0, stream>>>(
        static_cast<T*>(out), tokens, static_cast<const T*>(wte), static_cast<const T*>(wpe), seq, channels,
        table_rows, vocab_start, vocab_size, packed, bad_id);
    return cudaGetLastError();
  });
}

size_t embedding_backward_workspace_bytes(int64_t tokens, int64_t vocab, int64_t channels) {
  return sort_layout(tokens, vocab, channels).total;
}

cudaError_t embedding_backward(void* dwte, ElemType dwte_type, void* dwpe, ElemType dwpe_type, const void* dout,
                               ElemType dout_type, const int32_t* tokens, int64_t batch, int64_t seq,
                               int64_t channels, int64_t vocab, int64_t vocab_start, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream) {
  const int64_t n = batch * seq;
  if (n <= 0 || channels <= 0) return cudaSuccess;
  const SortLayout l = sort_layout(n, vocab, channels);
  if (workspace_bytes < l.total) return cudaErrorInvalidValue;
  char* base = static_cast<char*>(workspace);
  auto* keys_in = reinterpret_cast<uint32_t*>(base + l.keys_in);
  auto* keys_out = reinterpret_cast<uint32_t*>(base + l.keys_out);
  auto* vals_in = reinterpret_cast<int32_t*>(base + l.vals_in);
  auto* vals_out = reinterpret_cast<int32_t*>(base + l.vals_out);
  sort_input_kernel<<<static_cast<unsigned>(ceil_div(n, 256)), 256, 0, stream>>>(tokens, n, vocab, vocab_start,
                                                                                  keys_in, vals_in);
  cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) return rc;
  size_t temp_bytes = l.temp_bytes;
  rc = cub::DeviceRadixSort::SortPairs(base + l.temp, temp_bytes, keys_in, keys_out, vals_in, vals_out,
                                       static_cast<int>(n), 0, embedding_sort_bits(vocab), stream);
  if (rc != cudaSuccess) return rc;
  return detail::dispatch_float(dout_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = static_cast<const T*>(dout);
    if (dwpe) {
      dwpe_kernel<T><<<static_cast<unsigned>(elementwise_blocks(seq * channels)), kElementwiseThreads, 0, stream>>>(
          dwpe, dwpe_type, g, batch, seq, channels);
    }
    const auto groups = static_cast<unsigned>(ceil_div(n, kEmbeddingPieceRows));
    auto* partials = reinterpret_cast<float*>(base + l.partials);
    dwte_pieces_kernel<T><<<groups, kRowThreads, 0, stream>>>(dwte, dwte_type, partials, g, keys_out, vals_out, n,
                                                              channels, vocab);
    const cudaError_t launched = cudaGetLastError();
    if (launched != cudaSuccess) return launched;
    dwte_join_kernel<<<groups, kRowThreads, 0, stream>>>(dwte, dwte_type, partials, keys_out, n, channels, vocab);
    return cudaGetLastError();
  });
}

}  // namespace strata::cuda
