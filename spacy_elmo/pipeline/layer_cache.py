"""A bounded store of biLM layers per training sentence, so epochs after the first skip the biLM.

A frozen biLM that starts every sentence from the same state is a pure function of the
sentence, so its layers can be kept. The store fills until its byte budget is spent and then
takes nothing more: training revisits sentences in cycles, where least-recently-used
eviction would throw out every sentence just before it comes back.

The store is the biLM model's (an attr, see ``architectures.py``), sized by the ``elmo`` component's
``train_cache_mb``. It is never saved (thinc leaves out attrs msgpack cannot write), and a copy of the model
(``Model.copy``, ``copy.deepcopy``) starts with an empty store of the same budget.
"""
from typing import Any, Dict, Optional, Tuple

from thinc.types import FloatsXd

Key = Tuple[str, ...]


class LayerCache:
    """Layers ``(n_layers + 1, len(sentence), dim)`` keyed by the sentence's tokens."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self._store: Dict[Key, FloatsXd] = {}

    def __len__(self) -> int:
        return len(self._store)

    def get(self, key: Key) -> Optional[FloatsXd]:
        found = self._store.get(key)
        self.hits += found is not None
        self.misses += found is None
        return found

    def add(self, key: Key, layers: FloatsXd) -> bool:
        """Keep ``layers`` (a copy, so no larger buffer stays alive) if the budget allows; True if kept."""
        if key in self._store or self.nbytes + layers.nbytes > self.max_bytes:
            return False
        self._store[key] = layers.copy()
        self.nbytes += layers.nbytes
        return True

    def clear(self) -> None:
        self._store.clear()
        self.nbytes = self.hits = self.misses = 0

    def __deepcopy__(self, memo: Dict[int, Any]) -> "LayerCache":
        return LayerCache(self.max_bytes)
