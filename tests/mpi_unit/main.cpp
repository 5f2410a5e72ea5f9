// Main of the MPI Catch2 tests: MPI comes up through strata's own runtime (errors
// returned, rank known to logging), every rank runs the same test cases in the same order,
// and the job fails when any rank fails.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "mpi_test_util.h"

namespace {
const strata::MpiRuntime* g_mpi = nullptr;
}

namespace strata_test {
const strata::MpiRuntime& mpi() { return *g_mpi; }
}  // namespace strata_test

int main(int argc, char** argv) {
  strata::MpiRuntime mpi(&argc, &argv);
  g_mpi = &mpi;
  Catch::Session session;
  // Other ranks report compactly (failures and one summary line), so logs stay readable.
  if (mpi.world_rank() != 0) session.configData().reporterName = "compact";
  const int parse = session.applyCommandLine(argc, argv);
  if (parse != 0) return parse;
  const int failed = session.run();
  return failed == 0 ? 0 : 1;
}
