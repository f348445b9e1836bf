"""A bounded cache of context-free token vectors, so frequent words skip the char CNN."""
from typing import Dict, List, Sequence, Tuple

import torch


class TokenCache:
    """Up to ``capacity`` token vectors, filled in order of arrival and never evicted.

    Fill it from a word list (most frequent first) with :meth:`ElmoEncoder.fill_cache`, or let it fill
    as text runs. A biLM whose weights change must clear its cache.
    """

    def __init__(self, capacity: int, dim: int, device: torch.device = torch.device("cpu")):
        self.capacity = capacity
        self.slots: Dict[str, int] = {}
        self.vectors = torch.zeros(capacity, dim, device=device)

    def __len__(self) -> int:
        return len(self.slots)

    @property
    def full(self) -> bool:
        return len(self.slots) >= self.capacity

    def lookup(self, types: Sequence[str]) -> Tuple[List[int], List[int], List[int]]:
        """Split ``types`` into positions found (with their slots) and positions missing."""
        found, slots, missing = [], [], []
        for i, t in enumerate(types):
            slot = self.slots.get(t)
            if slot is None:
                missing.append(i)
            else:
                found.append(i)
                slots.append(slot)
        return found, slots, missing

    def add(self, types: Sequence[str], vectors: torch.Tensor) -> None:
        """Store as many of ``types`` as there is room for."""
        room = self.capacity - len(self.slots)
        new = [(t, i) for i, t in enumerate(types) if t not in self.slots][:room]
        if not new:
            return
        start = len(self.slots)
        for k, (t, _) in enumerate(new):
            self.slots[t] = start + k
        rows = torch.tensor([i for _, i in new], device=vectors.device)
        self.vectors[start : start + len(new)] = vectors.index_select(0, rows).detach().to(self.vectors.device)

    def clear(self) -> None:
        self.slots.clear()
