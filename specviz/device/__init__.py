"""The device: the queue that gives one session at a time the CPU or GPU, its worker threads,
and the clock that times a pass honestly under outside load."""
