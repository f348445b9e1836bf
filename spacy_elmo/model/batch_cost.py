"""Sentences grouped into biLM batches under a cap on padded tokens.

A batch costs ``rows * longest row``, each row padded with the ``<S>`` and ``</S>`` marks, so
the cap bounds the memory of one biLM call however long the sentences are.
"""
from typing import List, Sequence

import numpy as np

BOUNDARY_TOKENS = 2  # <S> and </S> around every sentence
# Padded tokens per biLM batch by default (the ``elmo`` component's biLM block, ``ElmoEmbedder``).
DEFAULT_MAX_BATCH_TOKENS = 4096


def length_batches(lengths: Sequence[int], max_batch_tokens: int, keep_order: bool = False) -> List[List[int]]:
    """Indices of ``lengths`` in groups whose ``size * (longest + 2)`` stays within ``max_batch_tokens``.

    Sorted longest first, so that sentences of similar length share a batch and little is padding;
    with ``keep_order`` the indices stay in their given order (the stateful mode, where batch row
    ``r`` continues row ``r`` of the batch before). A sentence longer than the cap is a batch alone.
    """
    if keep_order:
        order = list(range(len(lengths)))
    else:
        order = np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable").tolist()
    batches: List[List[int]] = []
    current: List[int] = []
    longest = 0
    for i in order:
        padded = lengths[i] + BOUNDARY_TOKENS
        if current and (len(current) + 1) * max(longest, padded) > max_batch_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, padded)
    if current:
        batches.append(current)
    return batches
