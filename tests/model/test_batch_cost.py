"""Batches under a cap on padded tokens (each sentence + <S> and </S>), worked out by hand."""
from spacy_elmo.model.batch_cost import length_batches


def test_batches_go_longest_first_under_the_cap():
    # Padded lengths 7, 32, 4, 32, 9, 3, 2: the two 32s fill 64; the rest fit 5 * 9 = 45.
    assert length_batches([5, 30, 2, 30, 7, 1, 0], max_batch_tokens=64) == [[1, 3], [4, 0, 2, 5, 6]]


def test_batches_keep_the_given_order_when_asked():
    # Padded 5, 3, 10, 4, 4, 11, 3 under 20: 2 * 5; 2 * 10; then 11 leaves each alone (2 * 11 > 20).
    assert length_batches([3, 1, 8, 2, 2, 9, 1], 20, keep_order=True) == [[0, 1], [2, 3], [4], [5], [6]]


def test_a_sentence_over_the_cap_is_a_batch_alone():
    assert length_batches([50, 1], 10) == [[0], [1]]
