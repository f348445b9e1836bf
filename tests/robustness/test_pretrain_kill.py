"""``python -m spacy_elmo pretrain`` killed with SIGKILL in the middle of writing its files, then resumed.

After every kill the output directory must hold a loadable checkpoint and an export that ``ElmoEmbedder``
loads; rerunning the command must finish with exactly the weights of an uninterrupted run.
"""
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from spacy_elmo import ElmoEmbedder
from spacy_elmo.pretrain.config import load_config
from spacy_elmo.pretrain.trainer import CHECKPOINT, Trainer
from spacy_elmo.pretrain.vocab import Vocab

from ..pretrain.conftest import tiny_config

REPO = Path(__file__).resolve().parents[2]
MAX_STEPS = 30
# The two big files every checkpoint (checkpoint_every = 1) rewrites; options.json goes the same way (atomic_write)
WRITTEN = (CHECKPOINT, "weights.hdf5")


def pretrain(config: Path, out: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "spacy_elmo", "pretrain", str(config), str(out), "--quiet"]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for(process: subprocess.Popen, ready: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None, f"pretraining ended early: {process.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "pretraining got nowhere"
        time.sleep(0.0002)


def check_output_dir(out: Path) -> int:
    """The checkpoint loads without pickle and the export into ElmoEmbedder; returns the checkpoint's step."""
    state = torch.load(out / CHECKPOINT, weights_only=True)
    assert 0 < state["step"] <= MAX_STEPS
    layers = ElmoEmbedder(out / "options.json", out / "weights.hdf5").embed_sentence(["A", "test", "."])
    assert layers.shape == (3, 3, 32) and np.isfinite(layers).all()
    assert Vocab.from_file(out / "vocab.txt").words[:3] == ["<S>", "</S>", "<UNK>"]
    return state["step"]


def test_sigkill_while_writing_checkpoints_then_resume(tmp_path):
    config = tmp_path / "pretrain.cfg"
    tiny_config(MAX_STEPS, checkpoint_every=1, log_every=10, eval_every=1000).to_disk(config)
    out = tmp_path / "out"
    rng = random.Random(0)
    killed_mid_write = set()
    for target in WRITTEN:
        half_written = out / (target + ".tmp")
        for _ in range(10):  # the window is short: retry until the kill lands inside it
            process = pretrain(config, out)
            wait_for(process, (out / CHECKPOINT).exists)
            time.sleep(rng.uniform(0.0, 0.5))  # a random later step
            wait_for(process, half_written.exists)
            process.kill()  # SIGKILL
            assert process.wait(timeout=60) == -9
            if half_written.exists():
                killed_mid_write.add(target)
                break
        assert check_output_dir(out) < MAX_STEPS
    assert killed_mid_write == set(WRITTEN)
    done = subprocess.run(
        [sys.executable, "-m", "spacy_elmo", "pretrain", str(config), str(out), "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert check_output_dir(out) == MAX_STEPS
    assert not any(out.glob("*.tmp"))
    # The resumed run ends exactly where an uninterrupted one does.
    typed, raw = load_config(config)
    straight = Trainer(typed, raw, tmp_path / "straight")
    straight.run(progress=False)
    resumed = torch.load(out / CHECKPOINT, weights_only=True)["model"]
    for name, tensor in straight.model.state_dict().items():
        assert torch.equal(tensor, resumed[name]), name


def _children(pid: int) -> list:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_sigterm_to_one_rank_stops_both_with_a_checkpoint(tmp_path):
    config = tmp_path / "pretrain.cfg"
    tiny_config(10_000, checkpoint_every=1000, log_every=1000, eval_every=1000).to_disk(config)
    out = tmp_path / "out"
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29583"]
    command = launch + ["-m", "spacy_elmo", "pretrain", str(config), str(out), "--quiet"]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(process, lambda: (out / "vocab.txt").exists() and len(_children(process.pid)) == 2)
    time.sleep(3.0)  # some steps into training
    ranks = _children(process.pid)
    subprocess.run(["kill", "-TERM", str(ranks[1])], check=True)  # one rank only, as a scheduler might
    try:
        process.wait(timeout=120)  # the other rank must not wait forever in a collective
    finally:
        process.kill()
    state = torch.load(out / CHECKPOINT, weights_only=True)
    assert state["step"] > 0 and state["world_size"] == 2
    assert "Interrupted: checkpoint saved" in process.stderr.read()
    resumed = subprocess.run(command + ["--training.max_steps", str(state["step"] + 2)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert torch.load(out / CHECKPOINT, weights_only=True)["step"] == state["step"] + 2
