"""Pretraining throughput: tokens/s of forward + backward + optimizer steps, fp32 against bf16, and the share of the
fp32 FLOP ceiling.

Runs the real training step (``Trainer.train_step``: bucketed batches from the Gutenberg corpus under ../shared, both
directions, adaptive softmax, Adam or Adagrad) for a preset architecture from scratch and reports predicted tokens
per second. The FLOP ceiling uses the machine's fp32 GEMM rate measured in the same run and a training cost of 3x
the forward multiply-adds per token (softmax included).

``--precision fp32,bf16`` builds one trainer per setting (same seed, same vocabulary) and, in every one of
``--rounds`` rounds, times each on the same batches, one after the other, so the settings share the machine's
state; it prints each round's tokens/s, their median and the per-round ratio to the first setting.
``--processes 2 --threads 1`` is docs/pretraining.md's CPU recipe (``torchrun --nproc_per_node 2 ...
--training.threads 1``): that many one-thread gloo DDP processes, each on its own batches of the same shape;
their tokens/s add up. bf16 is refused where this CPU has no native bf16, as ``pretrain`` refuses it.
``--ddp-search`` adds each setting again with DDP's search for unused parameters on (``find_unused_parameters``,
which the trainer no longer asks for), timed in the same rounds: what dropping the search gained.

    python benchmarks/pretrain.py --processes 2 --threads 1 --precision fp32,bf16 --rounds 5
    python benchmarks/pretrain.py --preset tiny --threads 1 --steps 30 --pause-pretraining
"""
import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Dict, List
from unittest import mock

import torch
import torch.multiprocessing as mp

from common import SHARED, add_allow_load, header, pretraining_paused, quiet_machine
from spacy_elmo import ElmoOptions
from spacy_elmo.pretrain.config import bf16_support, default_config, load_config
from spacy_elmo.pretrain.trainer import Trainer

GUTENBERG = SHARED / "lm_gutenberg_en"
PRECISIONS = ("fp32", "bf16")


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


def _config(args: argparse.Namespace, precision: str):
    config = default_config(args.preset)
    config["paths"].update(train=str(GUTENBERG / "train-00-of-08.txt.gz"), dev=None)
    config["vocab"]["max_lines"] = 100_000
    config["training"].update(
        max_steps=10**9, threads=args.threads, batch_tokens=args.batch_tokens, optimizer=args.optimizer,
        bf16=precision == "bf16", learn_rate=0.001 if args.optimizer == "adam" else 0.2, checkpoint_every=10**9,
        eval_every=10**9,
    )
    return load_config(config)


def _time_steps(trainer: Trainer, batches: List) -> float:
    """Tokens/s this process trains on over ``batches`` (after two untimed steps), counted as ``train_step`` reports
    them (``Trainer.tokens_seen`` is counted by ``Trainer.run``, which the benchmark does not call)."""
    stream = iter(batches)
    trainer.stream.next_batch = lambda: next(stream)  # type: ignore[method-assign]
    for _ in range(2):
        trainer.train_step()
    tokens, start = 0, time.perf_counter()
    for _ in range(len(batches) - 2):
        tokens += trainer.train_step()[1]
    return tokens / (time.perf_counter() - start)


def _measure(rank: int, args: argparse.Namespace, out: str, results: Dict) -> None:
    """This process's tokens/s of each setting in each round (``results[rank][setting]``, one per round)."""
    if args.processes > 1:
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(args.processes), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    trainers: Dict[str, Trainer] = {}
    for setting in _settings(args):
        precision, search = setting.split("+")[0], setting.endswith(SEARCH)
        folder = Path(out) / setting
        if trainers and rank == 0:  # the vocabulary of the first, not built again (the trainer reads it after a barrier)
            folder.mkdir()
            shutil.copyfile(Path(out) / next(iter(trainers)) / "vocab.txt", folder / "vocab.txt")
        ddp = partial(torch.nn.parallel.DistributedDataParallel, find_unused_parameters=True)
        with mock.patch("torch.nn.parallel.DistributedDataParallel", ddp) if search else nullcontext():
            trainers[setting] = Trainer(*_config(args, precision), folder)  # the first starts the process group
        trainers[setting].model.train()
    batches = [next(iter(trainers.values())).stream.next_batch() for _ in range(args.steps + 2)]
    rates: Dict[str, List[float]] = {setting: [] for setting in trainers}
    for _ in range(args.rounds):
        for setting, trainer in trainers.items():
            rates[setting].append(_time_steps(trainer, batches))
    results[rank] = rates
    for trainer in reversed(trainers.values()):  # the first, which started the process group, ends it last
        trainer.close()


SEARCH = "+ddp-search"


def _settings(args: argparse.Namespace) -> List[str]:
    """What is timed: each precision, and with ``--ddp-search`` each again with DDP's search for unused parameters."""
    return [*args.precision, *(f"{p}{SEARCH}" for p in args.precision if args.ddp_search)]


def _free_port() -> int:
    """A TCP port the OS has just found free, for the processes' rendezvous (a fixed one may be taken)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _precisions(text: str) -> List[str]:
    chosen = text.split(",")
    unknown = [p for p in chosen if p not in PRECISIONS]
    if unknown or len(set(chosen)) != len(chosen):
        raise argparse.ArgumentTypeError(f"give distinct settings of {', '.join(PRECISIONS)}, e.g. fp32,bf16")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per round and setting")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--precision", type=_precisions, default=["fp32"], help="fp32, bf16 or both (fp32,bf16): timed in turn")
    parser.add_argument("--batch-tokens", type=int, default=1280)
    parser.add_argument("--rounds", type=int, default=1, help="timed rounds (median reported)")
    parser.add_argument("--processes", type=int, default=1, help="one-thread DDP processes (gloo)")
    parser.add_argument("--pause-pretraining", action="store_true", help="SIGSTOP spacy_elmo pretrain runs meanwhile")
    add_allow_load(parser)
    parser.add_argument("--ddp-search", action="store_true", help="each setting also with DDP's unused-parameter search")
    args = parser.parse_args()
    with pretraining_paused(args.pause_pretraining), quiet_machine(args.allow_load):
        report(args)


def report(args: argparse.Namespace) -> None:
    """Time the settings of ``args`` and print the table."""
    native, why = bf16_support(torch.device("cpu"))
    if "bf16" in args.precision and not native:
        sys.exit(f"bf16 is refused here: {why}")
    torch.set_num_threads(args.threads)
    typed, _ = _config(args, args.precision[0])
    options = typed.options()
    macs = forward_macs_per_token(options)
    p, vocab_head = options.projection_dim, typed.objective.cutoffs[0]
    softmax_macs = 2 * p * (vocab_head + len(typed.objective.cutoffs))  # head of the adaptive softmax, both directions
    forward = sum(macs.values()) + softmax_macs
    gflops = gemm_gflops()
    header(sys.argv)
    print(f"{why}; {args.threads} torch thread(s) per process")
    print(f"fp32 GEMM: {gflops:.0f} GFLOP/s; forward ≈ {forward / 1e6:.1f} M multiply-adds per token")
    with tempfile.TemporaryDirectory() as out:
        if args.processes > 1:
            results = mp.Manager().dict()
            args.port = _free_port()
            mp.spawn(_measure, args=(args, out, results), nprocs=args.processes)
        else:
            results = {}
            _measure(0, args, out, results)
    # Each process timed its own tokens over the same steps: together they trained on the sum.
    rates = {setting: [sum(r[setting][i] for r in results.values()) for i in range(args.rounds)] for setting in _settings(args)}
    label = f"{args.processes} x 1" if args.processes > 1 else f"1 x {args.threads}"
    print("| preset | processes x threads | batch tokens | optimizer | precision | tokens/s per round | median | share of fp32 FLOP ceiling |")
    print("|---|---|---|---|---|---|---|---|")
    for precision, per_round in rates.items():
        rate = statistics.median(per_round)
        share = rate * 3 * 2 * forward / (gflops * 1e9 * max(args.processes, 1))
        rounds = ", ".join(f"{r:,.0f}" for r in per_round)
        print(f"| {args.preset} | {label} | {args.batch_tokens} | {args.optimizer} | {precision} | {rounds} | {rate:,.0f} | {share:.0%} |")
    settings = _settings(args)
    for setting in settings[1:]:
        if setting.endswith(SEARCH):  # what dropping the search gained: the trainer's own DDP against the search
            new, old = setting.removesuffix(SEARCH), setting
        else:
            new, old = setting, settings[0]
        ratios = [a / b for a, b in zip(rates[new], rates[old])]
        listed = ", ".join(f"{r:.2f}" for r in ratios)
        print(f"{new}/{old} tokens/s: {listed} per round (median {statistics.median(ratios):.2f}x)")

if __name__ == "__main__":
    main()
