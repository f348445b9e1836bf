"""Token sequences cut into biLM inputs of at most ``max_sentence_tokens`` tokens (windows), and their layers put back.

The one place where windows are made: the ``elmo`` component (a Doc's sentences) and the ``embed`` command (long
texts) cut alike. Their layers come back end to end per sequence either from the runtime, given
:func:`windows_per_sequence` as its ``joined`` groups, or, for layers computed together as one packed array
(training, the layer cache), from :func:`join_windows`. No context crosses a window boundary: each window is one
biLM input.
"""
from collections import Counter
from itertools import accumulate
from typing import List, NamedTuple, Sequence, Tuple, TypeVar

# Longest biLM input by default: longer sentences run as consecutive windows of this many tokens.
DEFAULT_MAX_SENTENCE_TOKENS = 256

Layers = TypeVar("Layers")  # numpy, cupy or torch: anything sliced as ``x[..., start:end, :]``


class Window(NamedTuple):
    """Tokens ``start:end`` of sequence number ``seq``: one biLM input."""

    seq: int
    start: int
    end: int


def cut_windows(spans: Sequence[Sequence[Tuple[int, int]]], max_sentence_tokens: int) -> List[Window]:
    """Per sequence, its ``(start, end)`` spans (sentences) cut into consecutive windows of at most
    ``max_sentence_tokens``.

    Windows come sequence after sequence and in token order, so their layers laid end to end are each sequence's
    tokens in order (what :func:`join_windows` relies on). An empty span is no window.
    """
    return [
        Window(seq, s, min(s + max_sentence_tokens, end))
        for seq, seq_spans in enumerate(spans)
        for start, end in seq_spans
        for s in range(start, end, max_sentence_tokens)
    ]


def window_tokens(sequences: Sequence[Sequence[str]], windows: Sequence[Window]) -> List[List[str]]:
    """The tokens of each window."""
    return [list(sequences[w.seq][w.start : w.end]) for w in windows]


def join_windows(windows: Sequence[Window], packed: Layers, n_seqs: int) -> List[Layers]:
    """Per sequence, its tokens' layers: views of ``packed``, the windows' layers end to end on axis -2.

    A sequence without windows (no tokens) gets an empty slice.
    """
    lengths = [0] * n_seqs
    for window in windows:
        lengths[window.seq] += window.end - window.start
    return token_views(packed, lengths)


def token_views(packed: Layers, lengths: Sequence[int]) -> List[Layers]:
    """Views of ``packed``'s token axis (the second to last), one per length, in order."""
    return [packed[..., end - length : end, :] for length, end in zip(lengths, accumulate(lengths))]


def windows_per_sequence(windows: Sequence[Window], n_seqs: int) -> List[int]:
    """How many windows each sequence has (0 for one without tokens), sequence after sequence."""
    counts = Counter(window.seq for window in windows)
    return [counts[seq] for seq in range(n_seqs)]
