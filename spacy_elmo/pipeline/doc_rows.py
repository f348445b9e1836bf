"""Per-token rows that the ``elmo`` component leaves on a Doc, where spaCy itself carries them.

In memory the rows live in ``doc.tensor``: the one per-token store that spaCy keeps with its tokens in every flow
(``Span.as_doc`` slices it, ``Doc.from_docs`` stacks it, the retokenizer gives a merged token its last row and the
pieces of a split token zero rows; ``copy``, pickle and ``to_bytes`` keep it). ``elmo`` adds its block of columns
after those of the components before it, as ``Doc.extend_tensor`` does::

    [ earlier columns | vectors (width) | layers (n_layers * width) | mark ]

The mark column holds, in each row ``elmo`` wrote, a code of the block's layout (:class:`Block`); a row without it (a
piece of a split token) has no row of its own. So every token reads the row spaCy carried to it: nothing is matched.

``DocBin`` drops the tensor, so each annotation also leaves a record in ``doc.user_data`` (views of the same memory
when the tensor holds the rows, or the only copy with ``set_tensor = false``): under a span-form key of its own
(``("._.", "elmo_rows/<id>", 0, len(doc.text))``) with the text and characters of the tokens it describes. A record
is read only where the tensor holds no block, and only where it describes the Doc's tokens exactly: the Doc's only
record, the whole text, every token's characters and text. A whole Doc read back from ``DocBin`` is such a Doc; a
piece or a joined Doc never is (spaCy copies a record whole into every piece, and moves it when pieces are joined).
"""
import os
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np
from spacy.attrs import IDX, LENGTH, ORTH
from spacy.tokens import Doc, Token
from thinc.api import to_numpy

VECTORS, LAYERS = "vectors", "layers"  # the kinds of rows; layers are (n_layers, n_tokens, width)
RECORD = "elmo_rows"  # the start of a record's name in its user_data key
SAVED_BY_0_2 = {VECTORS: "elmo", LAYERS: "elmo_layers"}  # the Doc attributes spacy-elmo 0.2 saved the rows as
MARK_BASE = 2**23  # marks are -(MARK_BASE + code): integers that float32 holds exactly and no biLM output reaches
SPARE_COLUMNS = 1  # the mark's: vectors made as the first columns of an array this much wider become the tensor


class Block(NamedTuple):
    """The layout of ``elmo``'s columns at the end of ``doc.tensor``: vectors (if ``vectors``), ``n_layers`` layers,
    each ``width`` wide, then the mark column."""

    width: int
    vectors: bool
    n_layers: int

    @property
    def columns(self) -> int:
        return (self.vectors + self.n_layers) * self.width + 1

    @property
    def mark(self) -> float:
        return -float(MARK_BASE + (self.width * 32 + self.n_layers) * 2 + self.vectors)


class Rows(NamedTuple):
    """One kind of rows for the Doc's tokens (zeros where a token has none) and which tokens have one."""

    rows: np.ndarray
    present: np.ndarray  # bool, one per token


def put_rows(doc: Doc, vectors: Optional[np.ndarray], layers: Optional[np.ndarray], in_tensor: bool) -> None:
    """Leave an annotation's rows on the Doc (None: not kept): in ``doc.tensor`` (``in_tensor``, replacing the block of
    an earlier annotation, keeping the columns of other components) and in a record in ``doc.user_data`` that
    replaces earlier ones. A record with no rows still says that ``elmo`` ran on the Doc."""
    for key in _record_keys(doc):
        del doc.user_data[key]
    kept = vectors if vectors is not None else layers
    if in_tensor and kept is not None:
        block = Block(kept.shape[-1], vectors is not None, 0 if layers is None else len(layers))
        vectors, layers = _into_tensor(doc, block, vectors, layers)
    record: Dict[str, Any] = {kind: rows for kind, rows in ((VECTORS, vectors), (LAYERS, layers)) if rows is not None}
    if record:
        record["tokens"] = token_table(doc)
    doc.user_data[("._.", f"{RECORD}/{os.urandom(8).hex()}", 0, _text_length(doc))] = record


def _into_tensor(
    doc: Doc, block: Block, vectors: Optional[np.ndarray], layers: Optional[np.ndarray]
) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """Write the block after the tensor's other columns; the rows as views of the new tensor. Vectors alone that
    are the first columns of an array of the block's width (``SPARE_COLUMNS``) become the tensor, uncopied."""
    earlier = _earlier_columns(doc)
    n, start = len(doc), earlier.shape[1]
    base = getattr(vectors, "base", None)
    if not start and layers is None and _first_columns_of(vectors, base, block.columns):
        base[:, -1] = block.mark
        doc.tensor = base
        return vectors, None
    tensor = np.empty((n, start + block.columns), dtype=np.float32)
    tensor[:, :start] = earlier
    if vectors is not None:
        tensor[:, start : start + block.width] = vectors
        vectors = tensor[:, start : start + block.width]
        start += block.width
    if layers is not None:
        rows = tensor[:, start:-1].reshape(n, block.n_layers, block.width)
        rows[...] = layers.transpose(1, 0, 2)
        layers = rows.transpose(1, 0, 2)
    tensor[:, -1] = block.mark
    doc.tensor = tensor
    return vectors, layers


def _first_columns_of(vectors: Any, base: Any, columns: int) -> bool:
    return (
        isinstance(base, np.ndarray) and base.shape == (len(vectors), columns) and base.flags.c_contiguous
        and vectors.ctypes.data == base.ctypes.data and vectors.strides == base.strides
    )


def _earlier_columns(doc: Doc) -> np.ndarray:
    """The tensor's columns that are not an ``elmo`` block, one row per token (none if it has no such rows)."""
    tensor, n = doc.tensor, len(doc)
    if getattr(tensor, "ndim", 0) != 2 or tensor.shape[0] < n:
        return np.zeros((n, 0), dtype=np.float32)
    tensor = to_numpy(tensor[:n])
    found = _tensor_block(tensor)
    return tensor if found is None else tensor[:, : tensor.shape[1] - found[0].columns]


def _tensor_block(tensor: Any) -> Optional[Tuple[Block, float]]:
    """The block of a tensor's rows (of the first row that has a mark) and its mark; None if no row has one."""
    if not isinstance(tensor, np.ndarray) or tensor.ndim != 2 or not tensor.size:
        return None
    marked = np.flatnonzero(tensor[:, -1] <= -MARK_BASE)
    if not len(marked):
        return None
    mark = float(tensor[marked[0], -1])
    block = _block_of(mark)
    return None if block is None or block.columns > tensor.shape[1] else (block, mark)


def _block_of(mark: float) -> Optional[Block]:
    code = -mark - MARK_BASE
    if not (0 <= code < MARK_BASE and code == int(code)):
        return None
    code = int(code)
    return Block(width=code >> 6, vectors=bool(code & 1), n_layers=(code >> 1) & 31)


def doc_rows(doc: Doc, kind: str) -> Optional[Rows]:
    """The rows of ``kind`` of the Doc's tokens: from ``doc.tensor`` where it holds an ``elmo`` block, else from a
    record that describes the Doc's tokens exactly; None if neither holds rows of that kind."""
    tensor = doc.tensor[: len(doc)] if getattr(doc.tensor, "ndim", 0) == 2 else None
    found = _tensor_block(tensor)
    if found is None:
        recorded = _recorded(doc, kind)
        return None if recorded is None else Rows(recorded, np.ones(len(doc), dtype=bool))
    block, mark = found
    present = tensor[:, -1] == mark
    rows = _block_rows(tensor, block, kind)
    if rows is None:
        return None
    if not present.all():  # rows of another block (a Doc joined from two layouts): not of this kind
        rows = np.array(rows)
        rows[(slice(None), ~present) if kind == LAYERS else ~present] = 0
    return Rows(rows, present)


def _block_rows(tensor: np.ndarray, block: Block, kind: str) -> Optional[np.ndarray]:
    start = tensor.shape[1] - block.columns
    if kind == VECTORS:
        return tensor[:, start : start + block.width] if block.vectors else None
    if not block.n_layers:
        return None
    start += block.vectors * block.width
    return tensor[:, start:-1].reshape(len(tensor), block.n_layers, block.width).transpose(1, 0, 2)


def token_vector(token: Token) -> Optional[np.ndarray]:
    """The token's vector, None when it has none: a lookup of its row while it has the mark of the Doc's first row."""
    tensor, i = token.doc.tensor, token.i
    if getattr(tensor, "ndim", 0) == 2 and tensor.shape[0] > i and tensor.size and tensor[i, -1] == tensor[0, -1] <= -MARK_BASE:
        block = _block_of(float(tensor[i, -1]))
        if block is not None and block.columns <= tensor.shape[1]:
            row = _block_rows(tensor[i : i + 1], block, VECTORS)
            return None if row is None else row[0]
    found = doc_rows(token.doc, VECTORS)
    return found.rows[i] if found is not None and found.present[i] else None


def annotated(doc: Doc) -> bool:
    """Whether an ``elmo`` component ran on the Doc, or on the Doc it was copied, cut or joined from."""
    return bool(_record_keys(doc)) or _tensor_block(doc.tensor) is not None


def token_table(doc: Doc) -> np.ndarray:
    """Each token's text (``ORTH``), first character and length: equal for two Docs only where their tokens are."""
    return doc.to_array([ORTH, IDX, LENGTH])


def _recorded(doc: Doc, kind: str) -> Optional[np.ndarray]:
    """The rows of ``kind`` of the Doc's only record, where it describes the Doc's tokens exactly."""
    keys = _record_keys(doc)
    if not keys:  # a Doc saved by spacy-elmo 0.2 (DocBin, to_bytes): its rows, while they fit its tokens
        saved = doc.user_data.get(("._.", SAVED_BY_0_2[kind], None, None))
        return saved if isinstance(saved, np.ndarray) and saved.shape[kind == LAYERS] == len(doc) else None
    if len(keys) != 1 or keys[0][2:] != (0, _text_length(doc)):
        return None
    record = doc.user_data[keys[0]]
    rows = record.get(kind)
    return rows if rows is not None and np.array_equal(record.get("tokens"), token_table(doc)) else None


def _record_keys(doc: Doc) -> List[Tuple]:
    """The user_data keys of the Doc's records."""
    return [
        key for key in doc.user_data
        if isinstance(key, tuple) and len(key) == 4 and key[0] == "._." and str(key[1]).startswith(RECORD)
    ]


def _text_length(doc: Doc) -> int:
    """``len(doc.text)`` without making the text."""
    return doc[-1].idx + len(doc[-1].text_with_ws) if len(doc) else 0
