"""``python -m spacy_elmo demo``: contextual vectors tell the senses of a word apart.

The same word gets one vector per context. For a few words with two senses, each occurrence's
nearest neighbour (by cosine) among the other occurrences should share its sense; the context-free
token layer (layer 0) cannot do that, since it gives every occurrence the same vector. For each word the
demo scores the component's default ``Doc._.elmo`` (its ``mix``) and each layer, and lists the neighbours
with the one that separates the senses best (the default when it is as good as any layer).
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


def occurrences(nlp, word: str) -> Tuple[List[str], List[str], Dict[str, np.ndarray]]:
    """Every sentence with ``word``, its sense, and the word's vectors there by name: the component's default
    ``Token._.elmo``, then each layer; each ``(n, dim)``."""
    sentences, senses, default, layers = [], [], [], []
    for sense, texts in SENSES[word].items():
        for doc in nlp.pipe(texts):
            token = next(t for t in doc if t.lower_ == word)
            sentences.append(doc.text)
            senses.append(sense)
            default.append(token._.elmo)
            layers.append(doc._.elmo_layers[:, token.i])
    views = {f"default mix ({nlp.get_pipe('elmo').mix!r})": np.stack(default)}
    for k, layer in enumerate(np.stack(layers, axis=1)):
        views["layer 0 (characters only)" if k == 0 else f"layer {k} (biLSTM {k})"] = layer
    return sentences, senses, views


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


def best_view(scores: Dict[str, Tuple[float, float]]) -> str:
    """The representation with the highest 1-NN accuracy, then separation; the first (the default) on a tie."""
    return max(scores, key=lambda name: scores[name])


def run(options_file: Optional[str] = None, weight_file: Optional[str] = None) -> None:
    nlp = spacy.blank("en")
    model = {"@architectures": "spacy_elmo.ElmoBiLm.v2", "options_file": options_file, "weight_file": weight_file}
    nlp.add_pipe("elmo", config={"model": model, "store_layers": True})
    model = "the embedded English model" if options_file is None else options_file
    print(f"ELMo demo with {model}: which occurrence of a word is most like each other one?\n")
    for word in SENSES:
        sentences, senses, views = occurrences(nlp, word)
        scores = {name: sense_scores(vectors, senses) for name, vectors in views.items()}
        print(f'"{word}": 1-NN sense accuracy | mean cosine same sense minus other sense')
        for name, (accuracy, separation) in scores.items():
            same = "  (every occurrence has the same vector)" if np.allclose(views[name], views[name][0]) else ""
            print(f"    {name:<27} {accuracy:6.0%} | {separation:+.3f}{same}")
        chosen = best_view(scores)
        best, cosine = nearest_neighbours(views[chosen])
        print(f'\n  "{word}": nearest neighbour of each occurrence with {chosen}, the best above')
        for i, sentence in enumerate(sentences):
            mark = "ok  " if senses[best[i]] == senses[i] else "MISS"
            print(f"  [{mark}] {senses[i]:>7} {sentence[:60]:<60} -> {senses[best[i]]:<7} (cos {cosine[i]:.2f})")
        print()
