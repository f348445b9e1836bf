"""The number of CPU threads torch uses while this package runs the biLM: a per-call setting, 1 by default.

Why 1: torch starts one thread per core. When another process holds a core, its threads wait for each other at
every operation, and the biLM's many small LSTM steps become 2x to 10x slower than on one thread (BENCHMARKS.md,
"Threads"). One thread is never that slow; more threads help only on idle cores, so they are the user's choice.

Why per call: ``torch.set_num_threads`` is process-wide. Setting it once would change every other torch user in
the process, so :func:`torch_threads` sets it for the duration of one call and then restores the previous value.
"""
from contextlib import contextmanager
from typing import Iterator, Optional

import torch

DEFAULT_THREADS = 1


def check_threads(threads: Optional[int]) -> Optional[int]:
    """``threads`` if it is a positive int or None (None: torch's own setting, left as it is)."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive integer, or None to keep torch's own setting; found {threads!r}")
    return threads


@contextmanager
def torch_threads(threads: Optional[int]) -> Iterator[None]:
    """Run the block with ``threads`` torch CPU threads (None: unchanged); the previous number is restored after."""
    previous = torch.get_num_threads()
    if threads is None or threads == previous:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
