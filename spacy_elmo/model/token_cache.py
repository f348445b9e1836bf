"""A bounded cache of context-free token vectors, so frequent words skip the char CNN."""
import threading
from typing import Callable, Dict, List, Sequence

import torch

from ..errors import ElmoSettingsError


def check_cache_size(cache_size: int) -> None:
    """Refuse a number of token vectors to keep that is not a whole number >= 0."""
    if isinstance(cache_size, bool) or not isinstance(cache_size, int):
        raise ElmoSettingsError(f"cache_size must be a whole number of token vectors, found {cache_size!r}")
    if cache_size < 0:
        raise ElmoSettingsError(f"cache_size must be >= 0 (0 turns the token cache off), found {cache_size}")


class TokenCache:
    """Up to ``capacity`` token vectors, filled in order of arrival and never evicted.

    Fill it from a word list (most frequent first) with :meth:`ElmoEncoder.fill_cache`, or let it fill
    as text runs. A biLM whose weights change must clear its cache.

    Safe to share between threads: a word becomes visible to lookups only together with its vector (one lock
    covers reading slots and vectors, and adding both), and the token layer runs outside the lock.
    """

    def __init__(self, capacity: int, dim: int, device: torch.device = torch.device("cpu")):
        self.capacity = capacity
        self.slots: Dict[str, int] = {}
        self.vectors = torch.zeros(capacity, dim, device=device)
        self._lock = threading.Lock()
        self._generation = 0  # counts clears, so vectors computed before one are not stored after it

    def __getstate__(self) -> dict:  # a lock cannot be copied or pickled; a copy gets its own
        return {key: value for key, value in self.__dict__.items() if key != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.slots)

    @property
    def full(self) -> bool:
        return len(self.slots) >= self.capacity

    def vectors_of(self, types: Sequence[str], compute: Callable[[List[str]], torch.Tensor]) -> torch.Tensor:
        """Vectors of distinct ``types``, ``(len(types), dim)``: cached ones copied, the others by ``compute``
        (called once, with the missing types in order), then stored while there is room."""
        with self._lock:
            generation = self._generation
            slots = [self.slots.get(t) for t in types]
            found = [i for i, slot in enumerate(slots) if slot is not None]
            out = self.vectors.new_empty(len(types), self.vectors.shape[1])
            if found:
                index = torch.tensor(found, device=self.vectors.device)
                rows = torch.tensor([slots[i] for i in found], device=self.vectors.device)
                out.index_copy_(0, index, self.vectors.index_select(0, rows))
        missing = [i for i, slot in enumerate(slots) if slot is None]
        if missing:
            new_types = [types[i] for i in missing]
            computed = compute(new_types)
            out.index_copy_(0, torch.tensor(missing, device=out.device), computed.to(out.dtype))
            self._add(new_types, computed, generation)
        return out

    def _add(self, types: Sequence[str], vectors: torch.Tensor, generation: int) -> None:
        """Store as many of ``types`` (distinct) as there is room for, unless the cache was cleared since
        ``generation``; types another thread added meanwhile are skipped."""
        with self._lock:
            if generation != self._generation:
                return
            room = self.capacity - len(self.slots)
            new = [(t, i) for i, t in enumerate(types) if t not in self.slots][:room]
            if not new:
                return
            start = len(self.slots)
            rows = torch.tensor([i for _, i in new], device=vectors.device)
            self.vectors[start : start + len(new)] = vectors.index_select(0, rows).detach().to(self.vectors.device)
            self.slots.update((t, start + k) for k, (t, _) in enumerate(new))

    def clear(self) -> None:
        with self._lock:
            self.slots.clear()
            self._generation += 1
