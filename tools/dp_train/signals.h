#pragma once
// Ctrl-C (SIGINT), SIGTERM and SIGHUP (a closed terminal or SSH session) ask the training loop to stop after the step in progress, so the
// checkpoint it then writes is consistent. The handler only sets a flag (async-signal-safe); it is
// installed with SA_RESETHAND, so a second Ctrl-C kills the program at once, as a user expects.
namespace dp::train {

void install_stop_handlers();
// 0 while no stop was asked for, else the signal's number.
int stop_signal();

}  // namespace dp::train
