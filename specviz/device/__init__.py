"""The device: the queue that gives one session at a time the CPU or GPU, its worker threads,
and the clock that times a pass honestly under outside load (devqueue); and the runner, the
device as the engine and a model's cache take it (runner: the queue's, or inline)."""
