"""Per-token rows that the ``elmo`` component leaves on a Doc, kept so that they follow the Doc wherever spaCy takes it.

One record per annotation, in ``doc.user_data`` under a key of the form spaCy gives a span's ``._`` value,
``("._.", "elmo_rows", start_char, end_char)``: the characters of each token as the biLM saw it, its text (as
spaCy's hash, its ``ORTH``), and its rows (vectors and/or layers). spaCy moves such keys by the right character offset in ``Span.as_doc(copy_user_data=True)``
and ``Doc.from_docs``, copies them with ``Doc.copy()``, and saves them in ``doc.to_bytes()`` and
``DocBin(store_user_data=True)``; so the rows go wherever a ``._`` value goes.

Rows are read through the Doc's current tokens (:func:`aligned_rows`): a token reads the mean of the rows of the
tokens, as the biLM saw them, that share a character with it. A token the biLM saw reads its own row; a merged token
(``merge_entities``, ``doc.retokenize()``) the mean of the rows it was made of; each piece of a split token the row of
the token it came from; a token with no such row has none. The record itself is never changed, so a Doc that is
retokenized back reads its original rows again.
"""
import threading
import weakref
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np
from spacy.attrs import IDX, LENGTH, ORTH
from spacy.strings import get_string_id
from spacy.tokens import Doc, Token

ROWS_KEY = "elmo_rows"  # the name in the record's user_data key
VECTORS, LAYERS = "vectors", "layers"  # the kinds of rows a record may hold; layers keep their token axis second
TOKEN_AXIS = {VECTORS: 0, LAYERS: 1}
SAVED_BY_0_2 = {VECTORS: "elmo", LAYERS: "elmo_layers"}  # the Doc attributes spacy-elmo 0.2 saved the rows as


class Aligned(NamedTuple):
    """Rows of one kind for the Doc's current tokens: ``rows`` (zeros where a token has none) and ``present``."""

    rows: np.ndarray
    present: np.ndarray  # bool, one per token


def token_spans(doc: Doc) -> np.ndarray:
    """``(len(doc), 2)`` int64: each token's first character and the character after its last."""
    spans = doc.to_array([IDX, LENGTH]).astype(np.int64)
    spans[:, 1] += spans[:, 0]
    return spans


def put_rows(doc: Doc, rows: Dict[str, Optional[np.ndarray]]) -> None:
    """Record ``rows`` (by kind; None: not kept) for the Doc's current tokens, replacing the records of earlier
    annotations; a record with no rows still says that the component annotated the Doc."""
    for key in _record_keys(doc) if doc.user_data else ():
        del doc.user_data[key]
    record: Dict[str, Any] = {kind: value for kind, value in rows.items() if value is not None}
    if record:
        record.update(spans=token_spans(doc), orths=doc.to_array(ORTH))
    doc.user_data[_whole_key(doc)] = record


def _whole_key(doc: Doc) -> Tuple[str, str, int, int]:
    """The key of a record of the whole Doc as it is: ``len(doc.text)`` without making the text."""
    return ("._.", ROWS_KEY, 0, doc[-1].idx + len(doc[-1].text_with_ws) if len(doc) else 0)


def annotated(doc: Doc) -> bool:
    """Whether an ``elmo`` component annotated the Doc (or the Doc it was copied, cut or joined from)."""
    return bool(_record_keys(doc))


def exact_rows(doc: Doc, kind: str) -> Optional[np.ndarray]:
    """The rows of ``kind`` recorded for exactly the Doc's current tokens (one record, not retokenized), else None."""
    return _as_recorded(doc, kind, token_spans(doc))


def _as_recorded(doc: Doc, kind: str, spans: np.ndarray) -> Optional[np.ndarray]:
    keys = _record_keys(doc)
    if not keys:  # a Doc saved by spacy-elmo 0.2 (DocBin, to_bytes): its rows, while they fit its tokens
        saved = doc.user_data.get(("._.", SAVED_BY_0_2[kind], None, None))
        return saved if isinstance(saved, np.ndarray) and saved.shape[TOKEN_AXIS[kind]] == len(doc) else None
    if len(keys) != 1:
        return None
    record = doc.user_data[keys[0]]
    rows = record.get(kind)
    if rows is None or not np.array_equal(record["spans"] + keys[0][2], spans):
        return None
    return rows if np.array_equal(record["orths"], doc.to_array(ORTH)) else None


def token_vector(token: Token) -> Optional[np.ndarray]:
    """The token's vector, None when it has none (:func:`aligned_rows`), without aligning the Doc while the token is
    the one the biLM saw at its place (same characters, same text, the Doc's only record): one token read costs a
    lookup, not a pass over the Doc."""
    doc, i = token.doc, token.i
    keys = _record_keys(doc)
    record = doc.user_data[keys[0]] if len(keys) == 1 and keys[0][2] == 0 else {}
    if VECTORS in record and i < len(record["spans"]) and record["orths"][i] == token.orth:
        start, end = record["spans"][i]
        if start == token.idx and end == token.idx + len(token):
            return record[VECTORS][i]
    found = aligned_rows(doc, VECTORS)
    return found.rows[i] if found is not None and found.present[i] else None


def aligned_rows(doc: Doc, kind: str) -> Optional[Aligned]:
    """The rows of ``kind`` for the Doc's current tokens (see the module's docstring), None if no record holds any.

    Computed once per tokenization of the Doc and kept while it lasts (a token's ``._.elmo`` costs a comparison of
    the Doc's token offsets, not an alignment).
    """
    spans = token_spans(doc)
    recorded = _as_recorded(doc, kind, spans)
    if recorded is not None:
        return Aligned(recorded, np.ones(len(spans), dtype=bool))
    records = tuple((key, doc.user_data[key]) for key in _record_keys(doc))
    signature = tuple((key, id(record)) for key, record in records)
    with _cache_lock:
        cached = _cache.get(doc, {}).get(kind)
    if cached is not None and cached[0] == signature and np.array_equal(cached[1], spans):
        return cached[2]
    found = _align(doc.text, spans, [(key[2], record) for key, record in records if kind in record], kind)
    with _cache_lock:
        _cache.setdefault(doc, {})[kind] = (signature, spans, found)
    return found


_cache: "weakref.WeakKeyDictionary[Doc, Dict[str, Tuple[Any, np.ndarray, Optional[Aligned]]]]" = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def _record_keys(doc: Doc) -> List[Tuple]:
    """The keys of the Doc's records, by their first character."""
    keys = [key for key in doc.user_data if isinstance(key, tuple) and len(key) == 4 and key[:2] == ("._.", ROWS_KEY)]
    return sorted(keys, key=lambda key: key[2])


def _align(text: str, spans: np.ndarray, records: List[Tuple[int, Dict[str, Any]]], kind: str) -> Optional[Aligned]:
    """Each current token's mean of the recorded rows that share a character with it (records at their offsets).

    A recorded row counts only where the Doc's text still holds its token's text: ``Span.as_doc(copy_user_data=True)``
    copies a record whole, so a Doc joined from such pieces by ``Doc.from_docs`` has rows of other pieces' tokens
    beside its own, at offsets where its text is another's. Rows recorded twice (pieces of one Doc) count once.
    """
    kept = [(offset, record, _fitting(text, offset, record)) for offset, record in records]
    if not any(fits.any() for _, _, fits in kept):
        return None
    axis = TOKEN_AXIS[kind]
    seen = np.concatenate([record["spans"][fits] + offset for offset, record, fits in kept])
    rows = np.concatenate([np.moveaxis(record[kind], axis, 0)[fits] for _, record, fits in kept])  # token axis first
    seen, unique = np.unique(seen, axis=0, return_index=True)  # by first character
    rows = rows[unique]
    first = np.searchsorted(seen[:, 1], spans[:, 0], side="right")  # the first seen token ending after its start
    last = np.searchsorted(seen[:, 0], spans[:, 1], side="left")  # past the last seen token starting before its end
    out = np.zeros((len(spans), *rows.shape[1:]), dtype=np.float32)
    for i, (lo, hi) in enumerate(zip(first, last)):
        if hi > lo:
            out[i] = rows[lo] if hi - lo == 1 else rows[lo:hi].mean(axis=0)
    return Aligned(np.ascontiguousarray(np.moveaxis(out, 0, axis)), last > first)


def _fitting(text: str, offset: int, record: Dict[str, Any]) -> np.ndarray:
    """Which of the record's tokens, at ``offset``, have their text at their place in ``text``."""
    places = (record["spans"] + offset).tolist()
    return np.array(
        [0 <= a and get_string_id(text[a:b]) == orth for (a, b), orth in zip(places, record["orths"].tolist())],
        dtype=bool,
    )
