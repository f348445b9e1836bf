"""The number of CPU threads torch uses while this package runs the biLM: a per-call setting, 1 by default.

Why 1: torch starts one thread per core. When another process holds a core, its threads wait for each other at
every operation, and the biLM's many small LSTM steps become 2x to 10x slower than on one thread (BENCHMARKS.md,
"Threads"). One thread is never that slow; more threads help only on idle cores, so they are the user's choice.

Why per call: ``torch.set_num_threads`` is process-wide. Setting it once would change every other torch user in
the process, so :func:`torch_threads` sets it for the duration of one call and then restores the previous value.
Calls from several Python threads at once share one setting: the first to enter sets it, the last to leave restores
the value from before the first (a later entrant asking for another count runs with the one in force).

:class:`RequestBatcher` merges the calls of several Python threads that arrive while the biLM is busy into its next
batch (``batch_requests`` of ``ElmoEmbedder`` and the ``elmo`` component).
"""
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Optional, Sequence

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


class _Request:
    """One caller's items, and what came back for them: their results or the error they raised."""

    def __init__(self, items: Sequence[Any], merge: bool):
        self.items = items
        self.merge = merge
        self.done = False
        self.results: List[Any] = []
        self.error: Optional[BaseException] = None


class RequestBatcher:
    """Calls from several threads that arrive together, run as one batch: opportunistic dynamic batching.

    ``run`` maps a list of items to one result per item, each result independent of the others in the list (the
    biLM's stateless mode), so that merging calls changes no result. A call finding nothing running runs at once;
    calls arriving while a batch runs are queued, and everything queued then runs as the next batch, led by one of
    the waiting threads. ``wait_ms`` > 0: when the batch before merged several calls (the callers are concurrent),
    the next leader first waits up to that long for as many calls as that batch held to queue, so that the
    callers it answered, who call again, join it instead of each running alone; a lone caller never waits.

    Errors: when a merged batch raises an ``Exception``, each call in it is run again alone, so each caller gets its
    own results or the error its own items raise. When the leader is interrupted (``KeyboardInterrupt`` or any other
    ``BaseException``) the interruption is its own: the calls it had not answered are queued again for another
    waiting thread to lead, and nobody waits for a leader that is gone.

    Safe to use from several threads: that is its purpose. A copy or pickle gets a new, empty queue.
    """

    def __init__(self, run: Callable[[List[Any]], List[Any]], wait_ms: float = 0.0):
        self.run = run
        self.wait_ms = check_wait_ms(wait_ms)
        self._init_queue()

    def _init_queue(self) -> None:
        self._ready = threading.Condition()
        self._queue: List[_Request] = []
        self._leading = False
        self._last_size = 1  # calls in the batch before: more than one means concurrent callers

    def __getstate__(self) -> dict:  # a lock cannot be copied or pickled; a copy gets its own, empty queue
        return {"run": self.run, "wait_ms": self.wait_ms}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_queue()

    def __call__(self, items: Sequence[Any], merge: bool = True) -> List[Any]:
        """``run``'s results for ``items``, computed in one batch with whatever other calls are waiting.

        ``merge=False``: run these items alone, one call at a time, in turn with the batches (for a stateful biLM,
        whose results depend on what ran before and with them).
        """
        request = _Request(items, merge)
        with self._ready:
            self._queue.append(request)
            self._ready.notify_all()  # a leader may be waiting for calls to join
        while True:  # a call may lead a batch without its own items in it (a merge=False call went first)
            with self._ready:
                try:
                    while not request.done and self._leading:
                        self._ready.wait()
                except BaseException:  # interrupted while waiting: withdraw the call if no batch took it yet
                    if request in self._queue:
                        self._queue.remove(request)
                    raise
                if request.done:
                    break
                self._leading = True
            self._lead()
        if request.error is not None:
            raise request.error
        return request.results

    def _lead(self) -> None:
        """Run the next batch from the queue, then hand leadership on."""
        batch: List[_Request] = []
        try:
            deadline = time.monotonic() + self.wait_ms / 1000
            with self._ready:
                while len(self._queue) < self._last_size and (left := deadline - time.monotonic()) > 0:
                    self._ready.wait(left)
                batch = _next_batch(self._queue)
                self._last_size = sum(1 for request in batch if request.merge)
            self._run_batch(batch)
        finally:
            with self._ready:
                self._queue[:0] = [r for r in batch if not r.done]
                self._leading = False
                self._ready.notify_all()

    def _run_batch(self, batch: List["_Request"]) -> None:
        """Answer every call of the batch: all in one ``run``, or on an error each call alone."""
        try:
            results = self.run([item for request in batch for item in request.items])
        except Exception as err:
            if len(batch) == 1:
                _answer(batch[0], error=err)
                return
            for request in batch:
                try:
                    _answer(request, results=self.run(list(request.items)))
                except Exception as own_err:
                    _answer(request, error=own_err)
            return
        start = 0
        for request in batch:
            _answer(request, results=results[start : start + len(request.items)])
            start += len(request.items)


def _next_batch(queue: List[_Request]) -> List[_Request]:
    """Take the next batch off the queue: a ``merge=False`` call at its head alone, else the mergeable calls up to
    the first that is not."""
    if not queue[0].merge:
        return [queue.pop(0)]
    end = next((i for i, request in enumerate(queue) if not request.merge), len(queue))
    batch = queue[:end]
    del queue[:end]
    return batch


def _answer(request: _Request, results: Optional[List[Any]] = None, error: Optional[BaseException] = None) -> None:
    request.results = [] if results is None else list(results)
    request.error = error
    request.done = True


def check_wait_ms(wait_ms: float) -> float:
    """``wait_ms`` if it is a number of milliseconds >= 0 (0: merge only the calls that are already waiting)."""
    if not is_number(wait_ms) or not wait_ms >= 0:
        raise ElmoSettingsError(f"batch_wait_ms must be a number of milliseconds >= 0 (0: no waiting), found {wait_ms!r}")
    return float(wait_ms)
