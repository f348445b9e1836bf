"""One-sentence calls against the memory floor: the bytes of weights a one-row batch reads, over the read bandwidth.

A step of a one-row batch reads every layer's and direction's recurrent and projection weights, and a call reads
the input weights once (all steps in one product); at one row that traffic, not arithmetic, bounds the time. The
bandwidth is one thread's best ``sum`` over 512 MiB. fp32 and int8 (1 byte a weight) run interleaved, one thread,
warm token cache, seeded weights.

    python benchmarks/one_row_floor.py --preset original --sentences 12
"""
import argparse
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch

from ab_embed import UD_DEV, interleaved_cpu_seconds
from bench_embed import _cpu_model, _load, make_model, read_conllu, run_embedder
from spacy_elmo import ElmoEmbedder

WEIGHT_BYTES = {"fp32": 4, "int8": 1}


def read_bandwidth(mib: int = 512, repeats: int = 5) -> float:
    """Bytes per second one thread reads: the best of ``repeats`` sums over ``mib`` MiB."""
    x = torch.ones(mib * 2**18)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - start)
    return x.numel() * 4 / best


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="original", choices=["small", "medium", "original"])
    parser.add_argument("--sentences", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    sentences = read_conllu(UD_DEV, min_len=5, max_len=40, limit=args.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        options_file, weight_file = make_model(Path(tmp), 0, args.preset)
        embedders = {p: ElmoEmbedder(options_file, weight_file, precision=p, cache_size=20000) for p in WEIGHT_BYTES}
    runs = {name: (lambda e=e: run_embedder(e, sentences, 1)) for name, e in embedders.items()}
    for run in runs.values():
        run()  # warm-up: fills the token cache
    seconds: Dict[str, List[float]] = interleaved_cpu_seconds(runs, args.rounds)
    bandwidth = read_bandwidth()
    options = embedders["fp32"].options
    p, h, n = options.projection_dim, options.lstm_dim, options.n_layers
    per_step, per_call = 2 * n * (p * 4 * h + h * p), 2 * n * p * 4 * h  # weights, both directions
    steps = sum(len(s) + 2 for s in sentences)  # <S> and </S> run too
    print(f"command: python benchmarks/one_row_floor.py {shlex.join(sys.argv[1:] if argv is None else argv)}")
    print(f"machine: {_cpu_model()}; torch {torch.__version__}, 1 thread; load average after: {_load()}")
    print(f"{args.preset}, {len(sentences)} sentences of {sum(map(len, sentences)) / len(sentences):.1f} words, "
          f"one per call; read bandwidth {bandwidth / 1e9:.1f} GB/s")
    for name, size in WEIGHT_BYTES.items():
        floor = (per_step * steps + per_call * len(sentences)) * size / bandwidth / len(sentences)
        best = min(seconds[name]) / len(sentences)
        print(f"{name}: {best * 1e3:.0f} ms per call; weights read per step {per_step * size / 1e6:.0f} MB, per call "
              f"{per_call * size / 1e6:.0f} MB; floor {floor * 1e3:.0f} ms per call, reached {floor / best:.0%}")


if __name__ == "__main__":
    main()
