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

from tests.pretrain.conftest import tiny_config

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


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else ""


def _torchrun(port: int, *args: str) -> list:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port), *args]


def _sigterm_one_rank_then_resume(tmp_path: Path, port: int) -> None:
    """Two ranks under torchrun, SIGTERM to one of them mid-training, then the same command resumed for 2 steps.

    Both runs must end as they say: the stopped one with a checkpoint of both ranks and the message, the
    resumed one with exit 0; neither may abort at its end (a rank's SIGABRT fails the job for any scheduler).
    """
    tmp_path.mkdir(exist_ok=True)
    config = tmp_path / "pretrain.cfg"
    tiny_config(10_000, checkpoint_every=1000, log_every=1, eval_every=1000).to_disk(config)
    out = tmp_path / "out"
    command = _torchrun(port, "-m", "spacy_elmo", "pretrain", str(config), str(out), "--quiet")
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # A step's record: both ranks took part in its all-reduce, so both are in the loop and handle the signal
    wait_for(process, lambda: '"loss"' in _read(out / "log.jsonl") and len(_children(process.pid)) == 2)
    ranks = _children(process.pid)
    subprocess.run(["kill", "-TERM", str(ranks[1])], check=True)  # one rank only, as a scheduler might
    try:
        process.wait(timeout=120)  # the other rank must not wait forever in a collective
    finally:
        process.kill()
    stopped = process.stderr.read()
    state = torch.load(out / CHECKPOINT, weights_only=True)
    assert state["step"] > 0 and state["world_size"] == 2
    assert "Interrupted: checkpoint saved" in stopped
    assert "terminate called" not in stopped and "SIGABRT" not in stopped, stopped[-3000:]
    # 600 s: on a machine with every core taken (load 8 on 2 cores) a resumed run's start once took over 300 s.
    resumed = subprocess.run(
        command + ["--training.max_steps", str(state["step"] + 2)], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "terminate called" not in resumed.stderr, resumed.stderr[-3000:]
    assert torch.load(out / CHECKPOINT, weights_only=True)["step"] == state["step"] + 2


def test_sigterm_to_one_rank_stops_both_with_a_checkpoint(tmp_path):
    _sigterm_one_rank_then_resume(tmp_path, 29583)


def test_sigterm_and_resume_end_cleanly_every_time_with_a_core_taken(tmp_path):
    # The resumed run once aborted at its end on a loaded machine: a gloo thread outlived the interpreter.
    competitor = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for attempt in range(3):
            _sigterm_one_rank_then_resume(tmp_path / str(attempt), 29585 + attempt)
    finally:
        competitor.kill()
        competitor.wait()


def test_a_distributed_run_ends_its_process_group_threads_before_exit(tmp_path):
    # The cause itself: the gloo threads are joined when the trainer's block ends, not left to the interpreter's exit.
    config = tmp_path / "ddp.cfg"
    tiny_config(4, checkpoint_every=4, log_every=4).to_disk(config)
    out = tmp_path / "out"
    done = subprocess.run(_torchrun(29588, "-m", "tests.pretrain.ddp_worker", str(config), str(out)),
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        threads = (out / f"threads{rank}.txt").read_text(encoding="utf-8").split()
        assert threads and not [name for name in threads if "gloo" in name], threads
