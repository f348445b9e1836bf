"""How far the deterministic starting states are from the vectors the references give in steady use.

AllenNLP and bilm-tf carry the LSTM state from one sentence to the next, and the published models
were trained that way; this package starts every sentence from a fixed state instead
(``initial_state="zeros"`` or ``"warm"``). Here the "steady-state" vectors of a target sentence are
those of the stateful reference after a history of ``--history`` other held-out sentences (row-wise
carried state, exactly as ``ElmoEmbedder(stateful=True)``), for ``--histories`` different random
histories. For each biLM layer the script reports, averaged over all tokens of ``--targets`` held-out
sentences, the cosine distance and the relative L2 distance ``|x - s| / |s|`` of

* zeros-start and warm-start vectors to each steady-state vector (averaged over histories),
* the same to the mean of the steady-state vectors over histories,
* steady-state vectors of two different histories to each other (how much history alone moves them),

overall and for the first and last three tokens of each sentence (where the forward and backward
LSTMs have read least of the sentence).

    python benchmarks/initial_state.py                       # the two reference fixture models
    python benchmarks/initial_state.py --options o.json --weights w.hdf5
"""
import argparse
import gzip
import random
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from spacy_elmo.model.batch_encoder import BatchEncoder

from spacy_elmo.model.encoder import ElmoEncoder  # noqa: E402
from spacy_elmo.formats.weights import load_files  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
HELDOUT = SHARED / "lm_gutenberg_en" / "heldout.txt.gz"
FIXTURES = {
    "allennlp fixture": (
        SHARED / "elmo_fixture/allennlp/options.json",
        SHARED / "elmo_fixture/allennlp/lm_weights.hdf5",
    ),
    "bilm-tf fixture": (
        SHARED / "elmo_fixture/bilm-tf/model/options.json",
        SHARED / "elmo_fixture/bilm-tf/model/lm_weights.hdf5",
    ),
}

# Token positions compared, given the sentence length.
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


def steady_state(
    encoder: ElmoEncoder, targets: Sequence[Sequence[str]], history: Sequence[Sequence[Sequence[str]]]
) -> List[torch.Tensor]:
    """Stateful vectors of each target after its row's history (``history[m][r]``: row r's m-th sentence).

    ``encoder`` must start from zeros, as the references do; each row's state is carried on.
    """
    state = None
    for sentences in history:
        _, _, state = encoder.forward(sentences, state)
    layers, _, _ = encoder.forward(targets, state)
    return [layers[:, r, : len(s)] for r, s in enumerate(targets)]


def measure(
    options_file: Path,
    weights_file: Path,
    pool: List[List[str]],
    n_targets: int,
    n_histories: int,
    history: int,
    seed: int,
) -> Dict[str, np.ndarray]:
    """Mean distances, keyed by comparison and token subset, each ``(n_layers, 2)``: cosine, relative L2."""
    rng = random.Random(seed)
    order = list(range(len(pool)))
    rng.shuffle(order)
    targets = [pool[i] for i in order[:n_targets]]
    others = [pool[i] for i in order[n_targets:]]
    bilm = load_files(options_file, weights_file)
    starts = {name: ElmoEncoder(bilm, initial_state=name).eval() for name in ("zeros", "warm")}
    with torch.inference_mode():
        fixed = {name: BatchEncoder(enc).per_sentence(targets, 4096) for name, enc in starts.items()}
        steady = [
            steady_state(starts["zeros"], targets, [rng.sample(others, n_targets) for _ in range(history)])
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
        (steady[a][r], steady[b][r])
        for a in range(n_histories)
        for b in range(a + 1, n_histories)
        for r in range(n_targets)
    ]
    results = {}
    for key, pairs in comparisons.items():
        for subset, pick in SUBSETS.items():
            sums = None
            count = 0
            for x, ref in pairs:
                cos, rel = distances(x[1:, pick(x.shape[1])], ref[1:, pick(x.shape[1])])  # LSTM layers only
                part = torch.stack((cos.sum(-1), rel.sum(-1)), dim=-1)
                sums = part if sums is None else sums + part
                count += cos.shape[-1]
            results[f"{key} | {subset}"] = (sums / count).numpy()
    return results


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--options", type=Path, help="options.json (default: the two reference fixture models)")
    parser.add_argument("--weights", type=Path)
    parser.add_argument("--text", type=Path, default=HELDOUT, help="gzip text, a whitespace-tokenised sentence a line")
    parser.add_argument("--targets", type=int, default=200)
    parser.add_argument("--histories", type=int, default=5)
    parser.add_argument("--history", type=int, default=10, help="sentences of history before each target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if (args.options is None) != (args.weights is None):
        parser.error("give both --options and --weights, or neither")
    torch.set_num_threads(args.threads)
    models = {str(args.options): (args.options, args.weights)} if args.options else FIXTURES
    pool = read_sentences(args.text, 5, 40)
    print(f"command: python {' '.join(sys.argv)}")
    print(
        f"text: {args.text} ({len(pool)} sentences of 5-40 tokens); {args.targets} targets, {args.histories} "
        f"histories of {args.history} random other sentences each (seed {args.seed})"
    )
    for name, (options_file, weights_file) in models.items():
        results = measure(options_file, weights_file, pool, args.targets, args.histories, args.history, args.seed)
        n_layers = next(iter(results.values())).shape[0]
        print(f"\n### {name}\n")
        header = " | ".join(f"layer {k + 1} cos / rel L2" for k in range(n_layers))
        print(f"| comparison | tokens | {header} |")
        print("| --- | --- |" + " ---: |" * n_layers)
        for key, value in results.items():
            comparison, subset = key.split(" | ")
            cells = " | ".join(f"{c:.4f} / {r:.3f}" for c, r in value)
            print(f"| {comparison} | {subset} | {cells} |")


if __name__ == "__main__":
    main()
