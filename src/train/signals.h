// SIGINT/SIGTERM handling: the first signal asks the loop to finish the current step,
// save a checkpoint and exit 0; a second one ends the process at once.
#pragma once

namespace strata {

void install_stop_signal_handlers();
bool stop_requested();
int stop_signal();  // the signal number that asked to stop, 0 if none

}  // namespace strata
