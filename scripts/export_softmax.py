"""Write a pretraining run's softmax, fp16, to ``RUN_DIR/softmax.pt`` (what adaptation needs beside the biLM).

    python scripts/export_softmax.py RUN_DIR

``pretrain_runs/<name>`` keeps this file instead of ``checkpoint.pt`` (model, optimizer and random states,
~50 MB): with the package's fp16 biLM (``spacy_elmo/data/<name>/``) and the run's ``vocab.txt`` it is the
language model that ``configs/adapt_*.cfg`` continue on a task's text.
"""
import sys
from pathlib import Path

import torch

from spacy_elmo.util.files import atomic_write
from spacy_elmo.pretrain.trainer import CHECKPOINT, SOFTMAX


def export_softmax(run: Path) -> Path:
    """Save the softmax of ``run/checkpoint.pt`` as fp16 tensors in ``run/softmax.pt``; returns that path."""
    model = torch.load(run / CHECKPOINT, map_location="cpu", weights_only=True)["model"]
    softmax = {k[len("softmax."):]: v.half() for k, v in model.items() if k.startswith("softmax.")}
    target = run / SOFTMAX
    atomic_write(target, lambda p: torch.save(softmax, p))
    return target


def main(argv: list) -> None:
    """Command line: one run directory that holds a checkpoint."""
    if len(argv) != 1 or not (Path(argv[0]) / CHECKPOINT).exists():
        raise SystemExit(f"usage: python scripts/export_softmax.py RUN_DIR (a directory that holds {CHECKPOINT})")
    print(f"wrote {export_softmax(Path(argv[0]))}")


if __name__ == "__main__":
    main(sys.argv[1:])
