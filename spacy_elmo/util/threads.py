"""The one owner of torch's CPU thread count in this process: nothing else in the package sets it.

The rule (docs/limits.md, "Threads"): torch has one count per process, and the count applied last holds, whoever
applied it: a holder (:func:`hold_threads`: a biLM's runtime when it first runs, pretraining), or the application
(``torch.set_num_threads``). A hold that replaces a count set outside spacy-elmo (one it never set, and not torch's
when this module was imported) says so with an :class:`~spacy_elmo.errors.ElmoThreadsWarning`; a runtime that runs
under a count other than its setting says so once. A block (:func:`torch_threads`: a one-off job such as
checking weights) sets its count only while none is held, and puts back after it the count from before, or one held
meanwhile; blocks of several threads share the first one's setting. torch's count is a thread's own once the thread
has run torch (OpenMP's), and new threads take the one set last, so a thread that runs for a holder applies the
held count once (:func:`keep_held_threads`), and again in a forked child.
"""
import os
import threading
import warnings
from contextlib import contextmanager
from typing import Iterator, Optional

import torch

from ..errors import ElmoThreadsWarning

_lock = threading.Lock()
# torch's count when this module was imported (its own, or one set before) and every count set here since: a count
# in force that is none of these was set outside spacy-elmo
_ours = {torch.get_num_threads()}
_held: Optional[int] = None  # the count a holder set last: it stands, blocks leave it alone
_generation = 0  # holds (and forks) so far; a thread that has applied the last keeps it in _local.seen
_local = threading.local()
_blocks = 0  # blocks running
_restore: Optional[int] = None  # the count before the blocks, when they set theirs (None: they set nothing)

KEEP_HINT = "give every biLM the same threads, or threads=None to leave torch's count as it is"


def _set(threads: int) -> None:
    """Make ``threads`` this thread's count, and the one new threads take (nothing when it is already)."""
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def hold_threads(threads: int) -> None:
    """Make ``threads`` torch's count from now on, for a holder that depends on it: blocks leave it in force. A
    count set outside spacy-elmo that it replaces is warned of."""
    global _held, _generation
    with _lock:
        found = torch.get_num_threads()
        if found != threads and found not in _ours:
            warnings.warn(
                f"torch's thread count is {found}, set outside spacy-elmo (torch.set_num_threads); a biLM's setting, "
                f"threads={threads}, replaces it: torch has one count per process; {KEEP_HINT}",
                ElmoThreadsWarning, stacklevel=3,
            )
        _held, _generation = threads, _generation + 1
        _ours.add(threads)
        _set(threads)
        _local.seen = _generation


def keep_held_threads() -> None:
    """In this thread, the count a holder set last, unless this thread has applied it (on every biLM run: one
    comparison when it has)."""
    if getattr(_local, "seen", None) != _generation:
        with _lock:
            if _held is not None:
                _set(_held)
            _local.seen = _generation


@contextmanager
def torch_threads(threads: Optional[int]) -> Iterator[None]:
    """Run the block with ``threads`` torch CPU threads unless a holder's count stands (None: unchanged)."""
    global _blocks, _restore
    if threads is None:
        yield
        return
    with _lock:
        if _blocks == 0 and _held is None:
            _restore = torch.get_num_threads()
            _ours.add(threads)
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
    """A child has a free lock, no blocks (their threads are not in it), and applies the held count again."""
    global _lock, _blocks, _restore, _generation
    _lock, _blocks, _restore, _generation = threading.Lock(), 0, None, _generation + 1


os.register_at_fork(after_in_child=_after_fork_in_child)
