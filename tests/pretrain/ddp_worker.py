"""Run by the torchrun test: train as one rank, then save this replica's parameters for comparison."""
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from spacy_elmo.pretrain.config import load_config
from spacy_elmo.pretrain.trainer import Trainer

if __name__ == "__main__":
    config, raw = load_config(Path(sys.argv[1]))
    trainer = Trainer(config, raw, Path(sys.argv[2]))
    trainer.run(progress=False)
    torch.save(trainer.model.state_dict(), Path(sys.argv[2]) / f"replica{dist.get_rank()}.pt")
    dist.destroy_process_group()
