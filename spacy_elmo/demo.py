"""``python -m spacy_elmo demo``: contextual vectors tell the senses of a word apart.

The same word gets one vector per context. For a few words with two senses, each occurrence's
nearest neighbour (by cosine) among the other occurrences should share its sense; the context-free
token layer (layer 0) cannot do that, since it gives every occurrence the same vector.
"""
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import spacy

SENSES: Dict[str, Dict[str, List[str]]] = {
    "bank": {
        "river": [
            "We sat on the bank of the river and watched the boats go by.",
            "The boat drifted towards the muddy bank where the reeds grew tall.",
            "He swam across the stream and climbed up the steep bank.",
            "Willows lined the far bank of the little brook.",
            "The flood had washed away part of the bank near the mill.",
            "She walked along the grassy bank until she reached the bridge.",
        ],
        "money": [
            "He went to the bank to borrow money for the new house.",
            "The bank refused to lend him another hundred pounds.",
            "She kept all her savings in the bank in town.",
            "The clerk at the bank counted the notes twice.",
            "My father worked at a bank in London for thirty years.",
            "The bank paid a small interest on his deposit.",
        ],
    },
    "play": {
        "theatre": [
            "We went to see a new play at the theatre last night.",
            "The play was written by a young author from Dublin.",
            "The actors rehearsed the play for many weeks.",
            "In the second act of the play the king dies.",
            "Her play was performed before a large audience.",
            "The critics praised the play and its brilliant dialogue.",
        ],
        "game": [
            "The children went out to play in the garden after school.",
            "Let us play a game of cards before dinner.",
            "The boys liked to play football in the field.",
            "She would play with her dolls for hours.",
            "They asked him to play chess with them.",
            "The dogs began to play on the lawn.",
        ],
    },
}

LAYER_NAMES = ("layer 0 (characters only)", "layer 1 (first biLSTM)", "layer 2 (second biLSTM)", "mix (mean of layers)")


def occurrences(nlp, word: str) -> Tuple[List[str], List[str], np.ndarray]:
    """Every sentence with ``word``, its sense, and the word's layers there: ``(n, n_layers + 1, dim)``."""
    sentences, senses, vectors = [], [], []
    for sense, texts in SENSES[word].items():
        for doc in nlp.pipe(texts):
            token = next(t for t in doc if t.lower_ == word)
            sentences.append(doc.text)
            senses.append(sense)
            vectors.append(doc._.elmo_layers[:, token.i])
    return sentences, senses, np.stack(vectors)


def nearest_neighbours(vectors: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Leave-one-out nearest neighbour of each row by cosine, and that cosine."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    cosine = unit @ unit.T
    np.fill_diagonal(cosine, -np.inf)
    best = cosine.argmax(axis=1)
    return best, cosine[np.arange(len(best)), best]


def sense_scores(vectors: np.ndarray, senses: Sequence[str]) -> Tuple[float, float]:
    """1-NN sense accuracy, and mean cosine within a sense minus mean cosine across senses."""
    labels = np.asarray(senses)
    best, _ = nearest_neighbours(vectors)
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    cosine = unit @ unit.T
    same = labels[:, None] == labels[None, :]
    off_diagonal = ~np.eye(len(labels), dtype=bool)
    separation = cosine[same & off_diagonal].mean() - cosine[~same].mean()
    return float((labels[best] == labels).mean()), float(separation)


def run(options_file: Optional[str] = None, weight_file: Optional[str] = None) -> None:
    nlp = spacy.blank("en")
    model = {"@architectures": "spacy_elmo.ElmoBiLm.v2", "options_file": options_file, "weight_file": weight_file}
    nlp.add_pipe("elmo", config={"model": model, "store_layers": True})
    model = "the embedded English model" if options_file is None else options_file
    print(f"ELMo demo with {model}: which occurrence of a word is most like each other one?\n")
    for word in SENSES:
        sentences, senses, layers = occurrences(nlp, word)
        mixed = layers.mean(axis=1)
        best, cosine = nearest_neighbours(mixed)
        print(f'"{word}": nearest neighbour of each occurrence (mix of all layers)')
        for i, sentence in enumerate(sentences):
            mark = "ok  " if senses[best[i]] == senses[i] else "MISS"
            print(f"  [{mark}] {senses[i]:>7} {sentence[:60]:<60} -> {senses[best[i]]:<7} (cos {cosine[i]:.2f})")
        print(f'\n  "{word}" by layer: 1-NN sense accuracy | mean cosine same sense minus other sense')
        per_layer = [layers[:, k] for k in range(layers.shape[1])] + [mixed]
        for name, vectors in zip(LAYER_NAMES, per_layer):
            accuracy, separation = sense_scores(vectors, senses)
            note = "  (every occurrence has the same vector)" if np.allclose(vectors, vectors[0]) else ""
            print(f"    {name:<27} {accuracy:6.0%} | {separation:+.3f}{note}")
        print()
