// `strata info`: what a job sees — world size, each rank's grid coordinates, host and
// local rank, visible GPUs, and library versions. Every rank contributes one row; rank 0
// prints them in order.
#include <fmt/core.h>

#include <cstdlib>
#include <vector>

#include "tools/tools.h"
#include "core/core.h"
#ifdef STRATA_HAVE_CUDA
#include "device_info.cuh"
#endif

namespace strata {
namespace {

#ifdef STRATA_HAVE_CUDA
std::string version_triplet(int v, int major_div, int minor_div) {
  return fmt::format("{}.{}", v / major_div, (v % major_div) / minor_div);
}
#endif

std::string visible_gpus_summary(std::string* versions) {
#ifdef STRATA_HAVE_CUDA
  std::string why;
  const auto devices = cuda::query_devices(&why);
  const int driver = cuda::driver_version();
  const size_t cublaslt = cuda::cublaslt_version();  // 0: the library could not be opened
  *versions = fmt::format("CUDA runtime {}, driver {}, cuBLASLt {}, NCCL {}",
                          version_triplet(cuda::runtime_version(), 1000, 10),
                          driver ? version_triplet(driver, 1000, 10) : "none",
                          cublaslt ? fmt::format("{}", cublaslt) : "not found",
                          cuda::nccl_version() ? fmt::format("{}", cuda::nccl_version()) : "not built");
  // Without a driver the runtime calls it "insufficient", which reads as "upgrade it".
  if (devices.empty()) return driver ? "none (" + why + ")" : "none (no NVIDIA driver on this machine)";
  std::string s;
  for (const auto& d : devices) {
    if (!s.empty()) s += "; ";
    s += fmt::format("{}: {} (sm_{}{}, {:.0f} GiB)", d.index, d.name, d.compute_major, d.compute_minor,
                     static_cast<double>(d.total_memory_bytes) / (1ull << 30));
  }
  return s;
#else
  *versions = "CUDA backend not built";
  return "none (CUDA backend not built)";
#endif
}

}  // namespace

int run_info(const MpiRuntime& mpi, const InfoOptions& options) {
  if (options.tp < 1 || options.pp < 1 || mpi.world_size() % (options.tp * options.pp) != 0)
    throw UserError(
        fmt::format("strata info --tp {} --pp {}: the world size {} is not divisible by TP × PP = {}; "
                    "pick sizes whose product divides the number of ranks",
                    options.tp, options.pp, mpi.world_size(), options.tp * options.pp),
        RaisedOn::EveryRank);  // every rank has the same command line
  GridShape shape;
  shape.tp = options.tp;
  shape.pp = options.pp;
  shape.dp = mpi.world_size() / (options.tp * options.pp);
  const GridCoord coord = grid_coord(shape, mpi.world_rank());
  std::string versions;
  const std::string gpus = visible_gpus_summary(&versions);
  const char* cuda_visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string row = fmt::format("{:>5} {:>4} {:>4} {:>4}  {:<24} {:>5}/{:<5}  {}{}", mpi.world_rank(), coord.dp,
                                      coord.pp, coord.tp, mpi.hostname(), mpi.local_rank(), mpi.local_size(), gpus,
                                      cuda_visible ? fmt::format(" [CUDA_VISIBLE_DEVICES={}]", cuda_visible) : "");
  constexpr int kRowBytes = 512;
  std::vector<char> mine(kRowBytes, 0);
  row.copy(mine.data(), kRowBytes - 1);
  std::vector<char> all(mpi.world_rank() == 0 ? static_cast<size_t>(kRowBytes) * mpi.world_size() : 1);
  MPI_CHECK(MPI_Gather(mine.data(), kRowBytes, MPI_CHAR, all.data(), kRowBytes, MPI_CHAR, 0, mpi.world()));
  if (mpi.world_rank() == 0) {
    log_info("strata {}", STRATA_VERSION);
    log_info("MPI: {}", mpi_library_version());
    log_info("{}", versions);
    log_info("world size: {} = DP {} × PP {} × TP {}", mpi.world_size(), shape.dp, shape.pp, shape.tp);
    log_info("{:>5} {:>4} {:>4} {:>4}  {:<24} {:>11}  {}", "rank", "dp", "pp", "tp", "host", "local/size",
             "visible GPUs");
    for (int r = 0; r < mpi.world_size(); ++r) log_info("{}", std::string(&all[static_cast<size_t>(r) * kRowBytes]));
  }
  return 0;
}

}  // namespace strata
