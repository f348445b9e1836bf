"""Pretraining throughput: tokens/s of forward + backward + optimizer steps, and the share of the FLOP ceiling.

Runs the real training step (``Trainer.train_step``: bucketed batches from the Gutenberg corpus, both
directions, adaptive softmax, Adam or Adagrad) for a preset architecture from scratch and reports
predicted tokens per second. The FLOP ceiling uses the machine's fp32 GEMM rate measured in the
same run and a training cost of 3x the forward multiply-adds per token (softmax included).

``--variants`` times the LSTM's hand-written backward through time (``bptt``) against autograd through
every step (``autograd``, the implementation before it) on the same batches, alternating rounds, so that
the ratio holds on a busy machine. ``--processes 2`` runs that many one-thread DDP processes (gloo) on
batches of the same shape, as ``torchrun --nproc_per_node 2`` does, and reports their total tokens/s.

    benchmarks/paused.sh python benchmarks/bench_pretrain.py --preset tiny --steps 30
    benchmarks/paused.sh python benchmarks/bench_pretrain.py --threads 1 --variants bptt,autograd --rounds 3
    benchmarks/paused.sh python benchmarks/bench_pretrain.py --threads 1 --processes 2
"""
import argparse
import os
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List

import torch
import torch.multiprocessing as mp

from bench_embed import _cpu_model, _load, forward_macs_per_token, gemm_gflops
from spacy_elmo.model import lstm
from spacy_elmo.pretrain.config import default_config, load_config
from spacy_elmo.pretrain.trainer import Trainer

GUTENBERG = Path(__file__).resolve().parents[2] / "shared" / "data" / "lm_gutenberg_en"


@contextmanager
def lstm_backward(variant: str) -> Iterator[None]:
    """``bptt``: the package's backward through time; ``autograd``: autograd through every step of the loop."""
    original = lstm._PackedLstm.apply
    if variant == "autograd":
        lstm._PackedLstm.apply = lambda active, clips, *tensors: lstm._run_steps(active, clips, *tensors)
    try:
        yield
    finally:
        lstm._PackedLstm.apply = original


def _config(args: argparse.Namespace):
    config = default_config(args.preset)
    config["paths"].update(train=str(GUTENBERG / "train-00-of-08.txt.gz"), dev=None)
    config["vocab"]["max_lines"] = 100_000
    config["training"].update(
        max_steps=10**9, threads=args.threads, batch_tokens=args.batch_tokens, optimizer=args.optimizer, bf16=args.bf16,
        learn_rate=0.001 if args.optimizer == "adam" else 0.2, checkpoint_every=10**9, eval_every=10**9,
    )
    return load_config(config)


def _time_steps(trainer: Trainer, batches: List, variant: str) -> float:
    """Tokens/s of one process over ``batches`` (after two untimed steps)."""
    stream = iter(batches)
    trainer.stream.next_batch = lambda: next(stream)  # type: ignore[method-assign]
    with lstm_backward(variant):
        for _ in range(2):
            trainer.train_step()
        tokens_before, start = trainer.tokens_seen, time.perf_counter()
        for _ in range(len(batches) - 2):
            trainer.train_step()
        return (trainer.tokens_seen - tokens_before) / (time.perf_counter() - start)


def _ddp_worker(rank: int, args: argparse.Namespace, out: str, results: Dict) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(args.processes), MASTER_ADDR="127.0.0.1", MASTER_PORT="29591")
    typed, raw = _config(args)
    trainer = Trainer(typed, raw, Path(out))
    batches = [trainer.stream.next_batch() for _ in range(args.steps + 2)]
    results[rank] = _time_steps(trainer, batches, "bptt")  # tokens_seen counts all processes' tokens
    torch.distributed.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--batch-tokens", type=int, default=1280)
    parser.add_argument("--variants", default="bptt", help="comma-separated: bptt, autograd")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds per variant (median reported)")
    parser.add_argument("--processes", type=int, default=1, help="one-thread DDP processes (gloo)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    typed, raw = _config(args)
    options = typed.options()
    macs = forward_macs_per_token(options)
    p, vocab_head = options.projection_dim, typed.objective.cutoffs[0]
    softmax_macs = 2 * p * (vocab_head + len(typed.objective.cutoffs))  # head of the adaptive softmax, both directions
    forward = sum(macs.values()) + softmax_macs
    gflops = gemm_gflops()
    print(f"machine: {_cpu_model()}; torch {torch.__version__}, {args.threads} threads; load {_load()}")
    print(f"fp32 GEMM: {gflops:.0f} GFLOP/s; forward ≈ {forward / 1e6:.1f} M multiply-adds per token")
    print("| preset | processes x threads | LSTM backward | optimizer | tokens/s (median) | rounds | share of FLOP ceiling |")
    print("|---|---|---|---|---|---|---|")
    rates: Dict[str, List[float]] = {}
    if args.processes > 1:
        results = mp.Manager().dict()
        with tempfile.TemporaryDirectory() as out:
            mp.spawn(_ddp_worker, args=(args, out, results), nprocs=args.processes)
        rates["bptt"] = [statistics.mean(results.values())]
        label = f"{args.processes} x 1"
    else:
        label = f"1 x {args.threads}"
        with tempfile.TemporaryDirectory() as out:
            trainer = Trainer(typed, raw, Path(out))
            trainer.model.train()
            batches = [trainer.stream.next_batch() for _ in range(args.steps + 2)]
            for _ in range(args.rounds):
                for variant in args.variants.split(","):
                    rates.setdefault(variant, []).append(_time_steps(trainer, batches, variant))
    for variant, values in rates.items():
        rate = statistics.median(values)
        share = rate * 3 * 2 * forward / (gflops * 1e9 * (args.processes if args.processes > 1 else 1))
        print(f"| {args.preset} | {label} | {variant} | {args.optimizer} | {rate:,.0f} | {len(values)} | {share:.0%} |")
    if len(rates) > 1:
        base = statistics.median(rates[args.variants.split(",")[-1]])
        print("ratios to the last variant: " + ", ".join(f"{v} {statistics.median(r) / base:.2f}x" for v, r in rates.items()))


if __name__ == "__main__":
    main()
