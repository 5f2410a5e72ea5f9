// Stop signals: SIGINT, SIGTERM, SIGHUP (a closed terminal) and SIGUSR1 (what Slurm's --signal
// and strata's launch wrapper send, and what mpirun forwards to every rank at once) ask the loop
// to stop at the next micro-batch boundary, save a checkpoint and exit 0; a second one (other
// than a repeated SIGHUP) ends the process at once.
#pragma once

namespace strata {

void install_stop_signal_handlers();
bool stop_requested();
int stop_signal();  // the signal number that asked to stop, 0 if none

}  // namespace strata
