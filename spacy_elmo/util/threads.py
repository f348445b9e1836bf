"""The number of CPU threads torch uses while this package runs the biLM: a per-call setting, 1 by default.

Why 1: torch starts one thread per core. When another process holds a core, its threads wait for each other at
every operation, and the biLM's many small LSTM steps become 2x to 10x slower than on one thread (BENCHMARKS.md,
"Threads"). One thread is never that slow; more threads help only on idle cores, so they are the user's choice.

Why per call: ``torch.set_num_threads`` is process-wide. Setting it once would change every other torch user in
the process, so :func:`torch_threads` sets it for the duration of one call and then restores the previous value.
Calls from several Python threads at once share one setting: the first to enter sets it, the last to leave restores
the value from before the first (a later entrant asking for another count runs with the one in force).

The settings of merged calls (``batch_requests`` of ``ElmoEmbedder`` and the ``elmo`` component) are checked here;
the batching itself is :class:`spacy_elmo.util.batcher.RequestBatcher`.
"""
import threading
from contextlib import contextmanager
from typing import Iterator, Optional

import torch

from ..errors import ElmoSettingsError
from .numbers import is_number

DEFAULT_THREADS = 1
# How long a call may wait for others after a merged batch: 8 threads calling nlp(text) went from 0.43x to 0.54x of
# nlp.pipe's words/s with it (BENCHMARKS.md, issue 26); a lone caller never waits.
DEFAULT_BATCH_WAIT_MS = 1.0

_lock = threading.Lock()
_active = 0  # calls inside torch_threads with a count set
_previous = 0  # torch's setting before the first of them


def check_threads(threads: Optional[int]) -> Optional[int]:
    """``threads`` if it is a positive int or None (None: torch's own setting, left as it is)."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ElmoSettingsError(f"threads must be a positive integer, or None to keep torch's own setting; found {threads!r}")
    return threads


@contextmanager
def torch_threads(threads: Optional[int]) -> Iterator[None]:
    """Run the block with ``threads`` torch CPU threads (None: unchanged); the previous number is restored after."""
    global _active, _previous
    if threads is None:
        yield
        return
    with _lock:
        if _active == 0:
            _previous = torch.get_num_threads()
            if threads != _previous:
                torch.set_num_threads(threads)
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and torch.get_num_threads() != _previous:
                torch.set_num_threads(_previous)


def check_wait_ms(wait_ms: float) -> float:
    """``wait_ms`` if it is a number of milliseconds >= 0 (0: merge only the calls that are already waiting)."""
    if not is_number(wait_ms) or not wait_ms >= 0:
        raise ElmoSettingsError(f"batch_wait_ms must be a number of milliseconds >= 0 (0: no waiting), found {wait_ms!r}")
    return float(wait_ms)
