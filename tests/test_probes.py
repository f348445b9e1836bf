"""The scoring of the probes of benchmarks/quality.py (a script, not a package: imported from its folder)."""
import sys
from pathlib import Path

import numpy as np
import pytest
import spacy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from quality import (DEFAULT_DATA, Occurrence, norm_balancing_weights, pair_auc, read_occurrences, score, sense_hits,
                     sentence_means, target_rows)

# Two words, occurrences interleaved. Worked by hand (cosines to 3 places):
# x: x1 -> x2 (0.981, same sense), x2 -> x1 (0.981), x3 -> x4 (0.600), x4 -> x2 (0.902, other sense).
# y: y1 -> y4 (-0.010, other), y2 -> y3 (0.995, other), y3 -> y2 (0.995, other), y4 -> y2 (0.000, other).
# Across words, y1 = [1, 0.01] would be the nearest vector of x1 (0.99995): a neighbour of another word must not count.
OCCURRENCES = [
    ("x", "p", [1.0, 0.0]),
    ("y", "r", [1.0, 0.01]),
    ("x", "p", [1.0, 0.2]),
    ("y", "r", [-1.0, 0.0]),
    ("x", "q", [0.0, 1.0]),
    ("y", "s", [-1.0, 0.1]),
    ("x", "q", [0.8, 0.6]),
    ("y", "s", [0.0, -1.0]),
]


def test_sense_hits_look_for_the_nearest_neighbour_among_other_occurrences_of_the_same_word_only():
    words, senses, vectors = zip(*OCCURRENCES)
    hits = sense_hits(np.array(vectors), words, senses)
    assert hits.tolist() == [True, False, True, False, True, False, False, False]


def test_score_gives_accuracy_per_word_and_over_all_occurrences():
    occurrences = [Occurrence(word, sense, f"sentence {i}") for i, (word, sense, _) in enumerate(OCCURRENCES)]
    scores = score(np.array([v for _, _, v in OCCURRENCES]), occurrences)
    assert scores.per_word == {"x": 0.75, "y": 0.0}
    assert scores.overall == 3 / 8


def test_norm_balancing_weights_are_inverse_norms_summing_to_one():
    # 1/4 : 1/1 : 1/2 = 1 : 4 : 2, out of 7.
    assert np.allclose(norm_balancing_weights(np.array([4.0, 1.0, 2.0])), [1 / 7, 4 / 7, 2 / 7])


def test_a_sentence_without_its_word_as_one_token_is_refused_with_the_tokens():
    nlp = spacy.blank("en")
    occurrences = [Occurrence("bark", "tree", "The bark was rough."), Occurrence("bark", "dog", "It barked twice.")]
    docs = [nlp(o.sentence) for o in occurrences]
    assert target_rows(docs[:1], occurrences[:1]).tolist() == [1]
    with pytest.raises(ValueError, match="'bark' is 0 tokens of 'It barked twice.'"):
        target_rows(docs, occurrences)


def test_pair_auc_counts_same_sense_pairs_above_other_sense_pairs():
    # Unit vectors at 0, 10, 90 and 40 degrees, senses a a b b. Same-sense cosines: cos 10 = 0.985, cos 50 = 0.643;
    # other-sense: cos 90 = 0, cos 40 = 0.766, cos 80 = 0.174, cos 30 = 0.866. 0.985 beats all 4, 0.643 beats 2: 6/8.
    angles = np.radians([0.0, 10.0, 90.0, 40.0])
    vectors = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    assert pair_auc(vectors, ["a", "a", "b", "b"]) == 0.75
    assert pair_auc(np.ones((4, 2)), ["a", "a", "b", "b"]) == 0.5  # one vector for every use: all ties


def test_sentence_means_average_each_sentence_rows():
    rows = np.array([[1.0, 0.0], [3.0, 2.0], [5.0, 5.0], [0.0, 1.0], [2.0, 1.0], [4.0, 1.0]])
    assert sentence_means(rows, [2, 1, 3]).tolist() == [[2.0, 1.0], [5.0, 5.0], [2.0, 1.0]]


def test_json_probe_data_is_read_without_its_comment_keys(tmp_path):
    path = tmp_path / "probe.json"
    path.write_text('{"_about": "note", "Bat": {"animal": ["A bat flew ."], "sport": ["He swung the bat ."]}}')
    assert read_occurrences(path) == [Occurrence("bat", "animal", "A bat flew ."), Occurrence("bat", "sport", "He swung the bat .")]


@pytest.mark.parametrize("path", DEFAULT_DATA, ids=lambda p: p.name)
def test_the_shipped_probe_sentences_hold_their_word_once_with_six_per_sense(path):
    nlp = spacy.blank("en")
    occurrences = read_occurrences(path)
    target_rows([nlp(o.sentence) for o in occurrences], occurrences)  # raises for a sentence without its word once
    counts = {}
    for o in occurrences:
        counts.setdefault(o.word, []).append(o.sense)
    assert all(len(set(senses)) == 2 and all(senses.count(s) == 6 for s in set(senses)) for senses in counts.values())
