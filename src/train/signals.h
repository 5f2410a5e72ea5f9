// Stop signals: SIGINT, SIGTERM, SIGHUP (a closed terminal) and SIGUSR1 (what Slurm's --signal
// and strata's launch wrapper send, and what mpirun forwards to every rank at once) ask the loop
// to stop at the next micro-batch boundary, save a checkpoint and exit 0; a second one (other
// than a repeated SIGHUP) ends the process at once. During set-up the first one does.
#pragma once

namespace strata {

// Until the training loop starts: a stop signal ends the process at once with 128 + signal,
// after leaving note_exit's file (so launch/strata-mpirun ends mpirun without its kill
// sequence) and, on rank 0, a line saying so.
void install_setup_signal_handlers();
// From the loop on. A stop the launch wrapper was asked for before this rank could receive its
// signal (core's launcher_asked_to_stop) ends the set-up here, as the signal would have.
void install_stop_signal_handlers();
bool stop_requested();
int stop_signal();  // the signal number that asked to stop, 0 if none

}  // namespace strata
