"""Run by the torchrun tests: train as one rank, then save this replica's parameters and the threads left.

``threads{rank}.txt`` names the threads still running once the trainer's block has ended: the process group's
threads must be gone by then, joined while the interpreter is alive.
"""
import sys
from pathlib import Path

import torch

from spacy_elmo.pretrain.config import load_config
from spacy_elmo.pretrain.trainer import Trainer


def thread_names() -> list:
    """Names of this process's threads, as the kernel lists them (C++ threads included)."""
    tasks = Path("/proc/self/task")
    return sorted((task / "comm").read_text().strip() for task in tasks.iterdir())


if __name__ == "__main__":
    config, raw = load_config(Path(sys.argv[1]))
    with Trainer(config, raw, Path(sys.argv[2])) as trainer:
        trainer.run(progress=False)
    out = Path(sys.argv[2])
    torch.save(trainer.model.state_dict(), out / f"replica{trainer.rank}.pt")
    (out / f"threads{trainer.rank}.txt").write_text("\n".join(thread_names()), encoding="utf-8")
