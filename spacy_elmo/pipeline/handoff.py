"""The layers of Docs on their way from the ``elmo`` component to its listening components at prediction, kept off the
Docs.

The component and its listeners see the same Docs in separate ``pipe`` calls, so the layers travel per Doc object:
the component puts each Doc's layers here, and a listener takes them while they are here, as often as it likes. They
are given only to that Doc object, and only while its tokens are those the biLM saw. Nothing here is the only copy of
anything: a listener that finds no layers for a Doc the component annotated runs the biLM again, and says so
(``listener.py``).

All the policy is in :class:`LayerHandoff`:

- Who is waited for: the listeners spaCy linked to the component, and any listener that reads here. A Doc's layers
  go once every listener waited for has taken them.
- How long: until the component starts its next batch in the same thread. spaCy's ``nlp.pipe`` and ``nlp(text)``
  run every component on a batch before the component first in line makes the next one (with the same
  ``batch_size``), in the thread that asked; so a listener that has not read by then is not running
  (``select_pipes``, ``nlp.pipe(disable=...)``, ``disable_pipe``) and is not waited for until it reads again. When
  no listener is waited for, the component computes no layers.
- How much: at most ``max_bytes`` of layers, the oldest let go first.
"""
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Set

import numpy as np
from spacy.tokens import Doc
from thinc.types import Floats3d

from .doc_rows import token_table


@dataclass
class _Held:
    doc: "weakref.ReferenceType[Doc]"
    layers: Floats3d
    tokens: np.ndarray  # the tokens the layers are for (token_table)
    thread: int  # the thread whose batch made them
    waiting: Set[int]  # ids of the listener nodes yet to take them


class LayerHandoff:
    """Per Doc, its layers and the listeners they wait for (see the module's docstring); ``source`` is the biLM model
    that made them, ``max_bytes`` the budget. Safe to use from several threads."""

    def __init__(self, source: Any = None, max_bytes: int = 2**30) -> None:
        self.source = source
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._held: "OrderedDict[int, _Held]" = OrderedDict()  # by id(doc), oldest first
        self._readers: Set[int] = set()

    def __len__(self) -> int:
        """The number of Docs whose layers are held here."""
        return len(self._held)

    @property
    def nbytes(self) -> int:
        """The bytes of layers held here."""
        return sum(held.layers.nbytes for held in list(self._held.values()))

    # --- who reads ---

    def link(self, reader: int) -> None:
        """The listener node with id ``reader`` listens: wait for it."""
        with self._lock:
            self._readers.add(reader)

    def unlink(self, reader: int) -> None:
        """The listener node with id ``reader`` listens no more."""
        with self._lock:
            self._readers.discard(reader)
            for doc_id in [doc_id for doc_id, held in self._held.items() if reader in held.waiting]:
                self._taken(doc_id, reader)

    def relink(self) -> None:
        """spaCy links the pipeline again (and will :meth:`link` the listeners of its enabled components)."""
        with self._lock:
            self._readers.clear()

    # --- the component's side ---

    def begin_batch(self) -> bool:
        """The component starts a batch in this thread: let go of what this thread's last batch left unread (its
        readers are not running) and of the layers of Docs gone; whether any listener is waited for."""
        thread = threading.get_ident()
        with self._lock:
            for doc_id, held in list(self._held.items()):
                alive = held.doc() is not None
                if held.thread == thread or not alive:
                    del self._held[doc_id]
                    if alive:
                        self._readers -= held.waiting
            return bool(self._readers)

    def put(self, docs: Sequence[Doc], layers: Sequence[Floats3d]) -> None:
        """Hold each Doc's layers for the listeners waited for (replacing older ones), within the budget."""
        thread = threading.get_ident()
        with self._lock:
            if not self._readers:
                return
            for doc, doc_layers in zip(docs, layers):
                self._held.pop(id(doc), None)
                self._held[id(doc)] = _Held(weakref.ref(doc), doc_layers, token_table(doc), thread, set(self._readers))
            total = self.nbytes
            while total > self.max_bytes:
                total -= self._held.popitem(last=False)[1].layers.nbytes

    # --- the listeners' side ---

    def take(self, doc: Doc, reader: int) -> Optional[Floats3d]:
        """``doc``'s layers for the listener node with id ``reader``, if they are here and its tokens are those they
        were made for (a component may have merged or split tokens since). The reader is waited for from now on."""
        with self._lock:
            self._readers.add(reader)
            held = self._held.get(id(doc))
            if held is None or held.doc() is not doc:
                return None
            self._taken(id(doc), reader)
        return held.layers if np.array_equal(held.tokens, token_table(doc)) else None

    def _taken(self, doc_id: int, reader: int) -> None:
        held = self._held[doc_id]
        held.waiting.discard(reader)
        if not held.waiting:
            del self._held[doc_id]

    # Layers in flight and links are not state: a pickled or copied component starts with none and links its own.
    def __getstate__(self) -> Dict[str, Any]:
        return {"source": self.source, "max_bytes": self.max_bytes}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state.get("source"), state.get("max_bytes", 2**30))

