// strata's entry point: parses the command line and dispatches to a subcommand; maps
// errors to exit codes (0 ok, 2 user error, 1 internal error, 3 device/comm failure).
#include <CLI/CLI.hpp>

#include <exception>

#include "core/core.h"

int main(int argc, char** argv) {
  CLI::App app{"strata: GPT training over DP x TP x PP ranks with ZeRO, from one YAML config"};
  app.set_version_flag("--version", std::string("strata ") + STRATA_VERSION);
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : strata::kExitUserError;
  }
  return 0;
}
