// Stand-in for CUB's DeviceRadixSort in the emulated build: SortPairs with CUB's two-call
// protocol (a null temp_storage asks for its size), a stable sort on key bits [begin_bit,
// end_bit) run on the CPU, with every range checked to lie in emulated device memory.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>

#include "../../cuda_runtime.h"

namespace strata::emu::cuda_api::cub {

struct DeviceRadixSort {
  // Keys and values in and out, plus what a radix sort with ping-pong buffers would need.
  template <typename KeyT, typename ValueT>
  static size_t temp_bytes_for(int64_t items) {
    return static_cast<size_t>(std::max<int64_t>(items, 1)) * (sizeof(KeyT) + sizeof(ValueT)) + 1024;
  }

  template <typename KeyT, typename ValueT, typename NumItemsT>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const KeyT* d_keys_in,
                               KeyT* d_keys_out, const ValueT* d_values_in, ValueT* d_values_out, NumItemsT num_items,
                               int begin_bit = 0, int end_bit = static_cast<int>(sizeof(KeyT) * 8),
                               cudaStream_t stream = nullptr) {
    static_assert(std::is_unsigned<KeyT>::value, "the emulated radix sort takes unsigned keys");
    const int64_t n = static_cast<int64_t>(num_items);
    const size_t needed = temp_bytes_for<KeyT, ValueT>(n);
    if (!d_temp_storage) {
      temp_storage_bytes = needed;
      return cudaSuccess;
    }
    check_stream(stream, "cub::DeviceRadixSort::SortPairs");
    if (n < 0 || temp_storage_bytes < needed || begin_bit < 0 || begin_bit >= end_bit ||
        end_bit > static_cast<int>(sizeof(KeyT) * 8))
      return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    const auto items = static_cast<size_t>(n);
    if (!in_device_memory(d_temp_storage, temp_storage_bytes) || !in_device_memory(d_keys_in, items * sizeof(KeyT)) ||
        !in_device_memory(d_keys_out, items * sizeof(KeyT)) ||
        !in_device_memory(d_values_in, items * sizeof(ValueT)) ||
        !in_device_memory(d_values_out, items * sizeof(ValueT)))
      throw EmulationError("cub::DeviceRadixSort::SortPairs: a buffer is not inside device memory");
    const int width = end_bit - begin_bit;
    const KeyT mask = width >= static_cast<int>(sizeof(KeyT) * 8) ? static_cast<KeyT>(~KeyT{0})
                                                                   : static_cast<KeyT>((KeyT{1} << width) - 1);
    auto bits_of = [&](KeyT key) { return static_cast<KeyT>((key >> begin_bit) & mask); };
    std::vector<size_t> order(items);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t x, size_t y) { return bits_of(d_keys_in[x]) < bits_of(d_keys_in[y]); });
    std::vector<KeyT> keys(items);
    std::vector<ValueT> values(items);
    for (size_t i = 0; i < items; ++i) {
      keys[i] = d_keys_in[order[i]];
      values[i] = d_values_in[order[i]];
    }
    // The temporary storage is scratch to CUB: its contents are not kept.
    std::memset(d_temp_storage, 0xFF, needed);
    std::copy(keys.begin(), keys.end(), d_keys_out);
    std::copy(values.begin(), values.end(), d_values_out);
    return cudaSuccess;
  }
};

}  // namespace strata::emu::cuda_api::cub
