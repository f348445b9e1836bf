"""Docs cut into biLM input sequences: their sentences when they have sentence boundaries, else the
whole Doc, and anything longer than ``max_tokens`` into consecutive windows."""
from typing import List, NamedTuple, Sequence

from spacy.tokens import Doc


class Segment(NamedTuple):
    """Tokens ``start:end`` of Doc number ``doc``: one biLM input sequence."""

    doc: int
    start: int
    end: int


def doc_segments(docs: Sequence[Doc], max_tokens: int) -> List[Segment]:
    """Sentences of Docs with sentence boundaries, whole Docs otherwise, cut into windows of ``max_tokens``."""
    segments: List[Segment] = []
    for i, doc in enumerate(docs):
        spans = [(s.start, s.end) for s in doc.sents] if doc.has_annotation("SENT_START") else [(0, len(doc))]
        for start, end in spans:
            segments.extend(Segment(i, s, min(s + max_tokens, end)) for s in range(start, end, max_tokens))
    return segments


def segment_words(docs: Sequence[Doc], segments: Sequence[Segment]) -> List[List[str]]:
    """The token texts of each segment."""
    texts = [[token.text for token in doc] for doc in docs]
    return [texts[s.doc][s.start : s.end] for s in segments]
