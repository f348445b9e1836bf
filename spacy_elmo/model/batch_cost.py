"""What a biLM batch costs, and one call's sentences grouped into batches under a cap on it.

A batch costs ``rows * longest row`` padded tokens, each row a sentence with its ``<S>`` and ``</S>`` marks
(:func:`row_tokens`; the padded cost itself is :func:`~spacy_elmo.util.batch_planner.batch_cost`), so the cap bounds
the memory of one biLM call however long the sentences are. The request batcher plans the runtime's batches with
the same planner and costs; :func:`length_batches` is that plan for one call alone (training, evaluation).
"""
from typing import List, Sequence

import numpy as np

from ..util.batch_planner import Budgets, Turns, Waiting, plan_batch

BOUNDARY_TOKENS = 2  # <S> and </S> around every sentence
# Padded tokens per biLM batch by default (the ``elmo`` component's biLM block, ``ElmoEmbedder``).
DEFAULT_MAX_BATCH_TOKENS = 4096


def row_tokens(length: int) -> int:
    """A sentence of ``length`` tokens as a batch row: with its boundary marks."""
    return length + BOUNDARY_TOKENS


def longest_first(lengths: Sequence[int]) -> List[int]:
    """Indices of ``lengths``, longest first (ties in their order), so that sentences of similar length share a
    batch and little of it is padding."""
    return np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable").tolist()


def length_batches(lengths: Sequence[int], max_batch_tokens: int, keep_order: bool = False) -> List[List[int]]:
    """Indices of ``lengths`` in groups whose ``size * (longest + 2)`` stays within ``max_batch_tokens``.

    Longest first; with ``keep_order`` the indices stay in their given order (the stateful mode, where batch row
    ``r`` continues row ``r`` of the batch before). A sentence longer than the cap is a batch alone.
    """
    order = list(range(len(lengths))) if keep_order else longest_first(lengths)
    costs = [row_tokens(lengths[i]) for i in order]
    budgets = Budgets(most=max_batch_tokens, padded=True)
    batches: List[List[int]] = []
    at = 0
    while at < len(order):
        # a batch holds at most max_batch_tokens rows: the planner needs to see no more
        plan = plan_batch([Waiting(0, costs[at : at + max_batch_tokens])], Turns(), budgets, now=0.0)
        count = plan.shares[0][1]
        batches.append(order[at : at + count])
        at += count
    return batches
