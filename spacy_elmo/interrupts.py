"""Stopping long jobs cleanly: SIGTERM (``kill``, a scheduler's stop) handled like Ctrl-C."""
import signal
import threading
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while the block runs (main thread only), then restore the handler.

    Jobs catch KeyboardInterrupt to save their state (a checkpoint, a flushed file) before exiting.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
