"""Calls cancelled from another thread: :class:`CancelHandle` and the :class:`CallCancelled` its calls raise.

A web service runs a request's work in a worker thread; when the client goes away, the request's thread is busy in
the model, where nothing can interrupt it. A handle, made by the service and held by the worker while it works
(``with handle.scope():``), lets any other thread cancel what the worker's calls still have to do; what stops
when: :meth:`CancelHandle.cancel`, and :class:`~spacy_elmo.serving.request_batcher.RequestBatcher` ("Cancelling").
"""
import contextvars
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional


class CallCancelled(Exception):
    """The call was cancelled through its :class:`CancelHandle`; its items not yet run never ran."""

    def __init__(self, message: str = "the call was cancelled: its items not yet run were dropped"):
        super().__init__(message)


class CancelHandle:
    """Cancels, from any thread, the calls made inside :meth:`scope` (in the thread, or task, that entered it).

    Safe to use from several threads: that is its purpose. Cancelling is final; calls made in its scope after it
    raise :class:`CallCancelled` at once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._hooks: List[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Cancel the calls in this handle's scope: those waiting stop at once, a running one after its batch (or at
        the batch's next pause point, when no other call has a share of it)."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()

    @contextmanager
    def scope(self) -> Iterator["CancelHandle"]:
        """Calls made in this block (in this thread or task) are cancelled by :meth:`cancel`."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    def on_cancel(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Call ``hook`` when the handle is cancelled (at once if it is); returns what forgets the hook."""
        with self._lock:
            if not self._cancelled:
                self._hooks.append(hook)
                return lambda: self._forget(hook)
        hook()
        return lambda: None

    def _forget(self, hook: Callable[[], None]) -> None:
        with self._lock:
            if hook in self._hooks:
                self._hooks.remove(hook)


_CURRENT: contextvars.ContextVar[Optional[CancelHandle]] = contextvars.ContextVar("spacy_elmo_cancel", default=None)


def current_handle() -> Optional[CancelHandle]:
    """The handle whose :meth:`CancelHandle.scope` the current thread (or task) is in, if any."""
    return _CURRENT.get()
