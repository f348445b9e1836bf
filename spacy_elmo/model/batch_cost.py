"""What a segment costs a biLM batch: its row's tokens.

A batch costs ``rows * longest row`` padded tokens (the scheduler's cost model,
:func:`~spacy_elmo.serving.scheduler.batch_tokens`), each row a segment with its ``<S>`` and ``</S>`` marks
(:func:`row_tokens`), so that a bound on a batch's tokens bounds the memory of one biLM call however long the
segments are.
"""

BOUNDARY_TOKENS = 2  # <S> and </S> around every segment
# Padded tokens per biLM batch by default (the ``elmo`` component's biLM block, ``ElmoEmbedder``).
DEFAULT_MAX_BATCH_TOKENS = 4096


def row_tokens(length: int) -> int:
    """A segment of ``length`` tokens as a batch row: with its boundary marks."""
    return length + BOUNDARY_TOKENS
