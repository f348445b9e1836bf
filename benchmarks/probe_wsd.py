"""Word-sense probe: does a word's vector tell its senses apart, with the default ``Token._.elmo`` and other mixes?

``benchmarks/data/wsd_sentences.tsv`` holds sentences written for this probe (not the demo's): ambiguous English
words, two senses each, several sentences per sense, the word once in each. The sentences go through
``nlp.add_pipe("elmo")`` with its defaults (spaCy's tokenizer, ``mix = "average"``); each occurrence's nearest
neighbour by cosine among the *other* occurrences of the same word should have the same sense (leave-one-out
1-nearest-neighbour accuracy). A random neighbour scores (n - 1) / (2n - 1) with n sentences per sense (0.45 for 6);
layer 0, the context-free token layer, gives every occurrence of a word spelt alike the same vector, so the tie goes
to the first sentence and the word scores 0.5. The same is scored for each layer and for other mixes of the same
layers (``benchmarks/layer_mixes.py``), and for an untrained biLM of the same architecture (seeded random weights),
which shows what pretraining adds. "vs default": occurrences a representation gets right and the default wrong (+),
and the reverse (-); with this few sentences, a difference of a handful is noise.

    python benchmarks/probe_wsd.py [--options O --weights W] [--data TSV] [--threads 1]
"""
import argparse
import csv
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch

from elmo_vectors import elmo_docs, elmo_pipeline, stacked_vectors
from layer_mixes import layer_mixes, mean_layer_norms, norm_balancing_weights
from untrained_bilm import write_untrained
from spacy_elmo.default_model import default_model_files
from spacy_elmo.demo import nearest_neighbours, sense_scores

DATA = Path(__file__).resolve().parent / "data" / "wsd_sentences.tsv"
DEFAULT_VIEW = "default Token._.elmo (mix 'average')"


class Occurrence(NamedTuple):
    word: str
    sense: str
    sentence: str


class Scores(NamedTuple):
    """One representation's scores: whether each occurrence's 1-NN has its sense, accuracy per word and overall, mean
    cosine of two uses of a word, and separation (mean cosine same sense minus other sense), both averaged over
    the words."""

    hits: np.ndarray
    per_word: Dict[str, float]
    overall: float
    mean_cosine: float
    separation: float


def read_occurrences(path: Path) -> List[Occurrence]:
    """The rows of a ``word<TAB>sense<TAB>sentence`` file with a header line."""
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [Occurrence(row["word"].lower(), row["sense"], row["sentence"]) for row in rows]


def target_rows(docs, occurrences: Sequence[Occurrence]) -> np.ndarray:
    """Row of each occurrence's word among all tokens of ``docs``; the word must be one token of its sentence, once."""
    rows, start = [], 0
    for doc, occurrence in zip(docs, occurrences):
        found = [t.i for t in doc if t.lower_ == occurrence.word]
        if len(found) != 1:
            raise ValueError(
                f"{occurrence.word!r} is {len(found)} tokens of {occurrence.sentence!r} (spaCy tokens: "
                f"{[t.text for t in doc]}); each sentence must hold its word exactly once, as a token of its own"
            )
        rows.append(start + found[0])
        start += len(doc)
    return np.array(rows)


def sense_hits(vectors: np.ndarray, words: Sequence[str], senses: Sequence[str]) -> np.ndarray:
    """For each occurrence: is its nearest neighbour (cosine) among the other occurrences of the same word of the
    same sense? Ties go to the earliest occurrence."""
    words, senses = np.asarray(words), np.asarray(senses)
    hits = np.zeros(len(words), dtype=bool)
    for word in np.unique(words):
        members = np.flatnonzero(words == word)
        best, _ = nearest_neighbours(vectors[members])
        hits[members] = senses[members[best]] == senses[members]
    return hits


def score(vectors: np.ndarray, occurrences: Sequence[Occurrence]) -> Scores:
    """The scores of one representation of every occurrence (rows in the order of ``occurrences``)."""
    words = [o.word for o in occurrences]
    senses = [o.sense for o in occurrences]
    hits = sense_hits(vectors, words, senses)
    per_word, cosines, separations = {}, [], []
    for word in dict.fromkeys(words):
        members = np.array([w == word for w in words])
        per_word[word] = float(hits[members].mean())
        unit = vectors[members] / np.maximum(np.linalg.norm(vectors[members], axis=1, keepdims=True), 1e-12)
        cosine = unit @ unit.T
        cosines.append(cosine[~np.eye(len(unit), dtype=bool)].mean())
        separations.append(sense_scores(vectors[members], [s for s, m in zip(senses, members) if m])[1])
    return Scores(hits, per_word, float(hits.mean()), float(np.mean(cosines)), float(np.mean(separations)))


def evaluate(options_file: Optional[str], weight_file: Optional[str], occurrences: Sequence[Occurrence]):
    """Scores of every representation, and the mean token norm of each layer over all tokens of the sentences."""
    nlp = elmo_pipeline(options_file, weight_file)
    docs = elmo_docs(nlp, [o.sentence for o in occurrences])
    default, layers = stacked_vectors(docs)
    norms = mean_layer_norms(layers)
    rows = target_rows(docs, occurrences)
    views = {DEFAULT_VIEW: default, **layer_mixes(layers, norm_balancing_weights(norms))}
    return {name: score(vectors[rows], occurrences) for name, vectors in views.items()}, norms


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    return "\n".join(["", *lines, *("| " + " | ".join(row) + " |" for row in rows), ""])


def report(results: Dict[str, Tuple[Dict[str, Scores], np.ndarray]], occurrences: Sequence[Occurrence]) -> None:
    """Print the overall table (all biLMs side by side) and one per-word table per biLM."""
    names = list(results)
    views = list(results[names[0]][0])
    header = ["representation"]
    for name in names:
        header += [f"{name}: 1-NN acc.", f"{name}: vs default", f"{name}: mean cos", f"{name}: separation"]
    rows = []
    for view in views:
        row = [view]
        for name in names:
            s, default = results[name][0][view], results[name][0][DEFAULT_VIEW]
            won, lost = int((s.hits & ~default.hits).sum()), int((~s.hits & default.hits).sum())
            row += [f"{s.overall:.3f} ({s.hits.sum()}/{len(s.hits)})", f"+{won} −{lost}", f"{s.mean_cosine:.3f}",
                    f"{s.separation:+.3f}"]
        rows.append(row)
    print(markdown_table(header, rows))
    words = list(dict.fromkeys(o.word for o in occurrences))
    for name in names:
        scores, norms = results[name]
        print(f"\n{name}: 1-NN sense accuracy per word (mean token norm of the layers: "
              + ", ".join(f"{n:.1f}" for n in norms) + ")")
        print(markdown_table(
            ["word", *views],
            [[word, *(f"{scores[v].per_word[word]:.2f}" for v in views)] for word in words],
        ))


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--options", help="options.json of the biLM (default: the embedded English model)")
    parser.add_argument("--weights", help="weights .hdf5 of the biLM (with --options)")
    parser.add_argument("--data", type=Path, default=DATA, help="word<TAB>sense<TAB>sentence file with a header")
    parser.add_argument("--seed", type=int, default=0, help="seed of the untrained control's weights")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if (args.options is None) != (args.weights is None):
        parser.error("give both --options and --weights, or neither (the embedded English model)")
    torch.set_num_threads(args.threads)
    occurrences = read_occurrences(args.data)
    counts = Counter((o.word, o.sense) for o in occurrences)
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        options_file = args.options or str(default_model_files()[0])
        untrained = write_untrained(Path(options_file), Path(tmp), seed=args.seed)
        results = {
            "trained": evaluate(args.options, args.weights, occurrences),
            "untrained": evaluate(*map(str, untrained), occurrences),
        }
    print(f"Word-sense probe ({args.data.name}): {len({w for w, _ in counts})} words, {len(counts)} senses, "
          f"{len(occurrences)} sentences ({min(counts.values())}-{max(counts.values())} per sense); "
          f"leave-one-out 1-NN by cosine among the occurrences of the same word. Model: "
          f"{args.options or 'the embedded English model'}; untrained control: same architecture, seed {args.seed}; "
          f"{time.time() - start:.0f} s, {args.threads} thread(s).")
    report(results, occurrences)


if __name__ == "__main__":
    main()
