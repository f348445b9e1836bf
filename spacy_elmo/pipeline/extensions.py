"""What the ``elmo`` component puts on Docs, and how Tokens, Spans and similarity read it.

- ``Doc._.elmo``: float32 numpy ``(len(doc), dim)``, the component's mix of the layers.
- ``Doc._.elmo_layers``: float32 numpy ``(n_layers + 1, len(doc), dim)`` (``store_layers``).
- ``Token._.elmo`` (its row) and ``Span._.elmo`` (the mean of its rows).

All are read on access from the rows the component left in ``doc.tensor`` (``doc_rows.py``), which spaCy keeps with
the tokens through retokenizing, ``Doc.copy()``, ``Span.as_doc()``, ``Doc.from_docs``, pickle and
``doc.to_bytes()``; a whole Doc also keeps them through ``DocBin(store_user_data=True)``. ``set_tensor = false``
keeps them in ``doc.user_data`` only, for whole Docs.

The similarity hooks (``vector_hooks``, on by default) make spaCy's ``.vector`` and ``.similarity`` read
``Doc._.elmo`` (spaCy's own ``Token.similarity`` is 1.0 for two uses of the same word whatever their vectors). Hooks
are functions, which spaCy drops whenever it rebuilds a Doc from bytes (``nlp.pipe(n_process > 1)``,
``DocBin.get_docs``, ``Doc.from_bytes``) or joins Docs; :func:`with_vector_hooks` puts them back.
"""
import multiprocessing
from typing import Any, Iterable, Iterator, Optional, Sequence, TypeVar, Union, overload

import numpy as np
from spacy.language import _apply_pipes
from spacy.pipeline import Tok2Vec
from spacy.pipeline.tok2vec import Tok2VecListener
from spacy.tokens import Doc, Span, Token
from thinc.api import Model
from thinc.types import Floats1d, Floats2d, Floats3d

from ..errors import ElmoPipelineError
from .doc_rows import LAYERS, VECTORS, Rows, doc_rows, token_vector


def install_extensions() -> None:
    """Register the ``._.elmo`` / ``._.elmo_layers`` attributes (once; existing ones are left alone)."""
    for owner, name, getter in [(Doc, "elmo", doc_elmo), (Doc, "elmo_layers", doc_elmo_layers),
                                (Token, "elmo", token_vector), (Span, "elmo", span_elmo)]:
        if not owner.has_extension(name):
            owner.set_extension(name, getter=getter)


def doc_elmo(doc: Doc) -> Optional[Floats2d]:
    """``(len(doc), dim)``: each token's vector (zeros for a token with none), None when no token has one."""
    found = doc_rows(doc, VECTORS)
    return None if found is None else found.rows


def doc_elmo_layers(doc: Doc) -> Optional[Floats3d]:
    """``(n_layers + 1, len(doc), dim)`` as :func:`doc_elmo`, for the layers ``store_layers`` keeps."""
    found = doc_rows(doc, LAYERS)
    return None if found is None else found.rows


def span_elmo(span: Span) -> Optional[Floats1d]:
    """The mean of the span's token vectors (zeros for an empty span or a token with none), None when the Doc has
    none."""
    found = doc_rows(span.doc, VECTORS)
    return None if found is None else _mean_rows(found.rows, span.start, span.end)


def _mean_rows(rows: Floats2d, start: int, end: int) -> Floats1d:
    return rows[start:end].mean(axis=0) if end > start else np.zeros(rows.shape[1], dtype=np.float32)


class VectorHooks:
    """spaCy's ``.vector``, ``.has_vector``, ``.vector_norm`` and ``.similarity`` of a Doc, its Spans and Tokens, read
    from their ELMo vectors: zeros (and ``has_vector`` False) where a token has none (a piece of a split token, a
    Doc without rows that kept the hooks), as spaCy does, of the right width. Cosine similarity (0.0 when either
    vector is all zeros)."""

    def __init__(self, width: int):
        self.width = width

    def _rows(self, doc: Doc) -> Rows:
        found = doc_rows(doc, VECTORS)
        if found is None:
            return Rows(np.zeros((len(doc), self.width), dtype=np.float32), np.zeros(len(doc), dtype=bool))
        return found

    def token_vector(self, token: Token) -> Floats1d:
        vector = token_vector(token)
        return np.zeros(self.width, dtype=np.float32) if vector is None else vector

    def token_has_vector(self, token: Token) -> bool:
        return token_vector(token) is not None

    def span_vector(self, span: Span) -> Floats1d:
        return _mean_rows(self._rows(span.doc).rows, span.start, span.end)

    def span_has_vector(self, span: Span) -> bool:
        return bool(self._rows(span.doc).present[span.start : span.end].any())

    def doc_vector(self, doc: Doc) -> Floats1d:
        return self.span_vector(doc[:])

    def doc_has_vector(self, doc: Doc) -> bool:
        return self.span_has_vector(doc[:])

    @staticmethod
    def vector_norm(obj: "VectorOwner") -> float:
        return float(np.linalg.norm(obj.vector))

    @staticmethod
    def similarity(obj: "VectorOwner", other: "VectorOwner") -> float:
        a, b = np.asarray(obj.vector, dtype=np.float64), np.asarray(other.vector, dtype=np.float64)
        norm = np.linalg.norm(a) * np.linalg.norm(b)
        return float(a.dot(b) / norm) if norm > 0 else 0.0


VectorOwner = Union[Doc, Span, Token]


def install_vector_hooks(doc: Doc) -> Doc:
    """Make ``.vector``, ``.has_vector``, ``.vector_norm`` and ``.similarity`` of the Doc, its Spans
    and Tokens use its ELMo vectors (:class:`VectorHooks`); returns the Doc. Hooks are not serialized with the Doc."""
    install_extensions()
    vectors = doc._.elmo
    if vectors is None:
        raise ElmoPipelineError(
            "This Doc has no Doc._.elmo to take its vectors from: run it through a pipeline with the 'elmo' "
            "component (store_vectors = true), and keep Doc._.elmo when saving Docs (DocBin(store_user_data=True))"
        )
    return set_vector_hooks(doc, vectors.shape[1])


def set_vector_hooks(doc: Doc, width: int) -> Doc:
    """:func:`install_vector_hooks` for vectors of ``width`` (known to the caller)."""
    hooks = VectorHooks(width)
    doc.user_hooks.update(
        vector=hooks.doc_vector, has_vector=hooks.doc_has_vector, vector_norm=hooks.vector_norm,
        similarity=hooks.similarity,
    )
    doc.user_span_hooks.update(vector=hooks.span_vector, has_vector=hooks.span_has_vector, similarity=hooks.similarity)
    doc.user_token_hooks.update(
        vector=hooks.token_vector, has_vector=hooks.token_has_vector, vector_norm=hooks.vector_norm,
        similarity=hooks.similarity,
    )
    return doc


# A sequence of Docs comes back as itself, typed as given (a list stays a list).
DocSequence = TypeVar("DocSequence", bound=Sequence[Doc])


@overload  # a sequence is an iterable too: this first match wins, as intended
def with_vector_hooks(docs: DocSequence) -> DocSequence: ...  # type: ignore[overload-overlap]


@overload
def with_vector_hooks(docs: Iterable[Doc]) -> Iterator[Doc]: ...


def with_vector_hooks(docs: Iterable[Doc]) -> Iterable[Doc]:
    """The Docs with the similarity hooks put back, for Docs that spaCy rebuilt from bytes, which drops them.

    A list (any sequence) is changed in place and returned, so the hooks are back whether or not the result is
    used: ``with_vector_hooks(docs)``. Any other iterable, such as ``nlp.pipe(texts, n_process=2)`` or
    ``doc_bin.get_docs(nlp.vocab)``, is wrapped: each Doc gets its hooks as it is read, so the stream stays lazy
    and only the Docs read have them.
    """
    if isinstance(docs, Sequence):
        for doc in docs:
            install_vector_hooks(doc)
        return docs
    return (install_vector_hooks(doc) for doc in docs)


def in_spacy_worker() -> bool:
    """Whether this process is a worker of ``nlp.pipe(n_process=...)``: spaCy starts its workers with
    ``spacy.language._apply_pipes`` as their target, which tells them from other child processes.

    Private on both sides (spaCy's ``_apply_pipes``, ``multiprocessing.Process._target``): spaCy 3.8 tells a
    component nothing about the process it runs in, and a worker looks like any child process otherwise. If
    either changes, this is False in workers: they install similarity hooks that spaCy cannot send back (W109).
    tests/robustness/test_processes.py fails then.
    """
    return getattr(multiprocessing.current_process(), "_target", None) is _apply_pipes


def tensor_use(component: Any) -> Optional[str]:
    """How ``component`` uses ``doc.tensor`` as another component's output: spaCy's ``tok2vec`` replaces it, and a
    component that listens to one reads it whole at prediction. None if it does neither."""
    if isinstance(component, Tok2Vec):
        return "replaces doc.tensor"
    model = getattr(component, "model", None)
    if isinstance(model, Model) and any(isinstance(node, Tok2VecListener) for node in model.walk()):
        return "reads doc.tensor (it listens to a tok2vec component)"
    return None
