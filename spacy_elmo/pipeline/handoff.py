"""The layers of Docs on their way from the ``elmo`` component to its listeners, kept off the Docs.

At prediction the ``elmo`` component and its listening components see the same Docs, but in
separate ``pipe`` calls that may batch them differently, so the layers travel per Doc. They are
kept here, weakly keyed by the Doc, until every listener the component had when it annotated
the Doc has read them, and then released. Nothing is stored on the Doc itself, so a Doc holds
no layers, ``doc.to_bytes()`` has nothing it cannot save, and a Doc that is dropped before its
listeners ran takes its entry with it.
"""
import weakref
from typing import Any, Dict, Hashable, Iterable, Optional, Set, Tuple

from ..errors import LayersAlreadyReadError

from spacy.tokens import Doc
from thinc.types import Floats3d


class LayerHandoff:
    """Per Doc, its layers and the listeners that have yet to read them."""

    def __init__(self) -> None:
        self._pending: "weakref.WeakKeyDictionary[Doc, Tuple[Floats3d, Set[Hashable]]]" = weakref.WeakKeyDictionary()
        self._read: "weakref.WeakKeyDictionary[Doc, Set[Hashable]]" = weakref.WeakKeyDictionary()

    def __len__(self) -> int:
        return len(self._pending)

    def put(self, doc: Doc, layers: Floats3d, readers: Iterable[Hashable]) -> None:
        """Hold ``layers`` for ``doc`` until each of ``readers`` has taken them (replacing older ones)."""
        waiting = set(readers)
        self._read.pop(doc, None)
        if waiting:
            self._pending[doc] = (layers, waiting)
        else:
            self._pending.pop(doc, None)

    def take(self, doc: Doc, reader: Hashable) -> Optional[Floats3d]:
        """``doc``'s layers for ``reader`` (once), released when no reader waits for them any more.

        None when they were never put here for this reader, or when the Doc's tokens changed
        since (e.g. a component merged tokens), so that they no longer belong to it. A second
        read raises :class:`LayersAlreadyReadError` rather than let the listener go on without them.
        """
        if reader in self._read.get(doc, ()):
            raise LayersAlreadyReadError(
                "This listening component already read the ELMo layers of this Doc, and they were released: "
                "run the Doc through the 'elmo' component again (e.g. nlp(doc) rather than one component) "
                "before the listening component reads it a second time"
            )
        layers = self.release(doc, reader)
        if layers is None:
            return None
        self._read.setdefault(doc, set()).add(reader)
        return layers if layers.shape[1] == len(doc) else None

    def release(self, doc: Doc, reader: Hashable) -> Optional[Floats3d]:
        """Stop holding ``doc``'s layers for ``reader`` (they go when no reader waits); the layers, if there were any."""
        entry = self._pending.get(doc)
        if entry is None or reader not in entry[1]:
            return None
        layers, waiting = entry
        waiting.discard(reader)
        if not waiting:
            del self._pending[doc]
        return layers

    def clear(self) -> None:
        self._pending.clear()
        self._read.clear()

    # Layers in flight are not state: a pickled or copied component starts with none.
    def __getstate__(self) -> Dict[str, Any]:
        return {}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__()
