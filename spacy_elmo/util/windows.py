"""Token sequences cut into biLM inputs of at most ``max_tokens`` tokens (windows), and their layers put back.

The one place where windows are made and undone: the ``elmo`` component (a Doc's sentences), ``ElmoEmbedder`` and
the ``embed`` command (long sentences) call these, so that all three cut and stitch alike. No context crosses a
window boundary: each window is one biLM input.
"""
from typing import Callable, List, NamedTuple, Sequence, Tuple, TypeVar

import numpy as np

# Longest biLM input by default: longer sentences run as consecutive windows of this many tokens.
DEFAULT_MAX_SENTENCE_TOKENS = 256

Layers = TypeVar("Layers")  # numpy, cupy or torch: anything sliced as ``x[..., start:end, :]``


class Window(NamedTuple):
    """Tokens ``start:end`` of sequence number ``seq``: one biLM input."""

    seq: int
    start: int
    end: int


def cut_windows(spans: Sequence[Sequence[Tuple[int, int]]], max_tokens: int) -> List[Window]:
    """Per sequence, its ``(start, end)`` spans (sentences) cut into consecutive windows of at most ``max_tokens``.

    Windows come sequence after sequence and in token order, so their layers laid end to end are each sequence's
    tokens in order (what :func:`join_windows` relies on). An empty span is no window.
    """
    return [
        Window(seq, s, min(s + max_tokens, end))
        for seq, seq_spans in enumerate(spans)
        for start, end in seq_spans
        for s in range(start, end, max_tokens)
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
    views, start = [], 0
    for length in lengths:
        views.append(packed[..., start : start + length, :])
        start += length
    return views


def stitch_windows(
    windows: Sequence[Window], pieces: Sequence[np.ndarray], n_seqs: int, empty: Callable[[], np.ndarray]
) -> List[np.ndarray]:
    """Per sequence, its windows' ``pieces`` (numpy, one per window) side by side on axis -2, in an array of its own
    (``empty()`` for a sequence without windows): one copy, so that nothing keeps the buffers the pieces view."""
    grouped: List[List[np.ndarray]] = [[] for _ in range(n_seqs)]
    for window, piece in zip(windows, pieces):
        grouped[window.seq].append(piece)
    return [np.concatenate(group, axis=-2) if group else empty() for group in grouped]
