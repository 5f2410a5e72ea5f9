// Part of src/model's public header (model.h): the ParamStore through which the model reaches
// its parameters and gradients layer group by layer group, and the flat store (one buffer each).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/param_specs.h"

namespace strata {

enum class Pass { Forward, Backward };

// Where parameters and gradients live. The model brackets every use of a group with
// acquire/release, so an implementation may keep only a shard and fetch groups on demand.
// Views returned for a group are laid out like the flat buffer's range of that group:
// parameter `spec` starts at element (spec.offset − group.begin) of the returned view.
// Parameters are the working copy in param_dtype() (F32, or BF16/F16 under mixed precision);
// gradients are always fp32, so micro-batches accumulate without low-precision rounding.
// Forward acquires groups in the order 0, 1, …, L + 1 (holding 0 until the logits are done);
// backward in the order 0, L + 1, L, …, 1 (holding 0 until the embedding gradient is done).
class ParamStore {
 public:
  virtual ~ParamStore() = default;
  virtual DType param_dtype() const { return DType::F32; }
  virtual void* acquire_params(int group, Pass pass) = 0;
  virtual void release_params(int group, Pass pass) = 0;
  // Where backward accumulates the group's gradient (+=); release_grads says that the
  // gradient of the current backward for that group is complete.
  virtual float* acquire_grads(int group) = 0;
  virtual void release_grads(int group) = 0;
};

// The default store: every parameter in one flat buffer of `param_dtype`, every gradient in
// one flat fp32 buffer. `capacity` (≥ numel) lets a caller pad the buffers, e.g. to a
// multiple of the data-parallel size; the padding stays zero.
class FlatParamStore final : public ParamStore {
 public:
  FlatParamStore(Backend& backend, const std::vector<ParamSpec>& specs, int64_t capacity = 0,
                 DType param_dtype = DType::F32);
  DType param_dtype() const override { return param_dtype_; }
  void* acquire_params(int group, Pass) override {
    return static_cast<char*>(params_.data()) + groups_.at(static_cast<size_t>(group)).begin * dtype_size(param_dtype_);
  }
  void release_params(int, Pass) override {}
  float* acquire_grads(int group) override { return grads_base() + groups_.at(static_cast<size_t>(group)).begin; }
  void release_grads(int) override {}

  int64_t numel() const { return numel_; }
  int64_t capacity() const { return capacity_; }
  Tensor params() const { return params_.view(0, param_dtype_, {numel_}); }  // numel elements
  Tensor grads() const { return grads_.view(0, DType::F32, {numel_}); }
  Tensor padded_params() const { return params_.view(0, param_dtype_, {capacity_}); }
  Tensor padded_grads() const { return grads_.view(0, DType::F32, {capacity_}); }

 private:
  float* grads_base() const { return static_cast<float*>(grads_.data()); }
  std::vector<LayerGroup> groups_;
  int64_t numel_ = 0, capacity_ = 0;
  DType param_dtype_ = DType::F32;
  Buffer params_, grads_;
};

}  // namespace strata
