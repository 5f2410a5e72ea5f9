// The guarded CPU backend: the CPU backend's arithmetic on memory that stays PROT_NONE except
// while one of the backend's own ops runs. Code outside the backend that reads or writes its
// buffers faults at once, as it would (less politely) with GPU memory, and ops refuse tensors
// not labelled Device::Simulated, as the CUDA backend refuses host tensors.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace strata {
namespace {

// Every live guarded allocation, so that an op can open all of them and close them after.
struct GuardRegistry {
  std::mutex mutex;
  std::map<void*, size_t> regions;  // base → mapped bytes (whole pages)
  int open_depth = 0;               // nested ops (the linear-layer conveniences call matmul)
  size_t allocated = 0, peak = 0;
};

GuardRegistry& registry() {
  static GuardRegistry* r = new GuardRegistry();  // never destroyed: buffers may outlive statics
  return *r;
}

void set_protection(void* base, size_t bytes, int prot) {
  if (mprotect(base, bytes, prot) != 0) {
    throw std::runtime_error(std::string("guarded backend: mprotect failed: ") + std::strerror(errno));
  }
}

// Caller holds the registry's mutex.
void protect_all(GuardRegistry& r, int prot) {
  for (const auto& [base, bytes] : r.regions) set_protection(base, bytes, prot);
}

// Opens every guarded buffer for the lifetime of one op.
class OpScope {
 public:
  OpScope() {
    GuardRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.open_depth++ == 0) protect_all(r, PROT_READ | PROT_WRITE);
  }
  ~OpScope() {
    GuardRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (--r.open_depth == 0) protect_all(r, PROT_NONE);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;
};

size_t page_rounded(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes == 0 ? page : (bytes + page - 1) / page * page);
}

void release_guarded(void* p) {
  GuardRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.regions.find(p);
  if (it == r.regions.end()) return;
  munmap(p, it->second);
  r.allocated -= it->second;
  r.regions.erase(it);
}

// The CPU backend's view of a tensor this backend owns. Anything not labelled Simulated is a
// labelling bug in the caller (host memory, or device memory mistaken for host memory).
Tensor own(const Tensor& t, const char* op) {
  if (!t.defined()) return t;
  require(t.device == Device::Simulated, op,
          std::string("a tensor labelled '") + device_name(t.device) + "' reached the (simulated) device backend");
  Tensor inner = t;
  inner.device = Device::CPU;
  return inner;
}

// For arguments that may be host or device memory (copy ends, token and target ids).
Tensor any(const Tensor& t) {
  Tensor inner = t;
  if (inner.device == Device::Simulated) inner.device = Device::CPU;
  return inner;
}

class GuardedBackend final : public Backend {
 public:
  GuardedBackend() : cpu_(make_cpu_backend()) {}
  Device device() const override { return Device::Simulated; }
  std::string name() const override { return "cpu (guarded: a simulated device)"; }
  MemoryStats memory_stats() const override {
    GuardRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    MemoryStats stats;
    stats.allocated_bytes = r.allocated;
    stats.peak_allocated_bytes = r.peak;
    return stats;
  }
  double peak_flops() const override { return 0.0; }
  // Lands the copy_async copies, as a device's stream would have by now.
  void synchronize() override {
    const OpScope open;
    for (const LateCopy& c : late_copies_) std::memcpy(c.dst, c.bytes.data(), c.bytes.size());
    late_copies_.clear();
  }
  void* cuda_stream() const override { return nullptr; }
  void reset_peak_memory() override {
    GuardRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.peak = r.allocated;
  }

  Buffer allocate(size_t bytes) override {
    const size_t mapped = page_rounded(bytes);
    // Anonymous mappings start zeroed, as Backend::allocate promises.
    void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    GuardRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.regions.emplace(p, mapped);
    r.allocated += mapped;
    if (r.allocated > r.peak) r.peak = r.allocated;
    if (r.open_depth == 0) set_protection(p, mapped, PROT_NONE);
    return Buffer(p, bytes, Device::Simulated, &release_guarded);
  }
  void copy(Tensor src, Tensor dst) override {
    const OpScope open;
    cpu_->copy(any(src), any(dst));
  }
  Buffer allocate_host(size_t bytes) override { return cpu_->allocate_host(bytes); }
  // src is read now (ops are in order) but dst is written only by synchronize(): a caller that
  // reads the host side before waiting, as it must not on a device, reads stale values.
  void copy_async(Tensor src, Tensor dst) override {
    const OpScope open;
    require(src.dtype == dst.dtype && src.numel() == dst.numel(), "copy_async",
            src.shape_string() + " vs " + dst.shape_string());
    const auto* from = static_cast<const unsigned char*>(src.data);
    late_copies_.push_back({dst.data, std::vector<unsigned char>(from, from + src.bytes())});
  }
  void cast(Tensor src, Tensor dst) override {
    const OpScope open;
    cpu_->cast(own(src, "cast"), own(dst, "cast"));
  }
  void zero(Tensor t) override {
    const OpScope open;
    cpu_->zero(own(t, "zero"));
  }
  void fill(Tensor t, float value) override {
    const OpScope open;
    cpu_->fill(own(t, "fill"), value);
  }
  void scale(Tensor t, float factor) override {
    const OpScope open;
    cpu_->scale(own(t, "scale"), factor);
  }
  double sum_squares(Tensor t) override {
    const OpScope open;
    return cpu_->sum_squares(own(t, "sum_squares"));
  }
  void matmul(Tensor out, Tensor a, Tensor b, Tensor bias, bool trans_a, bool trans_b, bool accumulate) override {
    const char* op = "matmul";
    const OpScope open;
    cpu_->matmul(own(out, op), own(a, op), own(b, op), own(bias, op), trans_a, trans_b, accumulate);
  }
  void bias_backward(Tensor dbias, Tensor dout) override {
    const OpScope open;
    cpu_->bias_backward(own(dbias, "bias_backward"), own(dout, "bias_backward"));
  }
  void add_bias(Tensor out, Tensor bias) override {
    const OpScope open;
    cpu_->add_bias(own(out, "add_bias"), own(bias, "add_bias"));
  }
  void add(Tensor out, Tensor a, Tensor b) override {
    const OpScope open;
    cpu_->add(own(out, "add"), own(a, "add"), own(b, "add"));
  }
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias) override {
    const char* op = "layernorm_forward";
    const OpScope open;
    cpu_->layernorm_forward(own(out, op), own(mean, op), own(rstd, op), own(inp, op), own(weight, op), own(bias, op));
  }
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                          Tensor mean, Tensor rstd) override {
    const char* op = "layernorm_backward";
    const OpScope open;
    cpu_->layernorm_backward(own(dinp, op), own(dweight, op), own(dbias, op), own(dout, op), own(inp, op),
                             own(weight, op), own(mean, op), own(rstd, op));
  }
  void gelu_forward(Tensor out, Tensor inp) override {
    const OpScope open;
    cpu_->gelu_forward(own(out, "gelu_forward"), own(inp, "gelu_forward"));
  }
  void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) override {
    const char* op = "gelu_backward";
    const OpScope open;
    cpu_->gelu_backward(own(dinp, op), own(dout, op), own(inp, op));
  }
  void attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_head) override {
    const char* op = "attention_forward";
    const OpScope open;
    cpu_->attention_forward(own(out, op), own(lse, op), own(qkv, op), n_head);
  }
  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_head) override {
    const char* op = "attention_backward";
    const OpScope open;
    cpu_->attention_backward(own(dqkv, op), own(dout, op), own(qkv, op), own(out, op), own(lse, op), n_head);
  }
  void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int64_t vocab_start,
                         int vocab_size) override {
    const char* op = "embedding_forward";
    const OpScope open;
    cpu_->embedding_forward(own(out, op), any(tokens), own(wte, op), own(wpe, op), vocab_start, vocab_size);
  }
  void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int64_t vocab_start,
                          int vocab_size) override {
    const char* op = "embedding_backward";
    const OpScope open;
    cpu_->embedding_backward(own(dwte, op), own(dwpe, op), own(dout, op), any(tokens), vocab_start, vocab_size);
  }
  void softmax_cross_entropy(Tensor logits, Tensor losses, Tensor targets, int vocab_size, bool write_dlogits,
                             float dloss) override {
    const char* op = "softmax_cross_entropy";
    const OpScope open;
    cpu_->softmax_cross_entropy(own(logits, op), own(losses, op), any(targets), vocab_size, write_dlogits, dloss);
  }
  void vocab_parallel_max(Tensor row_max, Tensor logits, int64_t vocab_start, int vocab_size) override {
    const char* op = "vocab_parallel_max";
    const OpScope open;
    cpu_->vocab_parallel_max(own(row_max, op), own(logits, op), vocab_start, vocab_size);
  }
  void vocab_parallel_sum_exp(Tensor stats, Tensor logits, Tensor row_max, Tensor targets, int64_t vocab_start,
                              int vocab_size) override {
    const char* op = "vocab_parallel_sum_exp";
    const OpScope open;
    cpu_->vocab_parallel_sum_exp(own(stats, op), own(logits, op), own(row_max, op), any(targets), vocab_start,
                                 vocab_size);
  }
  void vocab_parallel_cross_entropy(Tensor logits, Tensor losses, Tensor targets, Tensor row_max, Tensor stats,
                                    int64_t vocab_start, int vocab_size, bool write_dlogits, float dloss) override {
    const char* op = "vocab_parallel_cross_entropy";
    const OpScope open;
    cpu_->vocab_parallel_cross_entropy(own(logits, op), own(losses, op), any(targets), own(row_max, op),
                                       own(stats, op), vocab_start, vocab_size, write_dlogits, dloss);
  }
  void adamw_update(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor param_copy,
                    const AdamWArgs& args) override {
    const char* op = "adamw_update";
    const OpScope open;
    cpu_->adamw_update(own(param, op), own(grad, op), own(exp_avg, op), own(exp_avg_sq, op), own(param_copy, op),
                       args);
  }

 private:
  struct LateCopy {
    void* dst;
    std::vector<unsigned char> bytes;
  };
  std::unique_ptr<Backend> cpu_;
  std::vector<LateCopy> late_copies_;  // copy_async's writes, landed by synchronize()
};

}  // namespace

std::unique_ptr<Backend> make_guarded_cpu_backend() { return std::make_unique<GuardedBackend>(); }

}  // namespace strata
