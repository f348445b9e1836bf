"""Old code against new in one process: ``ElmoEmbedder.embed_batch`` words per CPU-second of two source trees.

Run-to-run noise on a shared VM is about 20%, larger than most kernel changes; timing the two trees' passes
interleaved in one process, on the same weights and text, leaves only the noise between neighbouring passes.
The other tree (``--old``: a checkout, e.g. ``git worktree add ../old HEAD~1``) is imported under the name
``old_spacy_elmo`` without its ``__init__`` (only the embedder and what it imports), so spaCy's registry sees
one ``spacy_elmo``. Outputs of the two trees are compared too (max abs difference).

    git worktree add ../old_tree HEAD
    python benchmarks/ab_embed.py --old ../old_tree --preset small --precision int8 --rounds 5
"""
import argparse
import shlex
import importlib
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import torch

from bench_embed import UD, _cpu_model, _load, make_model, read_conllu, run_embedder
from spacy_elmo import ElmoEmbedder

UD_DEV = UD / "en_ewt-ud-dev.conllu"


def import_old_embedder(tree: Path) -> type:
    """``ElmoEmbedder`` of the package in ``tree``, imported as ``old_spacy_elmo`` (its ``__init__`` not run)."""
    package = types.ModuleType("old_spacy_elmo")
    package.__path__ = [str(tree / "spacy_elmo")]
    sys.modules["old_spacy_elmo"] = package
    return importlib.import_module("old_spacy_elmo.embedder").ElmoEmbedder


def interleaved_cpu_seconds(runs: Dict[str, Callable[[], object]], rounds: int) -> Dict[str, List[float]]:
    """Process CPU seconds of each run, ``rounds`` times, one run after the other in every round (so that
    neighbouring passes of different runs share the machine's state)."""
    seconds: Dict[str, List[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            start = time.process_time()
            fn()
            seconds[name].append(time.process_time() - start)
    return seconds


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=Path, required=True, help="the other source tree (its root)")
    parser.add_argument("--preset", default="small", choices=["small", "medium", "original"])
    parser.add_argument("--precision", default="int8")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--cache-size", type=int, default=0, help="token cache of both embedders (0: none)")
    parser.add_argument("--rounds", type=int, default=5, help="timed passes of each tree, interleaved")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    OldEmbedder = import_old_embedder(args.old.resolve())
    sentences = read_conllu(UD_DEV, min_len=5, max_len=40, limit=args.sentences)
    words = sum(len(s) for s in sentences)
    with tempfile.TemporaryDirectory() as tmp:
        options_file, weight_file = make_model(Path(tmp), args.seed, args.preset)
        settings = dict(precision=args.precision, cache_size=args.cache_size, threads=args.threads)
        embedders: Dict[str, object] = {
            "old": OldEmbedder(options_file, weight_file, **settings),
            "new": ElmoEmbedder(options_file, weight_file, **settings),
        }
    runs = {name: (lambda e=e: run_embedder(e, sentences, args.batch_size)) for name, e in embedders.items()}
    outputs = {name: fn() for name, fn in runs.items()}  # warm-up, and the outputs compared
    times = interleaved_cpu_seconds(runs, args.rounds)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(outputs["old"], outputs["new"]))
    print(f"command: python benchmarks/ab_embed.py {shlex.join(sys.argv[1:] if argv is None else argv)}")
    print(f"machine: {_cpu_model()}; "
          f"{args.threads} torch thread(s), torch {torch.__version__}; load average after: {_load()}")
    print(f"{args.preset}, precision {args.precision}, {words} words in batches of {args.batch_size}, "
          f"token cache {args.cache_size}; {args.rounds} interleaved rounds")
    for name, seconds in times.items():
        print(f"{name}: words per CPU-second best {words / min(seconds):,.0f}, median {words / np.median(seconds):,.0f}")
    ratios = [o / n for o, n in zip(times["old"], times["new"])]
    print(f"new / old speed: best-to-best {min(times['old']) / min(times['new']):.3f}, per round median "
          f"{np.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); max abs diff of outputs {diff:.2e}")


if __name__ == "__main__":
    main()
