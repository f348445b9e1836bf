"""Calls from several threads merged into one batch: opportunistic dynamic batching (provisional copy)."""
import threading
import time
from typing import Any, Callable, List, Optional, Sequence


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

    def __init__(self, run: Callable[[List[Any]], List[Any]], wait_ms: float = 0.0, max_batch_cost: Optional[int] = None):
        self.run = run
        self.wait_ms = float(wait_ms)
        self.max_batch_cost = max_batch_cost
        self._init_queue()

    def _init_queue(self) -> None:
        self._ready = threading.Condition()
        self._queue: List[_Request] = []
        self._leading = False
        self._last_size = 1  # calls in the batch before: more than one means concurrent callers

    def __getstate__(self) -> dict:  # a lock cannot be copied or pickled; a copy gets its own, empty queue
        return {"run": self.run, "wait_ms": self.wait_ms, "max_batch_cost": self.max_batch_cost}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_queue()

    def __call__(self, items: Sequence[Any], merge: bool = True, cost: Optional[Callable[[Any], int]] = None) -> List[Any]:
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


