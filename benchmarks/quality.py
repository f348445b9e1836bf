"""What the vectors are worth: probes, downstream tasks, fidelity to fp32, the initial state; and the untrained control.

    python benchmarks/quality.py senses                 # word-sense probe of Token._.elmo and other mixes
    python benchmarks/quality.py pos --train-sentences 2000 --threads 1      # linear POS probe (UD English-EWT)
    python benchmarks/quality.py downstream OUT_DIR --tasks ner tagger --seeds 0 1    # spaCy tasks with/without ELMo
    python benchmarks/quality.py fidelity --models allennlp,embedded,small   # int8 / bf16 against fp32, per layer
    python benchmarks/quality.py initial-state          # zeros / warm starts against the references' carried state
    python benchmarks/quality.py untrained OUT_DIR      # seeded random weights of a model's architecture (control)

Every probe scores an untrained biLM of the same architecture beside the trained one: a score the control matches
was not earned by language-model pretraining. ``--options/--weights`` score another biLM (default: the embedded
English model). Research-only data sets are read from ../shared/data beside the checkout.
"""
import argparse
import csv
import gzip
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import spacy
import torch
from spacy.language import Language
from spacy.tokens import Doc

from common import ROOT, SHARED, header, load_sentences, seeded_model
from spacy_elmo import ElmoEmbedder, ElmoOptions
from spacy_elmo.commands.demo import nearest_neighbours, sense_scores
from spacy_elmo.formats.weights import load_files, save_files
from spacy_elmo.model.bilm import PARTS, PRECISION_PARTS, BiLm
from spacy_elmo.model.encoder import ElmoEncoder
from spacy_elmo.model.fixed_mix import DEFAULT_MIX
from spacy_elmo import embedded_model_files

DATA = Path(__file__).resolve().parent / "data"
DEFAULT_DATA = [DATA / "wsd_sentences.tsv", DATA / "wsd_second_probe.json"]
HELDOUT = SHARED / "lm_gutenberg_en" / "heldout.txt.gz"
REFERENCE_LINES = 1500
FIXTURE = ROOT / "tests" / "fixtures" / "elmo" / "allennlp"
FIXTURES = {
    "allennlp fixture": (FIXTURE / "options.json", FIXTURE / "lm_weights.hdf5"),
    "bilm-tf fixture": (ROOT / "tests/fixtures/elmo/bilm-tf/model/options.json",
                        ROOT / "tests/fixtures/elmo/bilm-tf/model/lm_weights.hdf5"),
}
VARIANTS = ("baseline", "trained", "adapted", "candidate", "untrained")
ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
EPS = 1e-12
DEFAULT_VIEW = f"default Token._.elmo (mix {DEFAULT_MIX!r})"


# --- the untrained control -------------------------------------------------------------------------------------------

def write_untrained(options_file: Path, out_dir: Path, seed: int = 0) -> Tuple[Path, Path]:
    """Save a freshly initialised biLM (``torch.manual_seed(seed)``) with the options of ``options_file``."""
    torch.manual_seed(seed)
    files = out_dir / "options.json", out_dir / "weights.hdf5"
    save_files(BiLm(ElmoOptions.from_file(options_file)), *files)
    return files




# --- the component's vectors and mixes of its layers --------------------------------------------------------------

def elmo_pipeline(options_file: Optional[str] = None, weight_file: Optional[str] = None) -> Language:
    """A blank English pipeline (spaCy's tokenizer) with the ``elmo`` component: default mix, layers kept too."""
    nlp = spacy.blank("en")
    model = {"@architectures": "spacy_elmo.ElmoBiLm.v2", "options_file": options_file, "weight_file": weight_file}
    nlp.add_pipe("elmo", config={"model": model, "store_layers": True})
    return nlp


def elmo_docs(nlp: Language, texts: Iterable[str]) -> List[Doc]:
    """The texts tokenised by spaCy and run through the pipeline."""
    return list(nlp.pipe(texts))


def elmo_docs_from_words(nlp: Language, sentences: Iterable[List[str]]) -> List[Doc]:
    """Pre-tokenised sentences (e.g. a treebank's words) run through the pipeline."""
    return list(nlp.pipe(Doc(nlp.vocab, words=words) for words in sentences))


def stacked_vectors(docs: Iterable[Doc]) -> Tuple[np.ndarray, np.ndarray]:
    """All tokens of ``docs`` in order: ``Token._.elmo`` ``(n_tokens, dim)``, layers ``(n_layers, n_tokens, dim)``."""
    docs = list(docs)
    return np.concatenate([doc._.elmo for doc in docs]), np.concatenate([doc._.elmo_layers for doc in docs], axis=1)


def mean_layer_norms(layers: np.ndarray) -> np.ndarray:
    """Mean Euclidean norm of the token vectors of each layer: ``(n_layers,)`` from ``(n_layers, n_tokens, dim)``."""
    return np.linalg.norm(layers, axis=2).mean(axis=1)


def norm_balancing_weights(layer_norms: np.ndarray) -> np.ndarray:
    """Fixed layer weights in proportion to ``1 / mean norm``, summing to 1: each layer adds as much length."""
    inverse = 1.0 / np.maximum(layer_norms, EPS)
    return inverse / inverse.sum()


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Each vector (along the last axis) scaled to length 1 (zero vectors stay zero)."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), EPS)


def layer_mixes(layers: np.ndarray, layer_norms: np.ndarray, centre: Optional[np.ndarray] = None) -> Dict[str, np.ndarray]:
    """Token vectors ``(n_tokens, dim')`` by name, from layers ``(n_layers, n_tokens, dim)``.

    ``layer_norms``: each layer's mean token norm (:func:`mean_layer_norms`), for the fixed weights that scale the
    layers; ``centre``: each layer's mean vector ``(n_layers, dim)``, for the centred mixes (left out when None).
    Compute both on data the scores are not taken from, so that scored tokens do not set their own weights.
    """
    n_layers = layers.shape[0]
    mixes = {f"layer {k}" + (" (= mix 'top')" if k == n_layers - 1 else ""): layers[k] for k in range(n_layers)}
    mixes[f"mean of LSTM layers 1-{n_layers - 1}"] = layers[1:].mean(axis=0)
    lstm_weights = np.concatenate([[0.0], norm_balancing_weights(layer_norms[1:])]).astype(layers.dtype)
    mixes["LSTM layers at unit mean norm"] = np.tensordot(lstm_weights, layers, axes=1)
    mixes["norm-balanced fixed weights"] = np.tensordot(norm_balancing_weights(layer_norms), layers, axes=1)
    mixes["mean of L2-normalised layers"] = unit_rows(layers).mean(axis=0)
    if centre is not None:
        centred = layers - centre[:, None, :]
        mixes["centred average"] = centred.mean(axis=0)
        mixes["centred top"] = centred[-1]
    mixes["concatenation of layers"] = np.concatenate(list(layers), axis=1)
    return mixes
# --- word senses ----------------------------------------------------------------------------------------------------

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


def evaluate_senses(options_file: Optional[str], weight_file: Optional[str], datasets: Dict[str, Sequence[Occurrence]],
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


def senses_report(results: Dict[str, Result], occurrences: Sequence[Occurrence]) -> None:
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




# --- POS probe ------------------------------------------------------------------------------------------------------

def token_views(nlp, train, test) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """Train and test vectors of every token, in order, by representation."""
    train_default, train_layers = stacked_vectors(elmo_docs_from_words(nlp, [w for w, _ in train]))
    test_default, test_layers = stacked_vectors(elmo_docs_from_words(nlp, [w for w, _ in test]))
    norms = mean_layer_norms(train_layers)
    test_mixes = layer_mixes(test_layers, norms)
    views = {DEFAULT_VIEW: (train_default, test_default)}
    views.update((name, (x, test_mixes[name])) for name, x in layer_mixes(train_layers, norms).items())
    return views


def probe(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray, n_classes: int) -> float:
    """Test accuracy of an L2-regularised softmax regression fitted with L-BFGS."""
    mean, std = train_x.mean(0), train_x.std(0) + 1e-6
    x = torch.from_numpy((train_x - mean) / std)
    y = torch.from_numpy(train_y)
    linear = torch.nn.Linear(x.shape[1], n_classes)
    optimizer = torch.optim.LBFGS(linear.parameters(), max_iter=300, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(linear(x), y) + 1e-4 * linear.weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        predicted = linear(torch.from_numpy((test_x - mean) / std)).argmax(1).numpy()
    return float((predicted == test_y).mean())


def evaluate_pos(options_file: Optional[str], weight_file: Optional[str], train, test, tagset) -> Dict[str, float]:
    """Probe accuracy of each representation of the biLM's vectors."""
    train_y = np.array([tagset.index(t) for _, tags in train for t in tags])
    test_y = np.array([tagset.index(t) if t in tagset else -1 for _, tags in test for t in tags])
    views = token_views(elmo_pipeline(options_file, weight_file), train, test)
    return {name: probe(a, train_y, b, test_y, len(tagset)) for name, (a, b) in views.items()}




# --- fidelity of reduced precisions ----------------------------------------------------------------------------------

def layer_fidelity(reference: Sequence[np.ndarray], result: Sequence[np.ndarray]) -> List[Tuple[float, float, float]]:
    """Per layer: mean and 1st-percentile cosine per token to ``reference``, and the max abs difference."""
    out = []
    for layer in range(reference[0].shape[0]):
        x = np.concatenate([r[layer] for r in reference])
        y = np.concatenate([r[layer] for r in result])
        cos = (x * y).sum(1) / np.maximum(np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1), 1e-30)
        out.append((float(cos.mean()), float(np.percentile(cos, 1)), float(np.abs(x - y).max())))
    return out


def settings(parts_alone: bool, precisions: Sequence[str]) -> Iterator[Tuple[str, Tuple[str, ...], str]]:
    """(precision, parts, label) to measure."""
    for precision in precisions:
        if parts_alone:
            for part in PARTS:
                yield precision, (part,), part
        else:
            yield precision, PRECISION_PARTS[precision], "as set"




# --- initial state -----------------------------------------------------------------------------------------------------

SUBSETS: Dict[str, Callable[[int], slice]] = {
    "all": lambda n: slice(None),
    "first 3": lambda n: slice(0, 3),
    "last 3": lambda n: slice(n - 3, n),
}


def read_sentences(path: Path, min_len: int, max_len: int) -> List[List[str]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [s for s in (line.split() for line in f) if min_len <= len(s) <= max_len]


def distances(x: torch.Tensor, ref: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-vector cosine distance and relative L2 distance of ``x`` to ``ref`` (last dim is the vector)."""
    cos = torch.nn.functional.cosine_similarity(x, ref, dim=-1, eps=1e-12)
    rel = (x - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-12)
    return 1.0 - cos, rel


def steady_state(embedder: ElmoEmbedder, targets: Sequence[Sequence[str]],
                 history: Sequence[Sequence[Sequence[str]]]) -> List[torch.Tensor]:
    """Vectors of each target after its row's history (``history[m][r]``: row r's m-th sentence), from a stateful
    embedder started from zeros, as the references start: each row's state is carried from call to call."""
    embedder.reset_states()
    for sentences in history:
        embedder.embed_batch(sentences)
    return [torch.from_numpy(x) for x in embedder.embed_batch(targets)]


def initial_state_distances(options_file: Path, weights_file: Path, pool: List[List[str]], n_targets: int,
                            n_histories: int, history: int, seed: int) -> Dict[str, np.ndarray]:
    """Mean distances, keyed by comparison and token subset, each ``(n_layers, 2)``: cosine, relative L2."""
    rng = random.Random(seed)
    order = list(range(len(pool)))
    rng.shuffle(order)
    targets = [pool[i] for i in order[:n_targets]]
    others = [pool[i] for i in order[n_targets:]]
    fixed = {
        name: [torch.from_numpy(x) for x in ElmoEmbedder(options_file, weights_file, initial_state=name,
                                                         threads=None).embed_batch(targets)]
        for name in ("zeros", "warm")
    }
    stateful = ElmoEmbedder(options_file, weights_file, initial_state="zeros", stateful=True, threads=None)
    steady = [
        steady_state(stateful, targets, [rng.sample(others, n_targets) for _ in range(history)])
        for _ in range(n_histories)
    ]
    mean_steady = [torch.stack([s[r] for s in steady]).mean(0) for r in range(n_targets)]
    comparisons: Dict[str, List[Tuple[torch.Tensor, torch.Tensor]]] = {
        f"{name} vs steady": [(fixed[name][r], s[r]) for s in steady for r in range(n_targets)] for name in fixed
    }
    comparisons.update(
        {f"{name} vs mean steady": [(fixed[name][r], mean_steady[r]) for r in range(n_targets)] for name in fixed}
    )
    comparisons["steady vs steady (other history)"] = [
        (steady[a][r], steady[b][r]) for a in range(n_histories) for b in range(a + 1, n_histories) for r in range(n_targets)
    ]
    results = {}
    for key, pairs in comparisons.items():
        for subset, pick in SUBSETS.items():
            sums, count = None, 0
            for x, ref in pairs:
                cos, rel = distances(x[1:, pick(x.shape[1])], ref[1:, pick(x.shape[1])])  # LSTM layers only
                part = torch.stack((cos.sum(-1), rel.sum(-1)), dim=-1)
                sums = part if sums is None else sums + part
                count += cos.shape[-1]
            results[f"{key} | {subset}"] = (sums / count).numpy()
    return results


# --- downstream ------------------------------------------------------------------------------------------------------

class Task(NamedTuple):
    """A downstream task: its project conversion command, training cap and the test metrics reported."""

    convert: str
    max_steps: int
    eval_frequency: int
    metrics: Sequence[str]


TASKS: Dict[str, Task] = {
    "ner": Task("convert-ner", 1500, 100, ("ents_f", "ents_p", "ents_r")),
    "tagger": Task("convert-tagger", 1500, 250, ("pos_acc", "tag_acc", "morph_acc", "dep_uas", "dep_las")),
}


def run_logged(command: List[str], log: Path) -> float:
    """Run ``command`` from the repository root on one thread, its output in ``log``; return its wall time."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w", encoding="utf8") as out:
        done = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **ONE_THREAD})
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}); see {log}")
    return time.perf_counter() - start


def corpus_dir(task: str, train_pct: int) -> Path:
    """The task's converted data, converted by the project's command when missing."""
    folder = ROOT / "corpus" / "full" / f"{task}-p{train_pct}"
    if not (folder / "test.spacy").exists():
        command = [sys.executable, "-m", "spacy", "project", "run", TASKS[task].convert, ".", "--vars.train_pct"]
        run_logged(command + [str(train_pct)], folder.parent / f"{task}-p{train_pct}.convert.log")
    return folder


def adapt(task: str, data: Path, out: Path, steps: int) -> Path:
    """Continue the embedded biLM's pretraining run on the task's training text; return the folder of the adapted
    biLM at its lowest dev perplexity (the run's ``best/``)."""
    bilm = out / task / "bilm"
    if (bilm / "best" / "weights.hdf5").exists():
        return bilm / "best"
    for split in ("train", "dev"):
        text = out / task / f"{split}.txt"
        command = [sys.executable, "scripts/corpus.py", "text", str(data / f"{split}.spacy"), str(text)]
        run_logged(command, text.with_suffix(".log"))
    command = [
        sys.executable, "-m", "spacy_elmo", "pretrain", "configs/adapt_en_gutenberg_tiny.cfg", str(bilm),
        "--paths.train", str(out / task / "train.txt"), "--paths.dev", str(out / task / "dev.txt"),
        "--training.max_steps", str(steps), "--quiet",  # [initialize]: the embedded run and the shipped biLM
    ]  # fmt: skip
    seconds = run_logged(command, out / task / "adapt.log")
    print(f"adapted the biLM to {task} in {seconds:.0f} s", flush=True)
    return bilm / "best"


def untrained(out: Path, seed: int) -> Path:
    """Seeded random weights of the embedded English architecture (written once per seed)."""
    folder = out / f"untrained-s{seed}"
    if not (folder / "weights.hdf5").exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_untrained(embedded_model_files("en")[0], folder, seed)
    return folder


def train_and_evaluate(
    task: str,
    variant: str,
    seed: int,
    data: Path,
    bilm: Optional[Path],
    out: Path,
    max_steps: Optional[int],
    precision: str = "fp32",
) -> Dict:
    """Train one pipeline, evaluate its best model on the test set; return the test metrics and the wall time."""
    run_dir = out / task / f"{variant}-s{seed}"
    metrics_file = run_dir / "test.json"
    if metrics_file.exists():
        return json.loads(metrics_file.read_text(encoding="utf8"))
    spec = TASKS[task]
    steps = max_steps or spec.max_steps
    config = f"configs/{task}_baseline.cfg" if variant == "baseline" else f"configs/{task}.cfg"
    command = [
        sys.executable, "-m", "spacy", "train", config, "--output", str(run_dir / "training"),
        "--paths.train", str(data / "train.spacy"), "--paths.dev", str(data / "dev.spacy"),
        "--training.max_steps", str(steps), "--training.eval_frequency", str(min(steps, spec.eval_frequency)),
        "--system.seed", str(seed),
    ]  # fmt: skip
    if bilm is not None:
        command += ["--paths.elmo_options", str(bilm / "options.json")]
        command += ["--paths.elmo_weights", str(bilm / "weights.hdf5")]
    if variant != "baseline":
        command += ["--components.elmo.model.precision", precision]
    seconds = run_logged(command, run_dir / "train.log")
    scores_file = run_dir / "scores.json"
    best = run_dir / "training" / "model-best"
    evaluate = [sys.executable, "-m", "spacy", "evaluate", str(best), str(data / "test.spacy")]
    run_logged(evaluate + ["--output", str(scores_file)], run_dir / "evaluate.log")
    scores = json.loads(scores_file.read_text(encoding="utf8"))
    result = {name: scores[name] for name in spec.metrics} | {"train_seconds": round(seconds)}
    metrics_file.write_text(json.dumps(result, indent=2), encoding="utf8")
    print(f"{task} {variant} seed {seed}: {result}", flush=True)
    return result


def when_adapted(
    adapting: Future, task: str, seed: int, data: Path, out: Path, max_steps: Optional[int], precision: str
) -> Dict:
    """``train_and_evaluate`` on the adapted biLM that ``adapting`` (an :func:`adapt` submitted earlier) writes."""
    return train_and_evaluate(task, "adapted", seed, data, adapting.result(), out, max_steps, precision)


def downstream_table(results: Dict[str, Dict[str, Dict[int, Dict]]]) -> str:
    """Markdown: one row per task, variant and metric; test scores x100 per seed, their mean and Δ to baseline."""
    lines = ["| task | variant | metric | per seed | mean | Δ vs baseline |"]
    lines.append("| --- | --- | --- | --- | ---: | ---: |")
    for task, by_variant in results.items():
        base = by_variant.get("baseline")
        for variant, by_seed in by_variant.items():
            for metric in TASKS[task].metrics:
                values = [100 * by_seed[seed][metric] for seed in sorted(by_seed)]
                mean = statistics.fmean(values)
                diff = ""
                if base and variant != "baseline":
                    diff = f"{mean - statistics.fmean(100 * runs[metric] for runs in base.values()):+.2f}"
                shown = " / ".join(f"{v:.2f}" for v in values)
                lines.append(f"| {task} | {variant} | {metric} | {shown} | {mean:.2f} | {diff} |")
    return "\n".join(lines) + "\n"




# --- subcommands -------------------------------------------------------------------------------------------------------

def both_or_neither(args: argparse.Namespace) -> None:
    if (args.options is None) != (args.weights is None):
        sys.exit("give both --options and --weights, or neither (the embedded English model)")


def senses(args: argparse.Namespace) -> None:
    """Word senses: leave-one-out nearest neighbours, pair AUC and cosine scale of each mix of the layers, on two
    sets of sentences written for the probe (18 ambiguous words, two senses each, six sentences per sense).

    The mixes that scale or centre the layers take each layer's mean norm and mean vector from held-out Gutenberg
    text the probe does not score (``--reference``)."""
    both_or_neither(args)
    if not args.reference.is_file():
        sys.exit(f"reference text {args.reference} not found; put ../shared beside the checkout or give --reference")
    torch.set_num_threads(args.threads)
    datasets = {path.name: read_occurrences(path) for path in args.data}
    reference = read_reference(args.reference)
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        untrained = write_untrained(Path(args.options or embedded_model_files()[0]), Path(tmp), seed=args.seed)
        trained = evaluate_senses(args.options, args.weights, datasets, reference)
        control = evaluate_senses(*map(str, untrained), datasets, reference)
    header(sys.argv)
    print(f"Model: {args.options or 'the embedded English model'}; untrained control: same architecture, seed "
          f"{args.seed}; reference text: {len(reference)} lines of {args.reference.name}; {time.time() - start:.0f} s")
    for name, occurrences in datasets.items():
        counts = Counter((o.word, o.sense) for o in occurrences)
        print(f"\n### {name}: {len({w for w, _ in counts})} words, {len(counts)} senses, {len(occurrences)} sentences "
              f"({min(counts.values())}-{max(counts.values())} per sense)")
        senses_report({"trained": trained[name], "untrained": control[name]}, occurrences)


def pos(args: argparse.Namespace) -> None:
    """Linear POS probe (the paper's Table 6 method): softmax regression on frozen vectors of the first
    ``--train-sentences`` UD English-EWT training sentences, UPOS accuracy on its test set, for the default
    ``Token._.elmo``, each layer and the other mixes (the centred ones left out: the probe standardises every
    feature), beside an untrained biLM of the same architecture."""
    both_or_neither(args)
    torch.set_num_threads(args.threads)
    train = load_sentences("ud", "train", limit=args.train_sentences, tags=True)
    test = load_sentences("ud", "test", tags=True)
    tagset = sorted({t for _, tags in train for t in tags})
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        untrained = write_untrained(Path(args.options or embedded_model_files()[0]), Path(tmp), seed=args.seed)
        rows = {
            "pretrained": evaluate_pos(args.options, args.weights, train, test, tagset),
            f"untrained (seed {args.seed})": evaluate_pos(*map(str, untrained), train, test, tagset),
        }
    header(sys.argv)
    print(f"UPOS linear probe: trained on {len(train)} UD-EWT train sentences ({sum(len(w) for w, _ in train)} "
          f"tokens), tested on {len(test)} test sentences ({sum(len(w) for w, _ in test)} tokens); model "
          f"{args.options or 'the embedded English model'}; {time.time() - start:.0f} s\n")
    print("| representation | " + " | ".join(rows) + " |")
    print("| --- |" + " ---: |" * len(rows))
    for view in next(iter(rows.values())):
        print(f"| {view} | " + " | ".join(f"{100 * scores[view]:.1f}" for scores in rows.values()) + " |")


def encode(encoder: ElmoEncoder, sentences: Sequence[Sequence[str]], batch_size: int = 32) -> List[np.ndarray]:
    """Each sentence's layers ``(n_layers + 1, len, dim)`` from the encoder, ``batch_size`` sentences a pass."""
    out: List[np.ndarray] = []
    with torch.inference_mode():
        for start in range(0, len(sentences), batch_size):
            batch = sentences[start : start + batch_size]
            layers = encoder(batch)[0].float().numpy()
            out += [layers[:, i, : len(s)] for i, s in enumerate(batch)]
    return out


def fidelity(args: argparse.Namespace) -> None:
    """Cosine per token (mean, 1st percentile) and max abs difference of each layer at a reduced precision against
    fp32: each precision with the parts its setting runs, or each part alone (``--parts``). Models: ``allennlp``
    (the test fixture), ``embedded``, or seeded weights of ``small``/``medium``/``original``. bf16 runs through the
    model's own switch, so it is measured (emulated, slowly) on CPUs that refuse the setting."""
    torch.set_num_threads(1)
    text = load_sentences("ud", "dev", 5, 40, args.sentences)
    header(sys.argv)
    print(f"{len(text)} UD-EWT dev sentences of 5-40 tokens, {sum(map(len, text))} words, initial state zeros\n")
    print("| model | precision | parts | layer | cosine mean | cosine 1st pct | max abs diff |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            if name == "allennlp":
                files = FIXTURE / "options.json", FIXTURE / "lm_weights.hdf5"
            else:
                files = embedded_model_files() if name == "embedded" else seeded_model(Path(tmp), name)
            encoder = ElmoEncoder(load_files(*files)).eval()
            encoder.initial_state = "zeros"
            reference = encode(encoder, text)
            for precision, parts, label in settings(args.parts, args.precision.split(",")):
                encoder.bilm.set_precision(precision, parts)
                encoder.weights_changed()
                for layer, (mean, p1, diff) in enumerate(layer_fidelity(reference, encode(encoder, text))):
                    print(f"| {name} | {precision} | {label} | {layer} | {mean:.5f} | {p1:.4f} | {diff:.3f} |", flush=True)
            encoder.bilm.set_precision("fp32")


def initial_state(args: argparse.Namespace) -> None:
    """How far the fixed starts (``initial_state`` "zeros", "warm") are from the vectors the references give in
    steady use: the stateful embedder (state carried row by row, as AllenNLP and bilm-tf carry it) after
    ``--history`` random other held-out sentences, for ``--histories`` histories; and two histories from each other
    (the noise floor). Per LSTM layer, mean cosine distance and relative L2 distance, overall and for the first and
    last 3 tokens."""
    both_or_neither(args)
    torch.set_num_threads(args.threads)
    models = {str(args.options): (args.options, args.weights)} if args.options else FIXTURES
    pool = read_sentences(args.text, 5, 40)
    header(sys.argv)
    print(f"text: {args.text.name} ({len(pool)} sentences of 5-40 tokens); {args.targets} targets, {args.histories} "
          f"histories of {args.history} random other sentences each (seed {args.seed})")
    for name, (options_file, weights_file) in models.items():
        results = initial_state_distances(options_file, weights_file, pool, args.targets, args.histories,
                                          args.history, args.seed)
        n_layers = next(iter(results.values())).shape[0]
        print(f"\n### {name}\n")
        print("| comparison | tokens | " + " | ".join(f"layer {k + 1} cos / rel L2" for k in range(n_layers)) + " |")
        print("| --- | --- |" + " ---: |" * n_layers)
        for key, value in results.items():
            comparison, subset = key.split(" | ")
            print(f"| {comparison} | {subset} | " + " | ".join(f"{c:.4f} / {r:.3f}" for c, r in value) + " |")


def downstream(args: argparse.Namespace) -> None:
    """Each task trained with spaCy's CNN alone (``baseline``), with the embedded biLM (``trained``), with that biLM
    adapted to the task's training text (``adapted``), with another biLM (``candidate``, ``--candidate DIR``) and with
    an untrained biLM of the same architecture (``untrained``), over several seeds, everything else equal; test scores
    per seed, means and differences to the baseline in OUT_DIR/results.md. Data are converted by the project when
    missing; a run whose metrics exist is not run again, so an interrupted benchmark continues."""
    if ("candidate" in args.variants) != (args.candidate is not None):
        sys.exit("the candidate variant and --candidate DIR go together")
    if args.candidate is not None and not (args.candidate / "weights.hdf5").exists():
        sys.exit(f"{args.candidate} holds no weights.hdf5")
    candidate = args.candidate.resolve() if args.candidate else None
    out = args.out_dir.resolve()
    data = {task: corpus_dir(task, args.train_pct) for task in args.tasks}
    with ThreadPoolExecutor(args.jobs) as pool:
        # Adaptations first and the runs on adapted biLMs last: the other runs use the cores while a biLM adapts.
        adapt_tasks = args.tasks if "adapted" in args.variants else []
        adapt_data = {task: corpus_dir(task, args.adapt_pct or args.train_pct) for task in adapt_tasks}
        adapting = {task: pool.submit(adapt, task, adapt_data[task], out, args.adapt_steps) for task in adapt_tasks}
        jobs: Dict[str, Dict[str, Dict[int, Future]]] = {t: {v: {} for v in args.variants} for t in args.tasks}
        for variant in sorted(args.variants, key=lambda v: v == "adapted"):
            for task in args.tasks:
                for seed in args.seeds:
                    if variant == "adapted":
                        job = pool.submit(when_adapted, adapting[task], task, seed, data[task], out, args.max_steps,
                                          args.precision)
                    else:
                        bilm = {"untrained": untrained(out, seed) if variant == "untrained" else None,
                                "candidate": candidate}.get(variant)  # baseline: none; trained: the embedded one
                        job = pool.submit(train_and_evaluate, task, variant, seed, data[task], bilm, out,
                                          args.max_steps, args.precision)
                    jobs[task][variant][seed] = job
        results = {
            task: {variant: {seed: job.result() for seed, job in runs.items()} for variant, runs in by_variant.items()}
            for task, by_variant in jobs.items()
        }
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf8")
    summary = downstream_table(results)
    (out / "results.md").write_text(summary, encoding="utf8")
    print(summary)


def untrained_command(args: argparse.Namespace) -> None:
    """Write ``options.json`` + ``weights.hdf5`` with a model's architecture and seeded random weights, usable wherever
    the trained files are (``--paths.elmo_options/--paths.elmo_weights`` of a training config, ``ElmoEmbedder``)."""
    options_file = args.options or embedded_model_files(args.lang)[0]
    for path in write_untrained(Path(options_file), args.out_dir, args.seed):
        print(f"wrote {path}")


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = main.add_subparsers(dest="command", required=True)

    def command(name: str, function: Callable) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=function.__doc__.split("\n")[0], description=function.__doc__)
        p.set_defaults(function=function)
        return p

    def model(p: argparse.ArgumentParser, threads: int) -> None:
        p.add_argument("--options", help="options.json of the biLM (default: the embedded English model)")
        p.add_argument("--weights", help="weights .hdf5 of the biLM (with --options)")
        p.add_argument("--seed", type=int, default=0, help="seed of the untrained control's weights")
        p.add_argument("--threads", type=int, default=threads, help="torch threads")

    p = command("senses", senses)
    model(p, 1)
    p.add_argument("--data", type=Path, nargs="+", default=DEFAULT_DATA,
                   help="word<TAB>sense<TAB>sentence files with a header, or {word: {sense: [sentences]}} JSON")
    p.add_argument("--reference", type=Path, default=HELDOUT, help="gzip text for the layers' norms and centres")
    p = command("pos", pos)
    model(p, 1)
    p.add_argument("--train-sentences", type=int, default=2000)
    p = command("fidelity", fidelity)
    p.add_argument("--models", default="allennlp,embedded,small,original")
    p.add_argument("--precision", default="int8,bf16")
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--parts", action="store_true", help="each part alone at each precision")
    p = command("initial-state", initial_state)
    model(p, 1)
    p.add_argument("--text", type=Path, default=HELDOUT, help="gzip text, a whitespace-tokenised sentence a line")
    p.add_argument("--targets", type=int, default=200)
    p.add_argument("--histories", type=int, default=5)
    p.add_argument("--history", type=int, default=10, help="sentences of history before each target")
    p = command("downstream", downstream)
    p.add_argument("out_dir", type=Path)
    p.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=["tagger", "ner"])
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--train-pct", type=int, default=10)
    p.add_argument("--adapt-steps", type=int, default=300)
    p.add_argument("--adapt-pct", type=int, help="percent of the training set whose text adapts (default: --train-pct)")
    p.add_argument("--max-steps", type=int, help="training steps of every run (default: each task's cap)")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (one thread each)")
    p.add_argument("--precision", default="fp32", help="the biLM's precision in the ELMo variants")
    p.add_argument("--candidate", type=Path, help="folder with options.json + weights.hdf5 (the candidate variant)")
    p = command("untrained", untrained_command)
    p.add_argument("out_dir", type=Path)
    p.add_argument("--options", type=Path, help="options.json of the architecture (default: an embedded model's)")
    p.add_argument("--lang", default="en", help="embedded model whose architecture to copy (en, zh)")
    p.add_argument("--seed", type=int, default=0)
    return main


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parser().parse_args(argv)
    args.function(args)


if __name__ == "__main__":
    main()
