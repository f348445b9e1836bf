"""``python -m spacy_elmo pretrain`` killed with SIGKILL while writing its files, then resumed; SIGTERM to one rank.

The kills are deterministic: ``tests/robustness/kill_at.py`` runs the command so that it kills itself at a chosen
step of a chosen write. After every kill the output directory must hold the last complete checkpoint
and export, which load; rerunning the command must finish with exactly the weights of an uninterrupted run.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict

import numpy as np
import pytest
import torch

from spacy_elmo import ElmoEmbedder
from spacy_elmo.formats.weights import load_files
from spacy_elmo.pretrain.config import load_config
from spacy_elmo.pretrain.trainer import CHECKPOINT, Trainer
from spacy_elmo.pretrain.vocab import Vocab

from tests.conftest import free_port, torchrun
from tests.pretrain.conftest import tiny_config
from tests.robustness.kill_at import WRITE_STEPS

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MAX_STEPS = 30
# Each checkpoint (checkpoint_every = 1) writes options.json, then weights.hdf5, then the checkpoint, each atomically
WRITTEN = ("weights.hdf5", CHECKPOINT)
KILLED_WRITE = 2  # each killed run dies in its second checkpoint: the first one is complete


def pretrain_command(config: Path, out: Path) -> list:
    return [sys.executable, "-m", "spacy_elmo", "pretrain", str(config), str(out), "--quiet"]


def wait_for(process: subprocess.Popen, ready: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None, f"pretraining ended early: {process.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "pretraining got nowhere"
        time.sleep(0.01)


def check_output_dir(out: Path) -> Dict[str, torch.Tensor]:
    """The checkpoint loads without pickle and the export into ElmoEmbedder; returns the checkpoint."""
    state = torch.load(out / CHECKPOINT, weights_only=True)
    assert 0 < state["step"] <= MAX_STEPS
    layers = ElmoEmbedder(out / "options.json", out / "weights.hdf5").embed_sentence(["A", "test", "."])
    assert layers.shape == (3, 3, 32) and np.isfinite(layers).all()
    assert Vocab.from_file(out / "vocab.txt").words[:3] == ["<S>", "</S>", "<UNK>"]
    return state


def export_is_of_checkpoint(out: Path, state: Dict[str, torch.Tensor]) -> bool:
    """Whether weights.hdf5 holds the biLM weights of the checkpoint ``state`` (the same step's export)."""
    exported = load_files(out / "options.json", out / "weights.hdf5").state_dict()
    return all(torch.equal(tensor, state["model"]["bilm." + name]) for name, tensor in exported.items())


def kill_in_write(config: Path, out: Path, target: str, step: str) -> None:
    """Run the pretraining command until it kills itself at ``step`` of its KILLED_WRITE-th write of ``target``."""
    kill = [sys.executable, "-m", "tests.robustness.kill_at", str(out / target), step, str(KILLED_WRITE), "spacy_elmo"]
    command = kill + pretrain_command(config, out)[3:]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]


@pytest.mark.parametrize("target", WRITTEN)
def test_sigkill_at_each_step_of_a_write_leaves_the_last_complete_files_then_resume(tmp_path, target):
    config = tmp_path / "pretrain.cfg"
    tiny_config(MAX_STEPS, checkpoint_every=1, log_every=10, eval_every=1000).to_disk(config)
    out = tmp_path / "out"
    last_step = 0
    for step in WRITE_STEPS:
        kill_in_write(config, out, target, step)
        state = check_output_dir(out)
        renamed = step == "renamed"
        # the killed run's first checkpoint is complete; its second holds its target only once renamed
        assert state["step"] == last_step + 1 + (renamed and target == CHECKPOINT)
        assert (out / (target + ".tmp")).exists() != renamed
        # the export is the checkpoint's own exactly when the second checkpoint's files stopped between them
        assert export_is_of_checkpoint(out, state) == (renamed == (target == CHECKPOINT))
        last_step = state["step"]
    done = subprocess.run(pretrain_command(config, out), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert check_output_dir(out)["step"] == MAX_STEPS
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


def _sigterm_one_rank_then_resume(tmp_path: Path) -> None:
    """Two ranks under torchrun, SIGTERM to one of them mid-training, then the same command resumed for 2 steps.

    Both runs must end as they say: the stopped one with a checkpoint of both ranks and the message, the
    resumed one with exit 0; neither may abort at its end (a rank's SIGABRT fails the job for any scheduler).
    """
    tmp_path.mkdir(exist_ok=True)
    config = tmp_path / "pretrain.cfg"
    tiny_config(10_000, checkpoint_every=1000, log_every=1, eval_every=1000).to_disk(config)
    out = tmp_path / "out"
    command = torchrun("-m", "spacy_elmo", "pretrain", str(config), str(out), "--quiet")
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
    _sigterm_one_rank_then_resume(tmp_path)


def test_sigterm_and_resume_end_cleanly_every_time_with_a_core_taken(tmp_path):
    # The resumed run once aborted at its end on a loaded machine: a gloo thread outlived the interpreter.
    competitor = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for attempt in range(3):
            _sigterm_one_rank_then_resume(tmp_path / str(attempt))
    finally:
        competitor.kill()
        competitor.wait()


def test_a_distributed_run_ends_its_process_group_threads_before_exit(tmp_path):
    # The cause itself: the gloo threads are joined when the trainer's block ends, not left to the interpreter's exit.
    config = tmp_path / "ddp.cfg"
    tiny_config(4, checkpoint_every=4, log_every=4).to_disk(config)
    out = tmp_path / "out"
    done = subprocess.run(torchrun("-m", "tests.pretrain.ddp_worker", str(config), str(out)),
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        threads = (out / f"threads{rank}.txt").read_text(encoding="utf-8").split()
        assert threads and not [name for name in threads if "gloo" in name], threads


def test_a_machine_lost_mid_run_leaves_the_other_with_one_line_and_the_checkpoint(tmp_path):
    """Two machines as torchrun starts them (--nnodes 2, one process each, sharing the output directory); rank 1's
    process is killed (SIGKILL: nothing of it answers again, as when its machine goes). Rank 0 ends non-zero with
    one line of its own, naming rank 1, the checkpoint kept and how to resume, and no Python traceback of its own."""
    config = tmp_path / "pretrain.cfg"
    tiny_config(100_000, checkpoint_every=3, log_every=1, eval_every=100_000).to_disk(config)
    out, port = tmp_path / "out", str(free_port())
    launch = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
              "--master-addr", "127.0.0.1", "--master-port", port]
    machines = [subprocess.Popen([*launch, "--node-rank", str(rank), "-m", "spacy_elmo", "pretrain", str(config),
                                  str(out), "--quiet"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for rank in (0, 1)]
    try:
        wait_for(machines[0], lambda: (out / CHECKPOINT).exists() and len(_children(machines[1].pid)) == 1)
        os.kill(_children(machines[1].pid)[0], signal.SIGKILL)
        _, said = machines[0].communicate(timeout=120)
    finally:
        for machine in machines:
            machine.kill()
            machine.wait()
    kept = torch.load(out / CHECKPOINT, weights_only=True)["step"]
    assert machines[0].returncode != 0
    line = next(line for line in said.splitlines() if line.startswith("✘ "))
    assert line.startswith("✘ lost contact with rank 1 (at 127.0.0.1) at step "), line
    assert f"the last checkpoint is step {kept}, {out / CHECKPOINT}; run the same command on every machine" in line
    assert "GLHF" not in said and "RuntimeError" not in said, said[-3000:]
