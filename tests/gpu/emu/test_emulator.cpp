// Self-checks of the CPU emulator itself: small kernels that each break one CUDA rule must be
// reported (or, for cp.async, must observe data that has not landed), and the correct variant
// of the same kernel must pass, so a passing attention test means the rules were enforced.
#include "catch_compat.h"

#include "emu_attention.h"

using namespace strata;

TEST_CASE("the emulator reports a __syncthreads that one warp skips") {
  const std::string report = emu::probe_skipped_block_barrier();
  INFO("emulator report: " << report);
  CHECK(report.find("__syncthreads()") != std::string::npos);
  CHECK(report.find("block (0, 0, 0)") != std::string::npos);
}

TEST_CASE("cp.async data reaches other threads only through a barrier in the emulator") {
  emu::set_schedule_seed(3);
  CHECK(emu::probe_neighbour_reads_of_unlanded_data(false) > 0);
  CHECK(emu::probe_neighbour_reads_of_unlanded_data(true) == 0);
}
