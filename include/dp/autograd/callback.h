#pragma once
// Callbacks at the end of a backward pass (PyTorch's Engine::queue_callback). DistributedDataParallel
// uses one to reduce, at the end of every backward, the gradients of parameters the pass did not
// reach, so ranks that took different branches never wait for each other.
#include <functional>

namespace dp::autograd {

// Queues `fn` to run once, in the thread that called backward() (or grad()), after every node of
// the pass that is running now has finished and before backward() returns. Callable only from
// inside a pass (a node's apply, a tensor hook, a post-accumulate-grad hook, on whatever thread runs
// it); elsewhere an AutogradError. Callbacks run in the order they were queued; one may queue more,
// which run after it. An exception from a callback propagates out of backward() and the callbacks
// after it do not run. When the pass itself fails, no callback runs. A pass started from inside a
// node or hook of another pass (a checkpointed segment's recomputed backward, a reentrant backward)
// hands what was queued in it to that outer pass: the callbacks run at the end of the outer pass,
// so DistributedDataParallel's end-of-pass work belongs to the pass the user started.
void queue_callback(std::function<void()> fn);

// True on a thread that is running a node or hook of a backward pass right now.
bool in_backward_pass();

}  // namespace dp::autograd
