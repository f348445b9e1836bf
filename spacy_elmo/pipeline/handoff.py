"""The layers of Docs on their way from the ``elmo`` component to its listening components, kept off the Docs.

At prediction the ``elmo`` component and its listeners see the same Docs, but in separate ``pipe`` calls that may
batch them differently, so the layers travel per Doc: the component puts each Doc's layers here, and a listener takes
them, as often as it likes, while they are here. They go when every listener waited for has taken them, when a
listener does not come for them in time, or when the byte budget needs the room. Nothing here is the only copy of
anything: a listener that finds no layers for a Doc the component annotated runs the biLM again (``listener.py``).

All the policy is in :class:`LayerHandoff`:

- Who is waited for: the listeners spaCy registered with the component (it links them), and any listener that reads
  here (a component enabled after spaCy linked the pipeline). A listener that lets a Doc's layers expire unread is
  not waited for any more, until it reads again: its component is not running (``select_pipes``,
  ``nlp.pipe(disable=...)``, ``disable_pipe``). When no listener is waited for, the component computes no layers.
- How long: a Doc's layers wait ``keep`` batches of the component (over all threads). ``keep`` starts at 1: with the
  same batch size a listener reads a batch before the component makes the next. It grows to the lag a listener
  showed when it came too late (larger batches than the component's, threads that interleave), up to
  :data:`MAX_KEEP`.
- How much: at most ``max_bytes`` of layers, the oldest let go first.
"""
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Set, Tuple

import numpy as np
from spacy.tokens import Doc
from thinc.types import Floats3d

from .doc_rows import token_spans

MAX_KEEP = 64  # batches a Doc's layers may wait for a listener that showed lag
EXPIRIES_KEPT = 4096  # expired Docs remembered, to learn a late listener's lag


@dataclass
class _Entry:
    doc: "weakref.ReferenceType[Doc]"
    layers: Floats3d
    spans: np.ndarray  # the Doc's tokens the layers are for (token_spans)
    batch: int
    waiting: Set[int]  # ids of the listener nodes yet to take them


class LayerHandoff:
    """Per Doc, its layers and the listeners they wait for (see the module's docstring); ``source`` is the biLM model
    that made them, ``max_bytes`` the budget. Safe to use from several threads."""

    def __init__(self, source: Any = None, max_bytes: int = 2**30) -> None:
        self.source = source
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: "OrderedDict[int, _Entry]" = OrderedDict()  # by id(doc), oldest first
        # id(doc) -> the Doc and the batch of its layers that expired unread
        self._expired: "OrderedDict[int, Tuple[weakref.ReferenceType[Doc], int]]" = OrderedDict()
        self._readers: Set[int] = set()
        self._nbytes = 0
        self._batch = 0
        self._keep = 1

    def __len__(self) -> int:
        """The number of Docs whose layers are held here."""
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """The bytes of layers held here."""
        return self._nbytes

    # --- who reads ---

    def link(self, reader: int) -> None:
        """The listener node with id ``reader`` listens: wait for it."""
        with self._lock:
            self._readers.add(reader)

    def unlink(self, reader: int) -> None:
        """The listener node with id ``reader`` listens no more."""
        with self._lock:
            self._readers.discard(reader)
            for doc_id in [doc_id for doc_id, entry in self._entries.items() if reader in entry.waiting]:
                self._taken(doc_id, reader)

    def relink(self) -> None:
        """spaCy links the pipeline again (and will :meth:`link` the listeners of its enabled components)."""
        with self._lock:
            self._readers.clear()

    # --- the component's side ---

    def begin_batch(self) -> bool:
        """The component starts a batch: let go of what waited long enough; whether any listener is waited for."""
        with self._lock:
            self._batch += 1
            while self._entries:
                doc_id, entry = next(iter(self._entries.items()))
                if entry.batch > self._batch - self._keep and entry.doc() is not None:
                    break
                self._drop(doc_id)
                if entry.waiting and entry.doc() is not None:
                    self._readers -= entry.waiting
                    self._expired[doc_id] = (entry.doc, entry.batch)
                    if len(self._expired) > EXPIRIES_KEPT:
                        self._expired.popitem(last=False)
            return bool(self._readers)

    def put(self, docs: Sequence[Doc], layers: Sequence[Floats3d]) -> None:
        """Hold each Doc's layers for the listeners waited for (replacing older ones), within the budget."""
        with self._lock:
            if not self._readers:
                return
            for doc, doc_layers in zip(docs, layers):
                self._drop(id(doc))
                self._entries[id(doc)] = _Entry(
                    weakref.ref(doc), doc_layers, token_spans(doc), self._batch, set(self._readers)
                )
                self._nbytes += doc_layers.nbytes
            while self._nbytes > self.max_bytes:
                self._drop(next(iter(self._entries)))

    # --- the listeners' side ---

    def take(self, doc: Doc, reader: int) -> Optional[Floats3d]:
        """``doc``'s layers for the listener node with id ``reader``, if they are here and fit its tokens now (a
        component may have merged or split tokens since). The reader is waited for from now on."""
        with self._lock:
            self._readers.add(reader)
            entry = self._entries.get(id(doc))
            if entry is None or entry.doc() is not doc:
                expired, late = self._expired.pop(id(doc), (None, 0))
                if expired is not None and expired() is doc:
                    self._keep = min(MAX_KEEP, max(self._keep, self._batch - late + 1))
                return None
            self._taken(id(doc), reader)
        return entry.layers if np.array_equal(entry.spans, token_spans(doc)) else None

    def release(self, doc: Doc, reader: int) -> None:
        """The listener node with id ``reader`` got ``doc``'s layers another way (a training batch): stop waiting."""
        with self._lock:
            self._readers.add(reader)
            entry = self._entries.get(id(doc))
            if entry is not None and entry.doc() is doc:
                self._taken(id(doc), reader)

    def _taken(self, doc_id: int, reader: int) -> None:
        entry = self._entries[doc_id]
        entry.waiting.discard(reader)
        if not entry.waiting:
            self._drop(doc_id)

    def _drop(self, doc_id: int) -> None:
        entry = self._entries.pop(doc_id, None)
        if entry is not None:
            self._nbytes -= entry.layers.nbytes

    # Layers in flight and links are not state: a pickled or copied component starts with none and links its own.
    def __getstate__(self) -> Dict[str, Any]:
        return {"source": self.source, "max_bytes": self.max_bytes}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state.get("source"), state.get("max_bytes", 2**30))
