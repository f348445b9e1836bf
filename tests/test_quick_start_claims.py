"""The README's Quick start says what the embedded English model does well, and these tests measure it on fresh
sentences: written for this test, in none of the docs, the demo or the training text's style on purpose.

The claim: a word's contextual vector says how the word is used. Six words that are both nouns and verbs, each
used four times as a noun and four times as a verb (tests/data/noun_verb_uses.json): each use's nearest other use
of the same word (by cosine of ``Token._.elmo``) is of its part of speech, and uses of one part of speech are
nearer each other than to the other's. The README states the figures; they are checked against the measurement.
"""
import json
import re
from itertools import combinations
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest
import spacy

ROOT = Path(__file__).resolve().parents[1]
USES = ROOT / "tests" / "data" / "noun_verb_uses.json"


def _unit_vectors(nlp: spacy.language.Language, word: str, texts: List[str]) -> np.ndarray:
    """The unit-length vector of ``word``'s one occurrence in each text."""
    rows = []
    for doc in nlp.pipe(texts):
        (token,) = [token for token in doc if token.lower_ == word]
        rows.append(token._.elmo / np.linalg.norm(token._.elmo))
    return np.stack(rows)


@pytest.fixture(scope="module")
def measured() -> Dict[str, Tuple[int, int, float, float]]:
    """Per word: uses whose nearest other use shares their part of speech, uses, and the mean cosine of pairs
    within a part of speech and across."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")  # the embedded English model, as in the Quick start
    results = {}
    for word, groups in json.loads(USES.read_text(encoding="utf-8")).items():
        labels = [tag for tag, texts in groups.items() for _ in texts]
        vectors = _unit_vectors(nlp, word, [text for texts in groups.values() for text in texts])
        cosines = vectors @ vectors.T
        np.fill_diagonal(cosines, -np.inf)
        right = sum(labels[int(np.argmax(row))] == label for row, label in zip(cosines, labels))
        within = [cosines[i, j] for i, j in combinations(range(len(labels)), 2) if labels[i] == labels[j]]
        across = [cosines[i, j] for i, j in combinations(range(len(labels)), 2) if labels[i] != labels[j]]
        results[word] = (right, len(labels), float(np.mean(within)), float(np.mean(across)))
    return results


def test_the_fresh_set_is_balanced_and_each_use_holds_its_word_once():
    uses = json.loads(USES.read_text(encoding="utf-8"))
    assert len(uses) == 6 and all(sorted(groups) == ["NOUN", "VERB"] for groups in uses.values())
    assert {len(texts) for groups in uses.values() for texts in groups.values()} == {4}
    docs = " ".join(page.read_text(encoding="utf-8") for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    texts = [text for groups in uses.values() for group in groups.values() for text in group]
    assert [text for text in texts if text in docs] == []  # held out from the docs


def test_each_use_s_nearest_use_has_its_part_of_speech_as_the_readme_says(measured):
    right = sum(r for r, _, _, _ in measured.values())
    total = sum(n for _, n, _, _ in measured.values())
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    said = re.search(r"of the same part of speech in (\d+) of (\d+)", readme)
    assert said and (int(said[1]), int(said[2])) == (right, total), (right, total)
    assert right / total >= 0.9  # the claim itself, whatever the README's wording


def test_uses_of_one_part_of_speech_are_nearer_each_other_as_the_readme_says(measured):
    """Every word's mean cosine within a part of speech is above its mean across (by 0.1 at least); the README's
    means are the pooled means over all pairs, rounded."""
    for word, (_, _, within, across) in measured.items():
        assert within > across + 0.1, (word, within, across)
    within = np.mean([w for _, _, w, _ in measured.values()])  # every word has 12 pairs within, 16 across: the
    across = np.mean([a for _, _, _, a in measured.values()])  # mean of the words' means is the pooled mean
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    said = re.search(r"mean cosine (0\.\d\d) within a part of speech against (0\.\d\d) across", readme)
    assert said and (said[1], said[2]) == (f"{within:.2f}", f"{across:.2f}"), (within, across)
