"""torch's CPU thread count for the length of a block, restored after.

``torch.set_num_threads`` is process-wide: :func:`torch_threads` sets it for a block (a one-off job such as checking
weights as they load) and then restores the previous value. Calls from several Python threads at once share one
setting: the first to enter sets it, the last to leave restores the value from before the first (a later entrant
asking for another count runs with the one in force).
"""
import threading
from contextlib import contextmanager
from typing import Iterator, Optional

import torch

_lock = threading.Lock()
_active = 0  # calls inside torch_threads with a count set
_previous = 0  # torch's setting before the first of them


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
