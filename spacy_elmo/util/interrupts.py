"""Stopping long jobs cleanly: SIGTERM (``kill``, a scheduler's stop) handled like Ctrl-C."""
import signal
import threading
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, ContextManager, Iterator, Optional, Tuple


@contextmanager
def _handled(signals: Tuple[signal.Signals, ...], handler: Any) -> Iterator[None]:
    """``handler`` for ``signals`` while the block runs (main thread only: elsewhere nothing changes), then the
    handlers before it."""
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, handler) for sig in signals} if main else {}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def sigterm_as_interrupt() -> ContextManager[None]:
    """Turn SIGTERM into KeyboardInterrupt while the block runs (main thread only), then restore the handler.

    Jobs catch KeyboardInterrupt to save their state (a checkpoint, a flushed file) before exiting.
    """
    return _handled((signal.SIGTERM,), signal.default_int_handler)


@contextmanager
def stop_on_signal() -> Iterator[SimpleNamespace]:
    """Turn the first SIGINT or SIGTERM into a polled request, ``requested`` set True (main thread only); a second
    one interrupts at once.

    Jobs whose processes must stop together (ranks of a distributed run inside a collective
    operation) cannot be interrupted mid-step: each polls the request between steps, the ranks
    agree on it, and all save and stop at the same step.
    """
    request = SimpleNamespace(requested=False)

    def handle(signum: int, frame: Optional[object]) -> None:
        if request.requested:
            raise KeyboardInterrupt
        request.requested = True

    with _handled((signal.SIGINT, signal.SIGTERM), handle):
        yield request
