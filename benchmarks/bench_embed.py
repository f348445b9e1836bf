"""``ElmoEmbedder.embed_batch`` words/s on the CPU, and the same as a share of the machine's fp32 GEMM rate.

The model is a published architecture (``--preset``: small 2x1024_128 by default, medium, original; 2048-channel
char CNN) with seeded random weights, written to and loaded from files like a real model. The text is the first ``--sentences``
sentences of 5-40 tokens of the UD English EWT dev set (whitespace tokens = the FORM column). Each setting runs
one warm-up pass, then ``--passes`` timed passes; the best pass counts. Outputs of all settings are compared with
the uncached all-at-once fp32 run: max abs diff, and the top layer's mean and 1st-percentile cosine per token.
``--precision`` lists the precisions to compare in the same run (old and new code side by side: the ratio to fp32
is the figure that survives a loaded machine); one this CPU refuses is reported with the reason.

    python benchmarks/bench_embed.py            # from the repository root; reads ../shared/data
    python benchmarks/bench_embed.py --threads 1 --precision fp32,int8,bf16 --batch-sizes all
"""
import argparse
import functools
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from spacy_elmo import ElmoEmbedder
from spacy_elmo.model.bilm import BiLm
from spacy_elmo.model.options import ElmoOptions, preset
from spacy_elmo.formats.weights import save_files

UD = Path(__file__).resolve().parents[2] / "shared" / "data" / "ud_english_ewt"


def read_conllu_tagged(
    path: Path, min_len: int = 1, max_len: int = 10**9, limit: Optional[int] = None
) -> List[Tuple[List[str], List[str]]]:
    """(FORM, UPOS) columns of the sentences of ``min_len``..``max_len`` tokens, in file order.

    Multi-word token lines and empty nodes are skipped.
    """
    sentences: List[Tuple[List[str], List[str]]] = []
    words: List[str] = []
    tags: List[str] = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                if min_len <= len(words) <= max_len:
                    sentences.append((words, tags))
                    if limit is not None and len(sentences) == limit:
                        break
                words, tags = [], []
            elif not line.startswith("#"):
                cols = line.split("\t")
                if cols[0].isdigit():
                    words.append(cols[1])
                    tags.append(cols[3])
    return sentences


def read_conllu(path: Path, min_len: int = 1, max_len: int = 10**9, limit: Optional[int] = None) -> List[List[str]]:
    """The FORM column of :func:`read_conllu_tagged`'s sentences."""
    return [words for words, _ in read_conllu_tagged(path, min_len, max_len, limit)]


def forward_macs_per_token(options: ElmoOptions) -> Dict[str, float]:
    """Multiply-adds per token of one forward pass, by part (char CNN over all ``max_chars`` positions)."""
    positions = options.max_characters_per_token
    cnn = sum((positions - w + 1) * w * options.char_embedding_dim * n for w, n in options.filters)
    highway = options.n_highway * 2 * options.n_filters**2
    projection = options.n_filters * options.projection_dim
    p, h = options.projection_dim, options.lstm_dim
    lstm = 2 * options.n_layers * (2 * p * 4 * h + h * p)  # input, recurrent and projection products, 2 directions
    return {"char_cnn": cnn, "highway": highway, "projection": projection, "lstm": lstm}


def gemm_gflops(n: int = 2048, repeats: int = 10) -> float:
    """Best fp32 ``n x n`` matrix-multiply rate in GFLOP/s."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    torch.mm(a, b, out=out)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def make_model(directory: Path, seed: int, architecture: str = "small") -> Tuple[Path, Path]:
    torch.manual_seed(seed)
    model = BiLm(preset(architecture))
    options_file, weight_file = directory / "options.json", directory / "weights.hdf5"
    save_files(model, options_file, weight_file)
    return options_file, weight_file


def run_embedder(
    embedder: ElmoEmbedder, sentences: Sequence[Sequence[str]], batch_size: Optional[int]
) -> List[np.ndarray]:
    if batch_size is None:
        return embedder.embed_batch(sentences)
    out: List[np.ndarray] = []
    for start in range(0, len(sentences), batch_size):
        out.extend(embedder.embed_batch(sentences[start : start + batch_size]))
    return out


def fidelity(result: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> Tuple[float, float, float]:
    """The top layer's mean and 1st-percentile cosine per token to ``reference``, and the max abs diff of all layers."""
    x = np.concatenate([r[-1] for r in result])
    y = np.concatenate([r[-1] for r in reference])
    cos = (x * y).sum(1) / np.maximum(np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1), 1e-30)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(result, reference))
    return float(cos.mean()), float(np.percentile(cos, 1)), diff


def best_time(fn: Callable[[], List[np.ndarray]], passes: int) -> Tuple[float, float, List[np.ndarray]]:
    """Best wall-clock seconds and best process CPU seconds (all threads) of ``passes`` runs after a warm-up."""
    result = fn()
    best_wall = best_cpu = float("inf")
    for _ in range(passes):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best_wall, best_cpu, result


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-size", type=int, default=50000, help="most frequent UD-train words to cache")
    parser.add_argument("--batch-sizes", default="32,64,all")
    parser.add_argument("--preset", default="small", choices=["small", "medium", "original"], help="architecture")
    parser.add_argument("--precision", default="fp32", help="comma-separated precisions, e.g. fp32,int8,bf16")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_before = _load()

    options = preset(args.preset)
    macs = forward_macs_per_token(options)
    flops_per_word = 2 * sum(macs.values())
    sentences = read_conllu(UD / "en_ewt-ud-dev.conllu", 5, 40, args.sentences)
    n_words = sum(len(s) for s in sentences)
    counts = Counter(w for s in read_conllu(UD / "en_ewt-ud-train.conllu") for w in s)
    cache_words = [w for w, _ in counts.most_common(args.cache_size)]
    hit_rate = sum(w in set(cache_words) for s in sentences for w in s) / n_words
    batch_sizes = [None if b == "all" else int(b) for b in args.batch_sizes.split(",")]

    gflops = gemm_gflops()
    rows = []
    refused: List[str] = []
    reference: Optional[List[np.ndarray]] = None
    with tempfile.TemporaryDirectory() as tmp:
        options_file, weight_file = make_model(Path(tmp), args.seed, args.preset)
        for precision in args.precision.split(","):
            for cached in (False, True):
                start = time.perf_counter()
                try:
                    embedder = ElmoEmbedder(
                        options_file,
                        weight_file,
                        initial_state="zeros",
                        cache_size=len(cache_words) if cached else 0,
                        cache_words=cache_words if cached else None,
                        threads=None,  # the torch thread count set by --threads
                        precision=precision,
                    )
                except ValueError as err:
                    refused.append(f"{precision}: {err}")
                    break
                setup = time.perf_counter() - start
                for batch_size in batch_sizes:
                    run = functools.partial(run_embedder, embedder, sentences, batch_size)
                    seconds, cpu, result = best_time(run, args.passes)
                    if reference is None:
                        reference = result
                    rows.append((precision, cached, batch_size, n_words / seconds, n_words / cpu,
                                 fidelity(result, reference), setup))
    gflops_after = gemm_gflops()
    ceiling = max(gflops, gflops_after) * 1e9 / flops_per_word  # contention only lowers a measured rate

    print(f"command: python {' '.join([sys.argv[0]] + list(argv if argv is not None else sys.argv[1:]))}")
    print(f"date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}")
    print(f"machine: {_cpu_model()}; {torch.get_num_threads()} torch threads, torch {torch.__version__}, "
          f"python {platform.python_version()}; load average before: {load_before}, after: {_load()}")
    print(f"architecture: {args.preset} (seeded random weights)")
    print(f"text: {len(sentences)} UD-EWT dev sentences of 5-40 tokens, {n_words} words; "
          f"best of {args.passes} passes after a warm-up")
    print(f"cache: {len(cache_words)} most frequent UD-train words, hit rate on the text {hit_rate:.1%}")
    print(f"forward cost: {sum(macs.values()) / 1e6:.2f} M multiply-adds/word "
          + ", ".join(f"{k} {v / 1e6:.2f} M" for k, v in macs.items()))
    print(f"fp32 2048^2 GEMM: {gflops:.0f} GFLOP/s before, {gflops_after:.0f} after "
          f"-> ceiling (from the higher) {ceiling:,.0f} words/s")
    print()
    first = "all at once" if batch_sizes[0] is None else f"batch {batch_sizes[0]}"
    print(
        f"| precision | token cache | batch | words/s | x fp32 | share of fp32 FLOP ceiling | words per CPU-second | "
        f"top layer cosine mean / 1st pct, max abs diff vs fp32 uncached, {first} |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- |")
    fp32_rates = {(c, b): r for p, c, b, r, *_ in rows if p == "fp32"}
    for precision, cached, batch_size, rate, cpu_rate, (mean, p1, diff), _ in rows:
        label = "all at once" if batch_size is None else str(batch_size)
        base = fp32_rates.get((cached, batch_size))
        ratio = f"{rate / base:.2f}" if base else "-"
        cells = [label, f"{rate:,.0f}", ratio, f"{rate / ceiling:.0%}", f"{cpu_rate:,.0f}",
                 f"{mean:.5f} / {p1:.4f}, {diff:.1e}"]
        print(f"| {precision} | {'yes' if cached else 'no'} | " + " | ".join(cells) + " |")
    for line in refused:
        print(f"refused: {line}")
    print(f"\ncache fill time: {rows[-1][6]:.1f} s (load + fill), uncached load: {rows[0][6]:.1f} s")


def _cpu_model() -> str:
    name = platform.processor() or "unknown CPU"
    if Path("/proc/cpuinfo").exists():
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
        name = names[0] if names else name
    return f"{name}, {os.cpu_count()} CPUs, torch CPU capability {torch.backends.cpu.get_cpu_capability()}"


if __name__ == "__main__":
    main()
