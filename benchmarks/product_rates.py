"""What a row of the biLM's LSTM products costs at each number of rows: why one Doc per call cannot run at the batch's
per-word cost.

A step multiplies the rows still running by each layer's recurrent and projection weights; the input product runs
once per call over all of a sentence's positions. With few rows the weights are read for little arithmetic, so
the rate (GFLOP/s) falls: the per-row cost at 1 row against 64 rows bounds ``nlp(text)`` one Doc at a time against
``nlp.pipe``. Timed through the model's own :class:`StackedProducts` (both directions of one layer, seeded weights),
one thread, each shape repeated hot (its weights in cache as far as they fit), fp32 and int8; up to 64 rows, the
batch of ``nlp.pipe`` (at 256 rows this loop of isolated int8 calls measured 5x slower per row, from glibc handing
back and faulting in again the kernel's freshly allocated outputs: not so with its trim and mmap thresholds raised,
and not in the model, whose batch-32 words/s were the same either way).

    python benchmarks/product_rates.py --preset small
"""
import argparse
import shlex
import sys
import time
from typing import Callable, Dict, Optional, Sequence

import torch

from bench_embed import _cpu_model, _load, best_time
from spacy_elmo.model.lstm import LstmWithProjection, StackedProducts
from spacy_elmo.model.options import preset

ROWS = (1, 8, 22, 64)


def per_call_seconds(run: Callable[[], object], seconds: float = 0.3) -> float:
    """Mean seconds of a call of ``run``: the best of 5 passes of as many calls as take about ``seconds / 5``."""
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds / 5 or n < 3:
        run()
        n += 1

    def calls() -> None:
        for _ in range(n):
            run()

    return best_time(calls, passes=5)[0] / n


def layer_products(options, precision: str) -> StackedProducts:
    """Both directions of one biLM layer, seeded, at ``precision`` (int8: all three products)."""
    torch.manual_seed(0)
    p, h = options.projection_dim, options.lstm_dim
    lstms = [LstmWithProjection(p, h, p, options.cell_clip, options.proj_clip) for _ in range(2)]
    if precision != "fp32":
        for lstm in lstms:
            lstm.set_precision(precision, ("input", "hidden", "projection"))
    with torch.no_grad():
        return StackedProducts(lstms)


def row_seconds(products: StackedProducts, rows: int) -> Dict[str, float]:
    """Seconds per row of the input, hidden and projection products over ``rows`` rows of random inputs."""
    lstm = products.lstms[0]
    p, h = lstm.projection_dim, lstm.cell_dim
    x, h0, cell = torch.randn(2, rows, p), torch.randn(2, rows, p), torch.randn(2, rows, h)
    with torch.no_grad():
        gates = products.inputs(x, {})
        runs: Dict[str, Callable[[], object]] = {
            "input": lambda: products.inputs(x, {}),
            "hidden": lambda: products.recurrent(gates, h0, {}),
            "projection": lambda: products.project(cell, {}),
        }
        return {name: per_call_seconds(run) / rows for name, run in runs.items()}


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="small", choices=["small", "medium", "original"])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    options = preset(args.preset)
    p, h = options.projection_dim, options.lstm_dim
    flops = {"input": 2 * 2 * p * 4 * h, "hidden": 2 * 2 * p * 4 * h, "projection": 2 * 2 * h * p}  # per row
    print(f"command: python benchmarks/product_rates.py {shlex.join(sys.argv[1:] if argv is None else argv)}")
    print(f"machine: {_cpu_model()}; torch {torch.__version__}, 1 thread")
    print(f"{args.preset}: one layer, both directions; us per row (GFLOP/s)\n")
    print("| precision | rows | input | hidden | projection | a word's products (all layers), us |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for precision in ("fp32", "int8"):
        products = layer_products(options, precision)
        for rows in ROWS:
            per_row = row_seconds(products, rows)
            cells = [f"{seconds * 1e6:.1f} ({flops[n] / seconds / 1e9:.0f})" for n, seconds in per_row.items()]
            word = options.n_layers * sum(per_row.values()) * 1e6
            print(f"| {precision} | {rows} | " + " | ".join(cells) + f" | {word:.0f} |")
    print(f"\nload average after: {_load()}")


if __name__ == "__main__":
    main()
