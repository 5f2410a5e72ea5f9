// The guarded CPU backend: the CPU backend's arithmetic on memory that stays PROT_NONE except
// while one of the backend's own ops runs. Code outside the backend that reads or writes its
// buffers faults at once, as it would (less politely) with GPU memory, and ops refuse tensors
// not labelled Device::Simulated, as the CUDA backend refuses host tensors.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
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

// Every live guarded allocation and how many running ops have it open: a region is readable
// only while at least one op that was given a tensor in it runs (ops nest, as the linear-layer
// conveniences call matmul, and run on two threads at once, as the communication thread's
// staging copies do).
struct Region {
  size_t bytes = 0;  // mapped bytes (whole pages)
  int open = 0;
};
struct GuardRegistry {
  std::mutex mutex;
  std::map<const char*, Region> regions;  // by base address
  size_t allocated = 0, peak = 0;
};

GuardRegistry& registry() {
  static GuardRegistry* r = new GuardRegistry();  // never destroyed: buffers may outlive statics
  return *r;
}

void set_protection(const char* base, size_t bytes, int prot) {
  if (mprotect(const_cast<char*>(base), bytes, prot) != 0) {
    throw std::runtime_error(std::string("guarded backend: mprotect failed: ") + std::strerror(errno));
  }
}

struct Span {
  const void* data = nullptr;
  size_t bytes = 0;
};
Span span_of(const Tensor& t) { return t.defined() ? Span{t.data, t.bytes()} : Span{}; }

// Opens the guarded regions an op's tensors lie in, for the op's lifetime, and only those: an op
// that reached past its arguments faults as a device kernel reading a wild pointer would. Each
// mprotect costs every thread a TLB flush, so the regions other ops use are left alone (opening
// them all made the backend ~50 times slower than the CPU's).
class OpScope {
 public:
  template <class... Tensors>
  explicit OpScope(const Tensors&... tensors) : OpScope(std::vector<Span>{span_of(tensors)...}) {}
  explicit OpScope(const std::vector<Span>& spans) {
    GuardRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const Span& span : spans) {
      if (!span.data || span.bytes == 0) continue;
      const char* begin = static_cast<const char*>(span.data);
      const char* end = begin + span.bytes;
      auto it = r.regions.upper_bound(begin);
      if (it != r.regions.begin()) --it;  // the region that may hold begin
      for (; it != r.regions.end() && it->first < end; ++it) {
        if (it->first + it->second.bytes <= begin) continue;
        if (std::find(opened_.begin(), opened_.end(), it->first) != opened_.end()) continue;
        if (it->second.open++ == 0) set_protection(it->first, it->second.bytes, PROT_READ | PROT_WRITE);
        opened_.push_back(it->first);
      }
    }
  }
  ~OpScope() {
    GuardRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const char* base : opened_) {
      const auto it = r.regions.find(base);
      if (it == r.regions.end() || it->second.open == 0) continue;  // released while open: a caller's bug
      if (--it->second.open == 0) set_protection(base, it->second.bytes, PROT_NONE);
    }
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  std::vector<const char*> opened_;
};

size_t page_rounded(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes == 0 ? page : (bytes + page - 1) / page * page);
}

void release_guarded(void* p) {
  GuardRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.regions.find(static_cast<const char*>(p));
  if (it == r.regions.end()) return;
  munmap(p, it->second.bytes);
  r.allocated -= it->second.bytes;
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
    std::vector<Span> targets;
    for (const LateCopy& c : late_copies_) targets.push_back({c.dst, c.bytes.size()});
    const OpScope open(targets);
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
    r.regions.emplace(static_cast<const char*>(p), Region{mapped, 0});
    r.allocated += mapped;
    if (r.allocated > r.peak) r.peak = r.allocated;
    set_protection(static_cast<const char*>(p), mapped, PROT_NONE);
    return Buffer(p, bytes, Device::Simulated, &release_guarded);
  }
  void copy(Tensor src, Tensor dst) override {
    const OpScope open(src, dst);
    cpu_->copy(any(src), any(dst));
  }
  Buffer allocate_host(size_t bytes) override { return cpu_->allocate_host(bytes); }
  // src is read now (ops are in order) but dst is written only by synchronize(): a caller that
  // reads the host side before waiting, as it must not on a device, reads stale values.
  void copy_async(Tensor src, Tensor dst) override {
    const OpScope open(src);
    require(src.dtype == dst.dtype && src.numel() == dst.numel(), "copy_async",
            src.shape_string() + " vs " + dst.shape_string());
    const auto* from = static_cast<const unsigned char*>(src.data);
    late_copies_.push_back({dst.data, std::vector<unsigned char>(from, from + src.bytes())});
  }
  void cast(Tensor src, Tensor dst) override {
    const OpScope open(src, dst);
    cpu_->cast(own(src, "cast"), own(dst, "cast"));
  }
  void zero(Tensor t) override {
    const OpScope open(t);
    cpu_->zero(own(t, "zero"));
  }
  void fill(Tensor t, float value) override {
    const OpScope open(t);
    cpu_->fill(own(t, "fill"), value);
  }
  void scale(Tensor t, float factor) override {
    const OpScope open(t);
    cpu_->scale(own(t, "scale"), factor);
  }
  double sum_squares(Tensor t) override {
    const OpScope open(t);
    return cpu_->sum_squares(own(t, "sum_squares"));
  }
  void matmul(Tensor out, Tensor a, Tensor b, Tensor bias, bool trans_a, bool trans_b, bool accumulate) override {
    const char* op = "matmul";
    const OpScope open(out, a, b, bias);
    cpu_->matmul(own(out, op), own(a, op), own(b, op), own(bias, op), trans_a, trans_b, accumulate);
  }
  void bias_backward(Tensor dbias, Tensor dout) override {
    const OpScope open(dbias, dout);
    cpu_->bias_backward(own(dbias, "bias_backward"), own(dout, "bias_backward"));
  }
  void add_bias(Tensor out, Tensor bias) override {
    const OpScope open(out, bias);
    cpu_->add_bias(own(out, "add_bias"), own(bias, "add_bias"));
  }
  void add(Tensor out, Tensor a, Tensor b) override {
    const OpScope open(out, a, b);
    cpu_->add(own(out, "add"), own(a, "add"), own(b, "add"));
  }
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias) override {
    const char* op = "layernorm_forward";
    const OpScope open(out, mean, rstd, inp, weight, bias);
    cpu_->layernorm_forward(own(out, op), own(mean, op), own(rstd, op), own(inp, op), own(weight, op), own(bias, op));
  }
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                          Tensor mean, Tensor rstd) override {
    const char* op = "layernorm_backward";
    const OpScope open(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
    cpu_->layernorm_backward(own(dinp, op), own(dweight, op), own(dbias, op), own(dout, op), own(inp, op),
                             own(weight, op), own(mean, op), own(rstd, op));
  }
  void gelu_forward(Tensor out, Tensor inp) override {
    const OpScope open(out, inp);
    cpu_->gelu_forward(own(out, "gelu_forward"), own(inp, "gelu_forward"));
  }
  void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) override {
    const char* op = "gelu_backward";
    const OpScope open(dinp, dout, inp);
    cpu_->gelu_backward(own(dinp, op), own(dout, op), own(inp, op));
  }
  void attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_head) override {
    const char* op = "attention_forward";
    const OpScope open(out, lse, qkv);
    cpu_->attention_forward(own(out, op), own(lse, op), own(qkv, op), n_head);
  }
  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_head) override {
    const char* op = "attention_backward";
    const OpScope open(dqkv, dout, qkv, out, lse);
    cpu_->attention_backward(own(dqkv, op), own(dout, op), own(qkv, op), own(out, op), own(lse, op), n_head);
  }
  void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int64_t vocab_start,
                         int vocab_size) override {
    const char* op = "embedding_forward";
    const OpScope open(out, tokens, wte, wpe);
    cpu_->embedding_forward(own(out, op), any(tokens), own(wte, op), own(wpe, op), vocab_start, vocab_size);
  }
  void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int64_t vocab_start,
                          int vocab_size) override {
    const char* op = "embedding_backward";
    const OpScope open(dwte, dwpe, dout, tokens);
    cpu_->embedding_backward(own(dwte, op), own(dwpe, op), own(dout, op), any(tokens), vocab_start, vocab_size);
  }
  void softmax_cross_entropy(Tensor logits, Tensor losses, Tensor targets, int vocab_size, bool write_dlogits,
                             float dloss) override {
    const char* op = "softmax_cross_entropy";
    const OpScope open(logits, losses, targets);
    cpu_->softmax_cross_entropy(own(logits, op), own(losses, op), any(targets), vocab_size, write_dlogits, dloss);
  }
  void vocab_parallel_max(Tensor row_max, Tensor logits, int64_t vocab_start, int vocab_size) override {
    const char* op = "vocab_parallel_max";
    const OpScope open(row_max, logits);
    cpu_->vocab_parallel_max(own(row_max, op), own(logits, op), vocab_start, vocab_size);
  }
  void vocab_parallel_sum_exp(Tensor stats, Tensor logits, Tensor row_max, Tensor targets, int64_t vocab_start,
                              int vocab_size) override {
    const char* op = "vocab_parallel_sum_exp";
    const OpScope open(stats, logits, row_max, targets);
    cpu_->vocab_parallel_sum_exp(own(stats, op), own(logits, op), own(row_max, op), any(targets), vocab_start,
                                 vocab_size);
  }
  void vocab_parallel_cross_entropy(Tensor logits, Tensor losses, Tensor targets, Tensor row_max, Tensor stats,
                                    int64_t vocab_start, int vocab_size, bool write_dlogits, float dloss) override {
    const char* op = "vocab_parallel_cross_entropy";
    const OpScope open(logits, losses, targets, row_max, stats);
    cpu_->vocab_parallel_cross_entropy(own(logits, op), own(losses, op), any(targets), own(row_max, op),
                                       own(stats, op), vocab_start, vocab_size, write_dlogits, dloss);
  }
  void adamw_update(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor param_copy,
                    const AdamWArgs& args) override {
    const char* op = "adamw_update";
    const OpScope open(param, grad, exp_avg, exp_avg_sq, param_copy);
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
