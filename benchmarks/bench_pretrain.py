"""Pretraining throughput: tokens/s of forward + backward + optimizer steps, and the share of the FLOP ceiling.

Runs the real training step (``Trainer.train_step``: bucketed batches from the Gutenberg corpus, both
directions, adaptive softmax, Adam or Adagrad) for a preset architecture from scratch and reports
predicted tokens per second. The FLOP ceiling uses the machine's fp32 GEMM rate measured in the
same run and a training cost of 3x the forward multiply-adds per token (softmax included).

    benchmarks/paused.sh python benchmarks/bench_pretrain.py --preset tiny --steps 30
"""
import argparse
import tempfile
import time
from pathlib import Path

import torch

from bench_embed import _cpu_model, _load, forward_macs_per_token, gemm_gflops
from spacy_elmo.pretrain.config import default_config, load_config
from spacy_elmo.pretrain.trainer import Trainer

GUTENBERG = Path(__file__).resolve().parents[2] / "shared" / "data" / "lm_gutenberg_en"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--bf16", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = default_config(args.preset)
    config["paths"].update(train=str(GUTENBERG / "train-00-of-08.txt.gz"), dev=None)
    config["vocab"]["max_lines"] = 100_000
    config["training"].update(
        max_steps=10**9, threads=args.threads, optimizer=args.optimizer, bf16=args.bf16,
        learn_rate=0.001 if args.optimizer == "adam" else 0.2, checkpoint_every=10**9, eval_every=10**9,
    )
    typed, raw = load_config(config)
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(typed, raw, Path(out))
        trainer.model.train()
        for _ in range(args.warmup):
            trainer.train_step()
        tokens_before, start = trainer.tokens_seen, time.perf_counter()
        for _ in range(args.steps):
            trainer.train_step()
        seconds = time.perf_counter() - start
        tokens = trainer.tokens_seen - tokens_before
    options = typed.options()
    macs = forward_macs_per_token(options)
    p, vocab_head = options.projection_dim, typed.objective.cutoffs[0]
    softmax_macs = 2 * p * (vocab_head + len(typed.objective.cutoffs))  # head of the adaptive softmax, both directions
    forward = sum(macs.values()) + softmax_macs
    gflops = gemm_gflops()
    rate = tokens / seconds
    share = rate * 3 * 2 * forward / (gflops * 1e9)
    print(f"machine: {_cpu_model()}; torch {torch.__version__}, {args.threads} threads; load {_load()}")
    print(f"preset {args.preset}: {sum(p.numel() for p in trainer.model.bilm.parameters()) / 1e6:.1f} M biLM parameters, "
          f"forward ≈ {forward / 1e6:.1f} M multiply-adds per token (char CNN counted over all positions)")
    print(f"fp32 GEMM: {gflops:.0f} GFLOP/s")
    print("| preset | optimizer | bf16 | tokens/s | share of fp32 FLOP ceiling |")
    print("|---|---|---|---|---|")
    print(f"| {args.preset} | {args.optimizer} | {args.bf16} | {rate:,.0f} | {share:.0%} |")


if __name__ == "__main__":
    main()
