"""Docs cut into biLM inputs: their sentences when they have sentence boundaries, else the whole Doc, and anything
longer than ``max_sentence_tokens`` (the biLM's longest input) into consecutive windows (:mod:`spacy_elmo.util.windows`)."""
from typing import List, Sequence, Tuple

from spacy.tokens import Doc

from ..util.windows import Window, cut_windows, window_tokens


def doc_windows(docs: Sequence[Doc], max_sentence_tokens: int) -> Tuple[List[Window], List[List[str]]]:
    """The windows of each Doc's sentences (of the whole Doc without sentence boundaries), Doc after Doc, and the
    token texts of each."""
    windows = cut_windows([_sentence_spans(doc) for doc in docs], max_sentence_tokens)
    return windows, window_tokens([[token.text for token in doc] for doc in docs], windows)


def _sentence_spans(doc: Doc) -> List[Tuple[int, int]]:
    return [(s.start, s.end) for s in doc.sents] if doc.has_annotation("SENT_START") else [(0, len(doc))]
