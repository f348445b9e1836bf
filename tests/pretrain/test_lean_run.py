"""A pretraining run kept without its checkpoint (``pretrain_runs/``): its fp16 softmax, its restoration from git."""
import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Dict, Tuple

import pytest
import torch

from confection import Config

from spacy_elmo import ElmoEmbedder
from spacy_elmo.pretrain.config import load_config
from spacy_elmo.pretrain.trainer import CHECKPOINT, SOFTMAX, InitializeError, Trainer, evaluate
from tests.conftest import shared_data
from tests.pretrain.conftest import tiny_config

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("export_softmax", ROOT / "scripts" / "export_softmax.py")
export_softmax = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(export_softmax)


def _lean_run(tmp_path: Path) -> Path:
    """A tiny finished run whose checkpoint is replaced by its fp16 softmax, as ``pretrain_runs/`` keeps runs."""
    source = tmp_path / "source"
    typed, raw = load_config(tiny_config(6))
    Trainer(typed, raw, source).run(progress=False)
    export_softmax.export_softmax(source)
    torch.save(torch.load(source / CHECKPOINT, weights_only=True)["model"], tmp_path / "model.pt")
    (source / CHECKPOINT).unlink()
    return source


def _adapt(tmp_path: Path, **initialize) -> Trainer:
    config = tiny_config(2)
    config["initialize"].update(initialize)
    typed, raw = load_config(config)
    return Trainer(typed, raw, tmp_path / "adapted")


def test_a_lean_run_with_its_exported_bilm_starts_adaptation_from_its_softmax_and_vocabulary(tmp_path):
    source = _lean_run(tmp_path)
    files = dict(options_file=str(source / "options.json"), weight_file=str(source / "weights.hdf5"))
    adapted = _adapt(tmp_path, run=str(source), **files)
    trained = torch.load(tmp_path / "model.pt", weights_only=True)
    for name, tensor in adapted.model.softmax.state_dict().items():
        assert torch.equal(tensor, trained[f"softmax.{name}"].half().float()), name
    shipped = ElmoEmbedder(files["options_file"], files["weight_file"]).encoder.bilm.state_dict()
    for name, tensor in adapted.model.bilm.state_dict().items():
        assert torch.equal(tensor, shipped[name]), name
    assert (tmp_path / "adapted" / "vocab.txt").read_bytes() == (source / "vocab.txt").read_bytes()


def test_export_softmax_writes_fp16_tensors_of_every_softmax_parameter(tmp_path):
    typed, raw = load_config(tiny_config(2))
    trainer = Trainer(typed, raw, tmp_path)
    trainer.run(progress=False)
    saved = torch.load(export_softmax.export_softmax(tmp_path), weights_only=True)
    assert saved.keys() == trainer.model.softmax.state_dict().keys()
    assert {t.dtype for t in saved.values()} == {torch.float16}


def test_a_lean_run_without_biLM_files_is_refused_naming_the_way_out_before_writing(tmp_path):
    source = _lean_run(tmp_path)
    with pytest.raises(InitializeError, match="keeps no checkpoint.pt.*restore_checkpoint.sh"):
        _adapt(tmp_path, run=str(source))
    assert not (tmp_path / "adapted").exists()


def test_a_directory_with_neither_checkpoint_nor_softmax_is_not_a_run(tmp_path):
    source = _lean_run(tmp_path)
    (source / SOFTMAX).unlink()
    files = dict(options_file=str(source / "options.json"), weight_file=str(source / "weights.hdf5"))
    with pytest.raises(InitializeError, match="no checkpoint.pt or softmax.pt"):
        _adapt(tmp_path, run=str(source), **files)
    assert not (tmp_path / "adapted").exists()


def _in_history(commit: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", commit], capture_output=True).returncode == 0


def _restore(name: str, dest: Path) -> Tuple[str, Dict[str, torch.Tensor]]:
    """Run ``restore_checkpoint.sh`` for ``name``; its commit and the restored checkpoint's model state."""
    script = ROOT / "scripts" / "restore_checkpoint.sh"
    commit = next(line.split("commit=")[1].split()[0] for line in script.read_text().splitlines() if f"{name})" in line)
    if not _in_history(commit):
        pytest.skip(f"this clone lacks the history that holds {name}'s checkpoint (shallow clone)")
    done = subprocess.run(["bash", str(script), name, str(dest)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (dest / "vocab.txt").read_bytes() == (ROOT / "pretrain_runs" / name / "vocab.txt").read_bytes()
    return commit, torch.load(dest / CHECKPOINT, weights_only=True)["model"]


@pytest.mark.parametrize("name", ["en_gutenberg_tiny", "zh_classics_tiny"])
def test_restored_checkpoint_is_the_run_whose_weights_its_commit_shipped(tmp_path, name):
    """For English that is the first pass, which the shipped model continued (MODEL_CARD.md)."""
    commit, model = _restore(name, tmp_path / name)
    for file in ("options.json", "weights.hdf5"):
        blob = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:spacy_elmo/data/{name}/{file}"], capture_output=True, check=True)
        (tmp_path / file).write_bytes(blob.stdout)
    bilm = ElmoEmbedder(tmp_path / "options.json", tmp_path / "weights.hdf5").encoder.bilm
    for key, tensor in bilm.state_dict().items():
        assert torch.equal(model[f"bilm.{key}"].half().float(), tensor.float()), key


def test_the_chinese_model_and_softmax_the_repository_ships_are_the_restored_runs(tmp_path):
    _, model = _restore("zh_classics_tiny", tmp_path)
    for key, tensor in ElmoEmbedder(lang="zh").encoder.bilm.state_dict().items():
        assert torch.equal(model[f"bilm.{key}"].half().float(), tensor.float()), key
    softmax = torch.load(ROOT / "pretrain_runs" / "zh_classics_tiny" / SOFTMAX, weights_only=True)
    for key, tensor in softmax.items():
        assert torch.equal(model[f"softmax.{key}"].half(), tensor), key


def test_restoring_over_an_existing_checkpoint_changes_nothing(tmp_path):
    (tmp_path / CHECKPOINT).write_bytes(b"mine")
    script = ROOT / "scripts" / "restore_checkpoint.sh"
    done = subprocess.run(["bash", str(script), "en_gutenberg_tiny", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 1 and "exists: nothing was changed" in done.stderr
    assert (tmp_path / CHECKPOINT).read_bytes() == b"mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT]


@pytest.mark.slow
def test_the_shipped_english_biLM_and_the_committed_softmax_give_the_perplexity_the_run_logged_last(tmp_path, monkeypatch):
    """The package's fp16 biLM and ``pretrain_runs``' fp16 softmax are the language model the run ended with: on the
    held-out sentences the run evaluated, their perplexity is the run's last logged one (its final weights, in
    fp32), to within what fp16 storage moves it."""
    heldout = str(shared_data("lm_gutenberg_en") / "heldout.txt.gz")
    run = ROOT / "pretrain_runs" / "en_gutenberg_tiny"
    logged = [json.loads(line) for line in (run / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    last = [record for record in logged if record.get("event") == "eval"][-1]
    assert last["step"] == max(record["step"] for record in logged)  # the final weights were evaluated
    monkeypatch.chdir(ROOT)  # the adaptation config's [initialize] paths are relative to the repository
    config = Config().from_disk(ROOT / "configs" / "adapt_en_gutenberg_tiny.cfg", interpolate=False)
    config["paths"].update(train=heldout, dev=heldout)
    trainer = Trainer(*load_config(config), tmp_path / "run")
    found = evaluate(trainer.model, trainer.dev, trainer.config.training.batch_tokens)
    assert found["average_ppl"] == pytest.approx(last["average_ppl"], rel=0.005)
