"""Pretraining throughput: tokens/s of forward + backward + optimizer steps, and the share of the FLOP ceiling.

Runs the real training step (``Trainer.train_step``: bucketed batches from the Gutenberg corpus, both
directions, adaptive softmax, Adam or Adagrad) for a preset architecture from scratch and reports
predicted tokens per second. The FLOP ceiling uses the machine's fp32 GEMM rate measured in the
same run and a training cost of 3x the forward multiply-adds per token (softmax included).

``--processes 2`` runs that many one-thread DDP processes (gloo) on batches of the same shape, as
``torchrun --nproc_per_node 2`` does, and reports their total tokens/s (each step then trains on
``processes`` batches). ``--rounds`` repeats the timing and reports the median.

    benchmarks/paused.sh python benchmarks/bench_pretrain.py --preset tiny --steps 30
    benchmarks/paused.sh python benchmarks/bench_pretrain.py --threads 1 --processes 2
"""
import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import torch
import torch.multiprocessing as mp

from bench_embed import _cpu_model, _load, forward_macs_per_token, gemm_gflops
from spacy_elmo.pretrain.config import default_config, load_config
from spacy_elmo.pretrain.trainer import Trainer

GUTENBERG = Path(__file__).resolve().parents[2] / "shared" / "data" / "lm_gutenberg_en"


def _config(args: argparse.Namespace):
    config = default_config(args.preset)
    config["paths"].update(train=str(GUTENBERG / "train-00-of-08.txt.gz"), dev=None)
    config["vocab"]["max_lines"] = 100_000
    config["training"].update(
        max_steps=10**9, threads=args.threads, batch_tokens=args.batch_tokens, optimizer=args.optimizer, bf16=args.bf16,
        learn_rate=0.001 if args.optimizer == "adam" else 0.2, checkpoint_every=10**9, eval_every=10**9,
    )
    return load_config(config)


def _time_steps(trainer: Trainer, batches: List) -> float:
    """Tokens/s of one process over ``batches`` (after two untimed steps)."""
    stream = iter(batches)
    trainer.stream.next_batch = lambda: next(stream)  # type: ignore[method-assign]
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
    results[rank] = _time_steps(trainer, batches)  # tokens_seen counts all processes' tokens
    torch.distributed.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--batch-tokens", type=int, default=1280)
    parser.add_argument("--rounds", type=int, default=1, help="timed rounds (median reported)")
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
    print("| preset | processes x threads | batch tokens | optimizer | tokens/s (median) | rounds | share of FLOP ceiling |")
    print("|---|---|---|---|---|---|---|")
    rates: List[float] = []
    for _ in range(args.rounds):
        if args.processes > 1:
            results = mp.Manager().dict()
            with tempfile.TemporaryDirectory() as out:
                mp.spawn(_ddp_worker, args=(args, out, results), nprocs=args.processes)
            rates.append(statistics.mean(results.values()))
        else:
            with tempfile.TemporaryDirectory() as out:
                trainer = Trainer(typed, raw, Path(out))
                trainer.model.train()
                rates.append(_time_steps(trainer, [trainer.stream.next_batch() for _ in range(args.steps + 2)]))
    label = f"{args.processes} x 1" if args.processes > 1 else f"1 x {args.threads}"
    rate = statistics.median(rates)
    share = rate * 3 * 2 * forward / (gflops * 1e9 * max(args.processes, 1))
    print(f"| {args.preset} | {label} | {args.batch_tokens} | {args.optimizer} | {rate:,.0f} | {len(rates)} | {share:.0%} |")


if __name__ == "__main__":
    main()
