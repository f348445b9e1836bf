"""Stopping long jobs cleanly: SIGTERM (``kill``, a scheduler's stop) handled like Ctrl-C."""
import signal
import threading
from contextlib import contextmanager
from typing import Iterator, Optional


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


class StopRequest:
    """Set by :func:`stop_on_signal` when Ctrl-C or SIGTERM arrives; the job polls ``requested``."""

    def __init__(self) -> None:
        self.requested = False


@contextmanager
def stop_on_signal() -> Iterator[StopRequest]:
    """Turn the first SIGINT or SIGTERM into a polled request (main thread only); a second one interrupts at once.

    Jobs whose processes must stop together (ranks of a distributed run inside a collective
    operation) cannot be interrupted mid-step: each polls the request between steps, the ranks
    agree on it, and all save and stop at the same step.
    """
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handle(signum: int, frame: Optional[object]) -> None:
        if request.requested:
            raise KeyboardInterrupt
        request.requested = True

    for sig in previous:
        signal.signal(sig, handle)
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
