// Main of the MPI Catch2 tests: MPI comes up through strata's own runtime (errors
// returned, rank known to logging), every rank runs the same test cases in the same order,
// and the job fails when any rank fails.
#define STRATA_CATCH_SESSION
#include "catch_compat.h"

#include <vector>

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
  std::vector<char*> args(argv, argv + argc);
  char reporter_flag[] = "--reporter", compact[] = "compact";
  if (mpi.world_rank() != 0) args.insert(args.end(), {reporter_flag, compact});
  const int parse = session.applyCommandLine(static_cast<int>(args.size()), args.data());
  if (parse != 0) return parse;
  const int failed = session.run();
  return failed == 0 ? 0 : 1;
}
