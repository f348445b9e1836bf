"""Which parts pay at a reduced precision on this CPU: speed and fidelity with some parts left in fp32.

Each variant is the precision's part set (``PRECISION_PARTS``) minus the parts named in one ``--keep-fp32``
group; fp32 and the full set run too. All variants are built on the same seeded weights and timed in
interleaved rounds in one process (words per CPU-second, one thread), so the speed ratios to fp32 share the
machine's state; the top layer's cosine to fp32 is given per variant.

    python benchmarks/int8_parts.py --preset small --keep-fp32 "lstm_projection;char_cnn;lstm_projection,char_cnn"
"""
import argparse
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import torch

from ab_embed import UD_DEV, interleaved_cpu_seconds
from bench_embed import _cpu_model, _load, make_model, read_conllu, run_embedder
from precision_fidelity import layer_fidelity
from spacy_elmo import ElmoEmbedder
from spacy_elmo.model.bilm import PRECISION_PARTS


def variants(precision: str, groups: Sequence[str]) -> Dict[str, Optional[Tuple[str, ...]]]:
    """Name -> parts at ``precision`` (None: fp32 throughout)."""
    full = PRECISION_PARTS[precision]
    chosen: Dict[str, Optional[Tuple[str, ...]]] = {"fp32": None, f"{precision}, all its parts": full}
    for group in groups:
        kept = set(group.split(","))
        chosen[f"{precision}, fp32 {group}"] = tuple(part for part in full if part not in kept)
    return chosen


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="small", choices=["small", "medium", "original"])
    parser.add_argument("--precision", default="int8")
    parser.add_argument("--keep-fp32", default="lstm_projection;char_cnn", help="';'-separated groups of parts")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cache-size", type=int, default=0, help="token cache (0: none), filled by the warm-up pass")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    sentences = read_conllu(UD_DEV, min_len=5, max_len=40, limit=args.sentences)
    words = sum(len(s) for s in sentences)
    embedders: Dict[str, ElmoEmbedder] = {}
    with tempfile.TemporaryDirectory() as tmp:
        options_file, weight_file = make_model(Path(tmp), 0, args.preset)
        for name, parts in variants(args.precision, args.keep_fp32.split(";")).items():
            embedder = ElmoEmbedder(options_file, weight_file, cache_size=args.cache_size, threads=1)
            if parts is not None:  # the model-level switch: the parts are this script's choice, not the setting's
                embedder.encoder.bilm.set_precision(args.precision, parts)
            embedders[name] = embedder
    outputs = {name: run_embedder(e, sentences, args.batch_size) for name, e in embedders.items()}  # and warm-up
    runs = {name: (lambda e=e: run_embedder(e, sentences, args.batch_size)) for name, e in embedders.items()}
    seconds = interleaved_cpu_seconds(runs, args.rounds)
    print(f"command: python benchmarks/int8_parts.py {shlex.join(sys.argv[1:] if argv is None else argv)}")
    print(f"machine: {_cpu_model()}; torch {torch.__version__}, 1 thread; load average after: {_load()}")
    cache = f"token cache {args.cache_size} (warm)" if args.cache_size else "no token cache"
    print(f"{args.preset}, {words} words in batches of {args.batch_size}, {cache}, {args.rounds} rounds\n")
    print("| variant | words per CPU-second (best) | x fp32 (median of rounds) | top layer cosine mean / 1st pct |")
    print("| --- | ---: | ---: | --- |")
    fp32 = np.array(seconds["fp32"])
    for name, times in seconds.items():
        times_np = np.array(times)
        mean, low, _ = layer_fidelity(outputs["fp32"], outputs[name])[-1]
        print(f"| {name} | {words / times_np.min():,.0f} | {np.median(fp32 / times_np):.2f} | {mean:.5f} / {low:.4f} |")


if __name__ == "__main__":
    main()
