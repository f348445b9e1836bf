"""The one owner of torch's CPU thread count in this process: nothing else in the package sets it.

``torch.set_num_threads`` is process-wide, so two setters that do not know of each other undo each other: a weights
check run at one thread while a runtime serves would run the server at one thread, and its restore could undo the
runtime's setting for good. Here a holder's setting (:func:`hold_threads`: a runtime, the trainer) stands from
then on, and a block (:func:`torch_threads`: a one-off job such as checking weights as they load) sets its count
only while no holder's setting stands, and restores the count from before it after; a setting held during a block
stays. Blocks of several threads at once share one setting: the first to enter sets it, the last to leave
restores (a later entrant asking for another count runs with the one in force).

torch's count is a thread's own once the thread has run torch (OpenMP's), and new threads take the one set last:
a holder sets it in its thread and for threads to come, another thread that runs for it applies it there
(:func:`keep_held_threads`), and a block that set its count puts back, in its thread, the count from before it or
the one a holder set meanwhile. The fork hook gives a child a
fresh lock and no blocks (their threads are not in the child); its holders apply their settings again there.
(It lives in ``util``, which knows nothing of ELMo, so that ``formats``, the runtime, pretraining and the commands,
all above it, reach the one owner.)
"""
import os
import threading
from contextlib import contextmanager
from typing import Iterator, Optional

import torch

_lock = threading.Lock()
_held: Optional[int] = None  # the count a holder set last: it stands, blocks leave it alone
_generation = 0  # holds so far; a thread that has applied the last one keeps it in _local.seen
_local = threading.local()
_blocks = 0  # blocks running
_restore: Optional[int] = None  # the count before the blocks, when they set theirs (None: they set nothing)


def _set(threads: int) -> None:
    """Make ``threads`` torch's count (nothing when it is already)."""
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def hold_threads(threads: int) -> None:
    """Make ``threads`` torch's count from now on, for a holder that depends on it (a serving runtime, training):
    a block running now or later leaves it in force."""
    global _held, _generation
    with _lock:
        _held, _generation = threads, _generation + 1
        _set(threads)
        _local.seen = _generation


def keep_held_threads() -> None:
    """In this thread, the count a holder set last, unless this thread has applied it: one comparison when it has
    (the path of every biLM run)."""
    if getattr(_local, "seen", None) != _generation:
        with _lock:
            if _held is not None:
                _set(_held)
            _local.seen = _generation


@contextmanager
def torch_threads(threads: Optional[int]) -> Iterator[None]:
    """Run the block with ``threads`` torch CPU threads unless a holder's setting stands (None: unchanged); the
    count from before is restored after, unless a holder set one meanwhile."""
    global _blocks, _restore
    if threads is None:
        yield
        return
    with _lock:
        if _blocks == 0 and _held is None:
            _restore = torch.get_num_threads()
            _set(threads)
        _blocks += 1
    try:
        yield
    finally:
        with _lock:
            _blocks -= 1
            if _blocks == 0 and _restore is not None:
                _set(_restore if _held is None else _held)
                _restore = None


def _after_fork_in_child() -> None:
    """A forked child starts with a free lock and no blocks (the threads that ran them are not in it)."""
    global _lock, _blocks, _restore
    _lock, _blocks, _restore = threading.Lock(), 0, None


os.register_at_fork(after_in_child=_after_fork_in_child)
