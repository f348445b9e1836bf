"""Word-sense probe: do a word's vectors tell its senses apart, with the default ``Token._.elmo`` and other mixes?

Two sets of sentences written for this probe (not the demo's): ``benchmarks/data/wsd_sentences.tsv`` (10 words) and
``benchmarks/data/wsd_second_probe.json`` (8 other words, other sentences): ambiguous English words, two senses
each, six sentences per sense, the word once in each. The sentences go through ``nlp.add_pipe("elmo")`` with its
defaults (spaCy's tokenizer); the same is scored for each layer and other mixes of the same layers
(``benchmarks/layer_mixes.py``), and for an untrained biLM of the same architecture (seeded random weights), which
shows what pretraining adds. Scores, each among the occurrences of the same word only:

- token 1-NN: is each occurrence's nearest neighbour by cosine among the *other* occurrences of the word of the same
  sense (leave-one-out)? A random neighbour scores (n - 1) / (2n - 1) with n sentences per sense (0.45 for 6); layer
  0, the context-free token layer, gives every occurrence of a word spelt alike the same vector, so the tie goes to
  the first sentence and the word scores 0.5. "vs default": occurrences a representation gets right and the default
  wrong (+), and the reverse (-); with this few sentences, a difference of a handful is noise.
- token AUC: the chance that two uses of the word in the same sense have a higher cosine than two uses in different
  senses (ties count 1/2; 0.5 is chance): how well ``Token.similarity`` ranks, whatever its scale.
- mean cos: the mean cosine of two uses of the word (near 1: every use looks the same, whatever the sense).
- sentence 1-NN / AUC / mean cos: the same with each sentence's mean vector, ``Doc.vector`` / ``doc.similarity``.

The mixes that scale or centre the layers take each layer's mean token norm and mean vector from reference text the
probe does not score (``--reference``: held-out Gutenberg books, the embedded model's domain).

    python benchmarks/probe_wsd.py [--options O --weights W] [--data FILE ...] [--threads 1]
"""
import argparse
import csv
import gzip
import json
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch

from elmo_vectors import elmo_docs, elmo_pipeline, stacked_vectors
from layer_mixes import DEFAULT_VIEW, layer_mixes, mean_layer_norms, unit_rows
from untrained_bilm import write_untrained
from spacy_elmo.sources.resolve import default_model_files
from spacy_elmo.commands.demo import nearest_neighbours, sense_scores

DATA = Path(__file__).resolve().parent / "data"
DEFAULT_DATA = [DATA / "wsd_sentences.tsv", DATA / "wsd_second_probe.json"]
REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "lm_gutenberg_en" / "heldout.txt.gz"
REFERENCE_LINES = 1500


class Occurrence(NamedTuple):
    word: str
    sense: str
    sentence: str


class Scores(NamedTuple):
    """One representation's scores: whether each occurrence's 1-NN has its sense, accuracy per word and overall,
    the pair AUC, the mean cosine of two uses of a word, and separation (mean cosine same sense minus other sense);
    the last three averaged over the words."""

    hits: np.ndarray
    per_word: Dict[str, float]
    overall: float
    auc: float
    mean_cosine: float
    separation: float


def read_occurrences(path: Path) -> List[Occurrence]:
    """The rows of a ``word<TAB>sense<TAB>sentence`` file with a header line, or of a JSON file
    ``{word: {sense: [sentence, ...]}}`` (keys starting with ``_`` are comments)."""
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        return [
            Occurrence(word.lower(), sense, sentence)
            for word, senses in data.items() if not word.startswith("_")
            for sense, sentences in senses.items() for sentence in sentences
        ]
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [Occurrence(row["word"].lower(), row["sense"], row["sentence"]) for row in rows]


def read_reference(path: Path, n_lines: int = REFERENCE_LINES) -> List[str]:
    """Every tenth line of a gzip text of 6-39 words, up to ``n_lines``: text the probe does not score."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line.strip() for i, line in enumerate(f) if i % 10 == 0 and 5 < len(line.split()) < 40]
    return lines[:n_lines]


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


def pair_auc(vectors: np.ndarray, senses: Sequence[str]) -> float:
    """Chance that a pair of rows of the same sense has a higher cosine than a pair of different senses (ties 1/2)."""
    labels = np.asarray(senses)
    unit = unit_rows(vectors)
    cosine = unit @ unit.T
    pairs = np.triu(np.ones_like(cosine, dtype=bool), k=1)
    same = (labels[:, None] == labels[None, :]) & pairs
    within, across = cosine[same][:, None], cosine[~(labels[:, None] == labels[None, :]) & pairs][None, :]
    return float((within > across).mean() + 0.5 * (within == across).mean())


def score(vectors: np.ndarray, occurrences: Sequence[Occurrence]) -> Scores:
    """The scores of one representation of every occurrence (rows in the order of ``occurrences``)."""
    words = [o.word for o in occurrences]
    senses = [o.sense for o in occurrences]
    hits = sense_hits(vectors, words, senses)
    per_word, aucs, cosines, separations = {}, [], [], []
    for word in dict.fromkeys(words):
        members = np.array([w == word for w in words])
        word_senses = [s for s, m in zip(senses, members) if m]
        per_word[word] = float(hits[members].mean())
        aucs.append(pair_auc(vectors[members], word_senses))
        unit = unit_rows(vectors[members])
        cosine = unit @ unit.T
        cosines.append(cosine[~np.eye(len(unit), dtype=bool)].mean())
        separations.append(sense_scores(vectors[members], word_senses)[1])
    return Scores(hits, per_word, float(hits.mean()), float(np.mean(aucs)), float(np.mean(cosines)),
                  float(np.mean(separations)))


def sentence_means(vectors: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
    """The mean row of each sentence (``Doc.vector`` under the similarity hooks), from all tokens' rows in order."""
    bounds = np.cumsum([0, *lengths])
    return np.stack([vectors[a:b].mean(axis=0) for a, b in zip(bounds[:-1], bounds[1:])])


Result = Tuple[Dict[str, Scores], Dict[str, Scores], np.ndarray]


def evaluate(options_file: Optional[str], weight_file: Optional[str], datasets: Dict[str, Sequence[Occurrence]],
             reference: Sequence[str]) -> Dict[str, Result]:
    """Per data set: token and sentence scores of every representation, and the reference text's mean layer norms."""
    nlp = elmo_pipeline(options_file, weight_file)
    _, reference_layers = stacked_vectors(elmo_docs(nlp, reference))
    norms, centre = mean_layer_norms(reference_layers), reference_layers.mean(axis=1)
    results = {}
    for name, occurrences in datasets.items():
        docs = elmo_docs(nlp, [o.sentence for o in occurrences])
        default, layers = stacked_vectors(docs)
        rows = target_rows(docs, occurrences)
        views = {DEFAULT_VIEW: default, **layer_mixes(layers, norms, centre)}
        lengths = [len(doc) for doc in docs]
        tokens = {view: score(vectors[rows], occurrences) for view, vectors in views.items()}
        sentences = {view: score(sentence_means(vectors, lengths), occurrences) for view, vectors in views.items()}
        results[name] = (tokens, sentences, norms)
    return results


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    return "\n".join(["", *lines, *("| " + " | ".join(row) + " |" for row in rows), ""])


def report(results: Dict[str, Result], occurrences: Sequence[Occurrence]) -> None:
    """Print one data set's overall table (trained biLM, untrained control's 1-NN) and its per-word table."""
    (tokens, sentences, norms), control = results["trained"], results["untrained"]
    header = ["representation", "token 1-NN", "vs default", "token AUC", "mean cos", "separation", "sentence 1-NN",
              "sentence AUC", "sentence mean cos", "control: token / sentence 1-NN"]
    rows = []
    default = tokens[DEFAULT_VIEW]
    for view, s in tokens.items():
        won, lost = int((s.hits & ~default.hits).sum()), int((~s.hits & default.hits).sum())
        d = sentences[view]
        rows.append([view, f"{s.overall:.3f} ({s.hits.sum()}/{len(s.hits)})", f"+{won} −{lost}", f"{s.auc:.3f}",
                     f"{s.mean_cosine:.3f}", f"{s.separation:+.3f}", f"{d.overall:.3f}", f"{d.auc:.3f}",
                     f"{d.mean_cosine:.3f}", f"{control[0][view].overall:.3f} / {control[1][view].overall:.3f}"])
    print(markdown_table(header, rows))
    words = list(dict.fromkeys(o.word for o in occurrences))
    print("\nTrained biLM, token 1-NN sense accuracy per word (mean token norm of the layers on the reference text: "
          + ", ".join(f"{n:.1f}" for n in norms) + ")")
    print(markdown_table(["word", *tokens], [[word, *(f"{s.per_word[word]:.2f}" for s in tokens.values())] for word in words]))


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--options", help="options.json of the biLM (default: the embedded English model)")
    parser.add_argument("--weights", help="weights .hdf5 of the biLM (with --options)")
    parser.add_argument("--data", type=Path, nargs="+", default=DEFAULT_DATA,
                        help="word<TAB>sense<TAB>sentence files with a header, or {word: {sense: [sentences]}} JSON")
    parser.add_argument("--reference", type=Path, default=REFERENCE,
                        help="gzip text, one sentence a line, for the layers' norms and centres (not scored)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the untrained control's weights")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if (args.options is None) != (args.weights is None):
        parser.error("give both --options and --weights, or neither (the embedded English model)")
    if not args.reference.is_file():
        parser.error(f"reference text {args.reference} not found; put ../shared beside the checkout or give --reference")
    torch.set_num_threads(args.threads)
    datasets = {path.name: read_occurrences(path) for path in args.data}
    reference = read_reference(args.reference)
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        options_file = args.options or str(default_model_files()[0])
        untrained = write_untrained(Path(options_file), Path(tmp), seed=args.seed)
        trained = evaluate(args.options, args.weights, datasets, reference)
        control = evaluate(*map(str, untrained), datasets, reference)
    print(f"Word-sense probes, leave-one-out among the occurrences of the same word. Model: "
          f"{args.options or 'the embedded English model'}; untrained control: same architecture, seed {args.seed}; "
          f"reference text: {len(reference)} lines of {args.reference.name}; {time.time() - start:.0f} s, "
          f"{args.threads} thread(s).")
    for name, occurrences in datasets.items():
        counts = Counter((o.word, o.sense) for o in occurrences)
        print(f"\n### {name}: {len({w for w, _ in counts})} words, {len(counts)} senses, {len(occurrences)} sentences "
              f"({min(counts.values())}-{max(counts.values())} per sense)")
        report({"trained": trained[name], "untrained": control[name]}, occurrences)


if __name__ == "__main__":
    main()
