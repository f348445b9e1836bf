"""The ids the token layer reads for each token: character ids, and word ids for models that have words.

AllenNLP's models read UTF-8 bytes (:mod:`.chars`). Models converted from ELMoForManyLangs read
characters from a table instead (``char_cnn.vocabulary`` in ``options.json``) and may add a word
vector looked up in a word table (``word_embedding``). For those, a token is cut to
``max_characters_per_token - 2`` characters (not bytes); its characters are framed by the table's
``begin_of_word`` and ``end_of_word`` entries and padded with ``padding``; characters and words
missing from the tables become ``unknown``. ``<S>``/``</S>`` (and the table's own sentence
markers) become the sentence-boundary entries, framed the same way. Every character id is the
table index plus one, so that id 0 stays the padding *token*, as in the byte layout.
"""
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from .options import ElmoOptions
from .chars import BOS_TOKEN, EOS_TOKEN, PAD_CHAR, tokens_to_ids


def _index(entries: Sequence[Optional[str]]) -> Dict[str, int]:
    """Entry -> position; a repeated entry keeps its last position (as ELMoForManyLangs' dict reading does)."""
    return {entry: i for i, entry in enumerate(entries) if entry is not None}


class TokenIds:
    """Maps distinct tokens to ``(char_ids (n, max_chars), word_ids (n,) or None)`` for one model."""

    def __init__(self, options: ElmoOptions):
        self.max_chars = options.max_characters_per_token
        self.vocabulary = options.char_vocabulary
        self.words = options.word_embedding
        if self.vocabulary is not None:
            table = self.vocabulary
            self.char_index = {c: i + 1 for c, i in _index(table["characters"]).items()}
            self.pad_char = self.char_index[table["padding"]]
            bos, eos = table["begin_of_sentence"], table["end_of_sentence"]
            self._boundaries = {BOS_TOKEN: bos, EOS_TOKEN: eos, bos: bos, eos: eos}
        else:
            self.pad_char = PAD_CHAR
        if self.words is not None:
            self.word_index = _index(self.words["words"])
            bos, eos = self.words["begin_of_sentence"], self.words["end_of_sentence"]
            self._word_boundaries = {BOS_TOKEN: bos, EOS_TOKEN: eos}

    def __call__(self, tokens: Sequence[str]) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        char_ids = self._vocabulary_ids(tokens) if self.vocabulary is not None else tokens_to_ids(tokens, self.max_chars)
        return char_ids, (self._word_ids(tokens) if self.words is not None else None)

    def _vocabulary_ids(self, tokens: Sequence[str]) -> np.ndarray:
        table, index, cut = self.vocabulary, self.char_index, self.max_chars - 2
        unknown, bow, eow = (index[table[name]] for name in ("unknown", "begin_of_word", "end_of_word"))
        ids = np.full((len(tokens), self.max_chars), self.pad_char, dtype=np.int64)
        for row, token in enumerate(tokens):
            boundary = self._boundaries.get(token)
            chars = [index[boundary]] if boundary is not None else [index.get(c, unknown) for c in token[:cut]]
            ids[row, 0] = bow
            ids[row, 1 : len(chars) + 1] = chars
            ids[row, len(chars) + 1] = eow
        return ids

    def _word_ids(self, tokens: Sequence[str]) -> np.ndarray:
        index, unknown = self.word_index, self.word_index[self.words["unknown"]]
        cut = self.max_chars - 2
        return np.array(
            [index.get(self._word_boundaries.get(t, t[:cut]), unknown) for t in tokens], dtype=np.int64
        )
