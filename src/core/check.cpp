// Failure path of the checking macros: one line naming rank, call and place, then abort.
#include "core/check.h"

#include <mpi.h>

#include "core/error.h"
#include "core/log.h"
#include "core/process.h"

namespace strata {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "unknown MPI error";
  return std::string(text, static_cast<size_t>(length));
}

void fail_call(const char* api, const char* call, long code, const std::string& detail,
               const char* file, int line) {
  log_error("{} call failed: {} at {}:{}: {} (code {})", api, call, file, line, detail, code);
  abort_job(kExitDeviceFailure);
}

}  // namespace strata
