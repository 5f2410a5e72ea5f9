// The guarded CPU backend: its memory faults when touched from outside an op, its ops refuse
// tensors not labelled as its own, and its arithmetic is the CPU backend's, bit for bit.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <thread>

#include "backend_test_util.h"

namespace strata {
namespace {

using test::fill_normal;

// Runs fn in a forked child; returns the signal that ended it (0 when it exited normally).
template <typename Fn>
int signal_of_child(Fn fn) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // the test framework's handler would report a failure here
    std::signal(SIGBUS, SIG_DFL);
    fn();
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

// Host values → a fresh buffer of `backend`, through its copy (the only way in).
Buffer upload(Backend& backend, const std::vector<float>& values) {
  Buffer b = backend.allocate(values.size() * sizeof(float));
  backend.copy(Tensor(const_cast<float*>(values.data()), DType::F32, {static_cast<int64_t>(values.size())}),
               b.view(0, DType::F32, {static_cast<int64_t>(values.size())}));
  return b;
}

std::vector<float> download(Backend& backend, const Buffer& b, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  backend.copy(b.view(0, DType::F32, {n}), Tensor(out.data(), DType::F32, {n}));
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_CASE("guarded buffers fault on host access outside the backend's ops") {
  auto guarded = make_guarded_cpu_backend();
  CHECK(guarded->device() == Device::Simulated);
  Buffer buffer = guarded->allocate(1000);
  CHECK(buffer.device() == Device::Simulated);
  CHECK(signal_of_child([&] { std::printf("%f\n", static_cast<double>(*static_cast<volatile float*>(buffer.data()))); }) ==
        SIGSEGV);
  CHECK(signal_of_child([&] { *static_cast<volatile float*>(buffer.data()) = 1.0f; }) == SIGSEGV);
  // The same access to an ordinary CPU buffer is fine (the probe itself is sound).
  auto cpu = make_cpu_backend();
  Buffer host = cpu->allocate(1000);
  CHECK(signal_of_child([&] { *static_cast<volatile float*>(host.data()) = 1.0f; }) == 0);
}

TEST_CASE("guarded ops refuse tensors that are not the simulated device's") {
  auto guarded = make_guarded_cpu_backend();
  Buffer buffer = guarded->allocate(64 * sizeof(float));
  std::vector<float> host(64, 1.0f);
  const Tensor on_host(host.data(), DType::F32, {64});
  Tensor mislabelled = buffer.view(0, DType::F32, {64});
  mislabelled.device = Device::CPU;  // device memory passed off as host memory
  CHECK_THROWS_WITH(guarded->zero(on_host), strata_catch::Contains("labelled 'cpu'"));
  CHECK_THROWS_WITH(guarded->scale(mislabelled, 2.0f), strata_catch::Contains("labelled 'cpu'"));
  CHECK_THROWS_WITH(guarded->add(buffer.view(0, DType::F32, {64}), buffer.view(0, DType::F32, {64}), on_host),
                    strata_catch::Contains("add"));
  // After a refused op the memory is closed again.
  CHECK(signal_of_child([&] { *static_cast<volatile float*>(buffer.data()) = 1.0f; }) == SIGSEGV);
  // copy is the way across, in both directions.
  guarded->copy(on_host, buffer.view(0, DType::F32, {64}));
  std::vector<float> back(64, 0.0f);
  guarded->copy(buffer.view(0, DType::F32, {64}), Tensor(back.data(), DType::F32, {64}));
  CHECK(back == host);
}

TEST_CASE("guarded ops give the CPU backend's bits") {
  auto guarded = make_guarded_cpu_backend();
  auto cpu = make_cpu_backend();
  const int64_t B = 2, T = 8, C = 16, NH = 2;
  std::vector<float> x(static_cast<size_t>(B * T * C)), w(static_cast<size_t>(C * 3 * C)), bias(3 * C),
      ln_w(C, 1.0f), ln_b(C, 0.0f);
  fill_normal(x, 1);
  fill_normal(w, 2, 0.2f);
  fill_normal(bias, 3, 0.1f);
  fill_normal(ln_b, 4, 0.1f);
  // layernorm → linear → attention forward and backward → sum of squares, on each backend.
  auto run = [&](Backend& be, double* norm) {
    Buffer bx = upload(be, x), bw = upload(be, w), bb = upload(be, bias), blw = upload(be, ln_w), blb = upload(be, ln_b);
    Buffer ln = be.allocate(x.size() * 4), mean = be.allocate(B * T * 4), rstd = be.allocate(B * T * 4);
    Buffer qkv = be.allocate(static_cast<size_t>(B * T * 3 * C) * 4), out = be.allocate(x.size() * 4);
    Buffer lse = be.allocate(static_cast<size_t>(B * NH * T) * 4), dqkv = be.allocate(static_cast<size_t>(B * T * 3 * C) * 4);
    const auto v = [](const Buffer& b, std::initializer_list<int64_t> dims) { return b.view(0, DType::F32, dims); };
    be.layernorm_forward(v(ln, {B, T, C}), v(mean, {B, T}), v(rstd, {B, T}), v(bx, {B, T, C}), v(blw, {C}), v(blb, {C}));
    be.linear_forward(v(qkv, {B, T, 3 * C}), v(ln, {B, T, C}), v(bw, {C, 3 * C}), v(bb, {3 * C}));
    be.attention_forward(v(out, {B, T, C}), v(lse, {B, NH, T}), v(qkv, {B, T, 3 * C}), static_cast<int>(NH));
    be.attention_backward(v(dqkv, {B, T, 3 * C}), v(bx, {B, T, C}), v(qkv, {B, T, 3 * C}), v(out, {B, T, C}),
                          v(lse, {B, NH, T}), static_cast<int>(NH));
    *norm = be.sum_squares(v(dqkv, {B * T * 3 * C}));
    std::vector<float> result = download(be, out, B * T * C);
    const std::vector<float> grads = download(be, dqkv, B * T * 3 * C);
    result.insert(result.end(), grads.begin(), grads.end());
    return result;
  };
  double norm_guarded = 0, norm_cpu = 0;
  const std::vector<float> a = run(*guarded, &norm_guarded);
  const std::vector<float> b = run(*cpu, &norm_cpu);
  CHECK(same_bits(a, b));
  CHECK(norm_guarded == norm_cpu);
  CHECK(norm_cpu > 0.0);
}

TEST_CASE("guarded ops open the buffers their tensors lie in, wherever in them") {
  auto guarded = make_guarded_cpu_backend();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  Buffer a = guarded->allocate(3 * page), b = guarded->allocate(page);
  // A view that starts on a's third page: the op must find the buffer it lies in.
  const size_t offset = 2 * page + 64;
  const std::vector<float> values{1.0f, 2.0f, 3.0f, 4.0f};
  guarded->copy(Tensor(const_cast<float*>(values.data()), DType::F32, {4}), a.view(offset, DType::F32, {4}));
  guarded->scale(a.view(offset, DType::F32, {4}), 2.0f);
  guarded->add(b.view(0, DType::F32, {4}), a.view(offset, DType::F32, {4}), a.view(offset, DType::F32, {4}));
  const std::vector<float> sum = download(*guarded, b, 4);
  CHECK(sum == std::vector<float>{4.0f, 8.0f, 12.0f, 16.0f});
  CHECK(signal_of_child([&] { *static_cast<volatile float*>(a.data()) = 1.0f; }) == SIGSEGV);
  CHECK(signal_of_child([&] { *static_cast<volatile float*>(b.data()) = 1.0f; }) == SIGSEGV);
}

TEST_CASE("guarded ops on two threads keep a shared buffer open until both end") {
  // The communication thread stages copies while the compute thread runs ops on the same
  // buffers: the one that ends first must not close a buffer the other still reads.
  auto guarded = make_guarded_cpu_backend();
  const int64_t n = 1 << 16;
  Buffer shared = guarded->allocate(static_cast<size_t>(n) * sizeof(float));
  const int ended_by = signal_of_child([&] {
    std::thread compute([&] {
      for (int i = 0; i < 2000; ++i) guarded->scale(shared.view(0, DType::F32, {n}), 1.0f);
    });
    std::vector<float> host(static_cast<size_t>(n));
    for (int i = 0; i < 2000; ++i) guarded->copy(shared.view(0, DType::F32, {n}), Tensor(host.data(), DType::F32, {n}));
    compute.join();
  });
  CHECK(ended_by == 0);
}

TEST_CASE("guarded memory is counted by its allocator") {
  auto guarded = make_guarded_cpu_backend();
  const MemoryStats before = guarded->memory_stats();
  {
    Buffer a = guarded->allocate(10000);
    const MemoryStats during = guarded->memory_stats();
    CHECK(during.allocated_bytes >= before.allocated_bytes + 10000);
    CHECK(during.peak_allocated_bytes >= during.allocated_bytes);
  }
  CHECK(guarded->memory_stats().allocated_bytes == before.allocated_bytes);
  guarded->reset_peak_memory();
  CHECK(guarded->memory_stats().peak_allocated_bytes == before.allocated_bytes);
}

TEST_CASE("guarded copy_async lands in host memory only at synchronize, as a device's would") {
  auto guarded = make_guarded_cpu_backend();
  Buffer device = guarded->allocate(4 * sizeof(float));
  const std::vector<float> values{1.5f, -2.0f, 3.25f, 4.0f};
  guarded->copy(Tensor(const_cast<float*>(values.data()), DType::F32, {4}), device.view(0, DType::F32, {4}));
  Buffer host = guarded->allocate_host(4 * sizeof(float));
  REQUIRE(host.device() == Device::CPU);
  auto* landed = static_cast<float*>(host.data());
  guarded->copy_async(device.view(0, DType::F32, {4}), Tensor(landed, DType::F32, {4}));
  // The source is read in op order: changing it afterwards does not change what lands.
  guarded->zero(device.view(0, DType::F32, {4}));
  for (int i = 0; i < 4; ++i) CHECK(landed[i] == 0.0f);  // a caller reading now reads stale memory
  guarded->synchronize();
  for (int i = 0; i < 4; ++i) CHECK(landed[i] == values[static_cast<size_t>(i)]);
}

TEST_CASE("the CPU backend counts its buffers too") {
  auto cpu = make_cpu_backend();
  const MemoryStats before = cpu->memory_stats();
  {
    Buffer a = cpu->allocate(4096);
    CHECK(cpu->memory_stats().allocated_bytes == before.allocated_bytes + 4096);
  }
  CHECK(cpu->memory_stats().allocated_bytes == before.allocated_bytes);
  CHECK(cpu->peak_flops() == 0.0);
}

TEST_CASE("MFU peaks come from the GPU's name") {
  CHECK(gpu_peak_flops("NVIDIA H100 80GB HBM3") == 989e12);
  CHECK(gpu_peak_flops("NVIDIA H200") == 989e12);
  CHECK(gpu_peak_flops("NVIDIA H100 PCIe") == 756e12);
  CHECK(gpu_peak_flops("NVIDIA A100-SXM4-80GB") == 312e12);
  CHECK(gpu_peak_flops("NVIDIA GeForce RTX 4090") == 0.0);
}

}  // namespace
}  // namespace strata
