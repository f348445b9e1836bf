"""What the ``elmo`` component puts on Docs, and how Tokens, Spans and similarity read it.

- ``Doc._.elmo``: float32 numpy ``(len(doc), dim)``, the component's mix of the layers.
- ``Doc._.elmo_layers``: float32 numpy ``(n_layers + 1, len(doc), dim)`` (``store_layers``).
- ``Token._.elmo`` (its row) and ``Span._.elmo`` (the mean of its rows) are computed on access.

Both Doc values are plain numpy arrays in ``doc.user_data``, which srsly's msgpack writes
natively, so ``doc.to_bytes()`` and ``DocBin(store_user_data=True)`` keep them.

The similarity hooks (``vector_hooks``, on by default) make spaCy's ``.vector`` and ``.similarity`` read
``Doc._.elmo``. Hooks are functions, which spaCy drops whenever it rebuilds a Doc from bytes
(``nlp.pipe(n_process > 1)``, ``DocBin.get_docs``, ``Doc.from_bytes``); :func:`with_vector_hooks` puts them
back from the ``Doc._.elmo`` those keep. ``doc.tensor`` is no substitute: spaCy's own ``Token.similarity`` is
1.0 for two uses of the same word whatever their vectors, and ``DocBin`` does not keep the tensor.

The layers listening components read are not kept on the Doc (see ``handoff.py``). ``set_tensor`` copies the vectors
to ``doc.tensor``, which :func:`refuse_tensor_clash` keeps from a pipeline whose ``tok2vec`` passes its vectors
there.
"""
import multiprocessing
from typing import Iterable, Iterator, Optional, Sequence, TypeVar, Union, overload

import numpy as np
from spacy.language import Language, _apply_pipes
from spacy.pipeline import Tok2Vec
from spacy.pipeline.tok2vec import Tok2VecListener
from spacy.tokens import Doc, Span, Token
from thinc.api import Model
from thinc.types import Floats1d

from ..errors import ElmoPipelineError, ElmoSettingsError


def install_extensions() -> None:
    """Register the ``._.elmo`` / ``._.elmo_layers`` attributes (once; existing ones are left alone)."""
    if not Doc.has_extension("elmo"):
        Doc.set_extension("elmo", default=None)
    if not Doc.has_extension("elmo_layers"):
        Doc.set_extension("elmo_layers", default=None)
    if not Token.has_extension("elmo"):
        Token.set_extension("elmo", getter=token_elmo)
    if not Span.has_extension("elmo"):
        Span.set_extension("elmo", getter=span_elmo)


def token_elmo(token: Token) -> Optional[Floats1d]:
    """The token's row of ``Doc._.elmo`` (None when the Doc has none)."""
    vectors = token.doc._.elmo
    return None if vectors is None else vectors[token.i]


def span_elmo(span: Span) -> Optional[Floats1d]:
    """The mean of the span's rows of ``Doc._.elmo`` (zeros for an empty span, None when the Doc has none)."""
    vectors = span.doc._.elmo
    if vectors is None:
        return None
    if span.start == span.end:
        return np.zeros(vectors.shape[1], dtype=np.float32)
    return vectors[span.start : span.end].mean(axis=0)


def doc_elmo_mean(doc: Doc) -> Optional[Floats1d]:
    """The mean of all rows of ``Doc._.elmo``: the Doc's vector under the similarity hooks."""
    return span_elmo(doc[:])


VectorOwner = Union[Doc, Span, Token]


def _has_vector(obj: VectorOwner) -> bool:
    return obj.doc._.elmo is not None


def _vector_norm(obj: VectorOwner) -> float:
    return float(np.linalg.norm(obj.vector))


def cosine_similarity(obj: VectorOwner, other: VectorOwner) -> float:
    """Cosine of the two objects' vectors (0.0 when either is all zeros)."""
    a, b = np.asarray(obj.vector, dtype=np.float64), np.asarray(other.vector, dtype=np.float64)
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a.dot(b) / norm) if norm > 0 else 0.0


def install_vector_hooks(doc: Doc) -> Doc:
    """Make ``.vector``, ``.has_vector``, ``.vector_norm`` and ``.similarity`` of the Doc, its Spans
    and Tokens use ``Doc._.elmo`` (cosine similarity); returns the Doc. Hooks are not serialized with the Doc."""
    install_extensions()
    if doc._.elmo is None:
        raise ElmoPipelineError(
            "This Doc has no Doc._.elmo to take its vectors from: run it through a pipeline with the 'elmo' "
            "component (store_vectors = true), and keep Doc._.elmo when saving Docs (DocBin(store_user_data=True))"
        )
    doc.user_hooks.update(
        vector=doc_elmo_mean, has_vector=_has_vector, vector_norm=_vector_norm, similarity=cosine_similarity
    )
    doc.user_span_hooks.update(vector=span_elmo, has_vector=_has_vector, similarity=cosine_similarity)
    doc.user_token_hooks.update(
        vector=token_elmo, has_vector=_has_vector, vector_norm=_vector_norm, similarity=cosine_similarity
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


def refuse_tensor_clash(nlp: Language, name: str) -> None:
    """``set_tensor`` overwrites ``doc.tensor``, which the listeners of a ``tok2vec`` component read at prediction."""
    tok2vecs = [other for other, pipe in nlp.pipeline if isinstance(pipe, Tok2Vec)]
    for other, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        listens = isinstance(model, Model) and any(
            isinstance(node, Tok2VecListener) and (node.upstream_name in tok2vecs or (node.upstream_name == "*" and tok2vecs))
            for node in model.walk()
        )
        if listens:
            raise ElmoSettingsError(
                f"The {name!r} component has set_tensor = true, but {other!r} listens to a tok2vec component, which "
                f"passes it its vectors through doc.tensor: {name!r} would overwrite them. Set set_tensor = false "
                f"(Doc._.elmo holds the vectors), or give {other!r} its own tok2vec."
            )
