"""The layers of Docs on their way from the ``elmo`` component to its listeners, kept off the Docs.

At prediction the ``elmo`` component and its listening components see the same Docs, but in
separate ``pipe`` calls that may batch them differently, so the layers travel per Doc. They are
kept here, weakly keyed by the Doc, until every listener that waits for them has read them, and then
released. Nothing is stored on the Doc itself, so a Doc holds no layers, ``doc.to_bytes()`` has
nothing it cannot save, and a Doc that is dropped before its listeners ran takes its entry with it.

Who waits: the listeners spaCy registered with the component (its listener map), and those that
joined by reading. spaCy registers listeners over the enabled components only, and enabling a
component (``enable_pipe``, the end of ``select_pipes``) registers nothing. So a listener that is
linked to the component but not registered may be a disabled component's, which never reads, or an
enabled one's, which will: for those the layers of the latest batch stay within reach (and go with
the next batch), and a listener that reads there joins the readers of every later batch, until spaCy
links the pipeline again.
"""
import weakref
from typing import Any, Dict, Hashable, Iterable, List, Optional, Sequence, Set, Tuple

from spacy.tokens import Doc
from thinc.types import Floats3d

ALREADY_READ = (
    "This listening component already read the ELMo layers of this Doc, and they were released: run the Doc through "
    "the 'elmo' component again (e.g. nlp(doc) rather than one component) before the listening component reads it a "
    "second time"
)


class LayerHandoff:
    """Per Doc, its layers and the listeners that have yet to read them; ``source`` is the model that made them."""

    def __init__(self, source: Any = None) -> None:
        self.source = source
        self._pending: "weakref.WeakKeyDictionary[Doc, Tuple[Floats3d, Set[Hashable]]]" = weakref.WeakKeyDictionary()
        self._read: "weakref.WeakKeyDictionary[Doc, Set[Hashable]]" = weakref.WeakKeyDictionary()
        self._latest: "weakref.WeakKeyDictionary[Doc, Floats3d]" = weakref.WeakKeyDictionary()
        self._annotated: "weakref.WeakSet[Doc]" = weakref.WeakSet()
        self._linked: List[Hashable] = []
        self._joined: List[Hashable] = []
        self.has_run = False  # whether the component put any layers here (since this handoff was made)

    def __len__(self) -> int:
        """The number of Docs whose layers are held here."""
        return len(self._pending) + sum(1 for doc in self._latest.keys() if doc not in self._pending)

    # --- who reads ---

    def link(self, reader: Hashable) -> None:
        """``reader`` listens to the component (it may read even when it is not among a batch's readers)."""
        if all(r is not reader for r in self._linked):
            self._linked.append(reader)

    def unlink(self, reader: Hashable) -> None:
        self._linked = [r for r in self._linked if r is not reader]
        self._joined = [r for r in self._joined if r is not reader]

    def has_readers(self) -> bool:
        """Whether any listener is linked to the component (registered or not), so that layers are worth keeping."""
        return bool(self._linked)

    def forget_joined(self) -> None:
        """spaCy links the pipeline again: the readers are the registered ones, until others read."""
        self._joined = []

    # --- the component's side ---

    def put(self, docs: Sequence[Doc], layers: Sequence[Floats3d], readers: Iterable[Hashable]) -> None:
        """Hold each Doc's layers until each of ``readers``, and of the listeners that joined, has taken them
        (replacing older ones); the batch stays within reach of the other linked listeners until the next one."""
        waiting = list(readers)
        waiting += [r for r in self._joined if all(r is not w for w in waiting)]
        others = any(all(r is not w for w in waiting) for r in self._linked)
        self._latest.clear()
        self.has_run = True
        for doc, doc_layers in zip(docs, layers):
            self._annotated.add(doc)
            self._read.pop(doc, None)
            if waiting:
                self._pending[doc] = (doc_layers, set(waiting))
            else:
                self._pending.pop(doc, None)
            if others:
                self._latest[doc] = doc_layers

    # --- the listeners' side ---

    def take(self, doc: Doc, reader: Hashable) -> Optional[Floats3d]:
        """``doc``'s layers for ``reader`` (once), released when no reader waits for them any more.

        A linked reader that was not waited for reads the latest batch and joins the readers of the next ones.
        None when no layers were put here for the Doc (or not since its tokens changed, e.g. a component merged
        tokens), or when ``reader`` read them already (:meth:`was_read`).
        """
        if self.was_read(doc, reader):
            return None
        layers = self.release(doc, reader)
        if layers is None:
            layers = self._latest.get(doc)
            if layers is None:
                return None
            self._join(reader)
        if layers.shape[1] != len(doc):
            return None
        self._read.setdefault(doc, set()).add(reader)
        return layers

    def was_read(self, doc: Doc, reader: Hashable) -> bool:
        """Whether ``reader`` took ``doc``'s layers since the component last put them here."""
        return reader in self._read.get(doc, ())

    def annotated(self, doc: Doc) -> bool:
        """Whether the component put layers here for ``doc`` (whether or not they are still kept)."""
        return doc in self._annotated

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

    def _join(self, reader: Hashable) -> None:
        if all(r is not reader for r in self._joined):
            self._joined.append(reader)

    def clear(self) -> None:
        self._pending.clear()
        self._read.clear()
        self._latest.clear()

    # Layers in flight and links are not state: a pickled or copied component starts with none and links its own.
    def __getstate__(self) -> Dict[str, Any]:
        return {"source": self.source}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state.get("source"))
