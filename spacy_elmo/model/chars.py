"""Byte-level character ids, exactly as the published ELMo models expect them.

A token is its UTF-8 bytes framed by begin/end-of-word markers and padded to ``max_chars`` ids;
every id is shifted by +1 so that 0 can mark a padding *token*. Sentence boundaries are tokens
of their own with fixed patterns, and the literal strings ``<S>`` and ``</S>`` map to them.
"""
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

# The markers past the 256 byte values, shifted by +1 as every id is.
BOS_CHAR, EOS_CHAR, BOW_CHAR, EOW_CHAR, PAD_CHAR = (marker + 1 for marker in range(256, 261))

BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"


def utf8(token: str) -> bytes:
    """``token`` as UTF-8. Lone surrogates (which Python strings can hold but UTF-8 cannot) are kept
    with the ``surrogatepass`` handler, so no token ever fails to encode."""
    return token.encode("utf-8", "surrogatepass")


def n_bytes(token: str) -> int:
    """Length of ``token`` in UTF-8 bytes, the unit of the model's token length limit."""
    return len(utf8(token))


def first_truncated(tokens: Iterable[str], max_chars: int) -> Optional[str]:
    """The first token longer than the ``max_chars - 2`` bytes the model reads, if any.

    The markers ``<S>``/``</S>`` are never cut, whatever their length.
    """
    limit = max_chars - 2
    # A code point is at most 4 bytes, so most tokens are ruled out without encoding them.
    too_long = (t for t in tokens if len(t) * 4 > limit and n_bytes(t) > limit and t not in (BOS_TOKEN, EOS_TOKEN))
    return next(too_long, None)


def token_to_ids(token: str, max_chars: int = 50) -> np.ndarray:
    """The ``max_chars`` character ids of one token: its bytes (:func:`utf8`, cut to ``max_chars - 2``), or a
    sentence boundary's marker, framed by the word markers."""
    marker = {BOS_TOKEN: BOS_CHAR, EOS_TOKEN: EOS_CHAR}.get(token)
    chars = [marker] if marker else np.frombuffer(utf8(token)[: max_chars - 2], dtype=np.uint8).astype(np.int64) + 1
    ids = np.full(max_chars, PAD_CHAR, dtype=np.int64)
    ids[0], ids[1 : len(chars) + 1], ids[len(chars) + 1] = BOW_CHAR, chars, EOW_CHAR
    return ids


def tokens_to_ids(tokens: Iterable[str], max_chars: int = 50) -> np.ndarray:
    """Character ids of several tokens, shape ``(n_tokens, max_chars)``."""
    rows = [token_to_ids(t, max_chars) for t in tokens]
    return np.stack(rows) if rows else np.zeros((0, max_chars), dtype=np.int64)


class TokenBatch:
    """A batch of sentences as indices into a table of its distinct tokens.

    The biLM's token layer runs once per distinct token (word types repeat a lot within a batch);
    ``index[b, t]`` says which row of that table sits at position ``t`` of sentence ``b``, with the
    begin/end-of-sentence tokens added at ``0`` and ``len + 1``. Positions past a sentence's end
    point at row ``len(types)``, which the model fills with zeros.
    """

    def __init__(self, sentences: Sequence[Sequence[str]]):
        table: Dict[str, int] = {BOS_TOKEN: 0, EOS_TOKEN: 1}
        self.lengths = np.array([len(s) + 2 for s in sentences], dtype=np.int64)
        width = int(self.lengths.max()) if len(sentences) else 2
        rows = [[0, *[table.setdefault(token, len(table)) for token in sentence], 1] for sentence in sentences]
        self.types: List[str] = list(table)
        self.index = np.full((len(sentences), width), len(self.types), dtype=np.int64)
        for b, row in enumerate(rows):
            self.index[b, : len(row)] = row

    @property
    def batch_size(self) -> int:
        return len(self.lengths)
