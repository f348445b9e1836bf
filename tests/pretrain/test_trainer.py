import copy
import json
import shutil
import subprocess
import sys
from datetime import datetime

import numpy as np
import pytest
import torch

from spacy_elmo import ElmoEmbedder, ElmoSettingsError
from spacy_elmo.runtime import BiLmSettings, ElmoRuntime
from spacy_elmo.model.encoder import ElmoEncoder
from spacy_elmo.pretrain.config import load_config
from spacy_elmo.pretrain.trainer import InitializeError, ResumeError, Trainer, estimated_steps_left, pace_line
from spacy_elmo.formats.weights import load_files
from tests.conftest import torchrun
from tests.pretrain.conftest import tiny_config


def _trainer(out, max_steps, **training) -> Trainer:
    typed, raw = load_config(tiny_config(max_steps, **training))
    return Trainer(typed, raw, out)


def _evals(out):
    return [r for r in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if r.get("event") == "eval"]


def test_tiny_model_learns_the_fixture_corpus(tmp_path):
    result = _trainer(tmp_path, 100, eval_every=100, optimizer="adam", learn_rate=0.01).run(progress=False)
    first, last = _evals(tmp_path)[0], _evals(tmp_path)[-1]
    assert first["step"] == 0 and last["step"] == 100
    assert last["average_ppl"] < 20 < first["average_ppl"] / 3  # bilm-tf's own bar is < 20 on this corpus
    assert result["eval"] == {k: last[k] for k in ("forward_ppl", "backward_ppl", "average_ppl")}


def test_resume_after_interruption_equals_uninterrupted_training(tmp_path):
    straight = _trainer(tmp_path / "a", 20)
    straight.run(progress=False)
    interrupted = _trainer(tmp_path / "b", 13)
    interrupted.run(progress=False)
    # A crash after step 13 loses nothing beyond the last checkpoint; rerunning resumes from it.
    resumed = _trainer(tmp_path / "b", 20)
    assert resumed.step == 13
    resumed.run(progress=False)
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    # Log windows that don't span the interruption are the same too.
    logged = {r["step"]: r["loss"] for r in _log(tmp_path / "b")}
    assert [(r["step"], r["loss"]) for r in _log(tmp_path / "a") if r["step"] != 15] == [
        (step, logged[step]) for step in (5, 10, 20)
    ]


def _log(out):
    return [r for r in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if "loss" in r]


def test_exported_files_load_into_the_embedder_with_the_same_outputs(tmp_path):
    trainer = _trainer(tmp_path, 10)
    trainer.run(progress=False)
    sentences = [["The", "model", "reads", "this", "."], ["Another", "one"]]
    in_memory = ElmoRuntime(ElmoEncoder(trainer.model.bilm), BiLmSettings(initial_state="zeros")).layers(sentences)
    loaded = ElmoEmbedder(tmp_path / "options.json", tmp_path / "weights.hdf5", initial_state="zeros").embed_batch(sentences)
    for a, b in zip(in_memory, loaded):
        np.testing.assert_array_equal(a, b)
    vocab = (tmp_path / "vocab.txt").read_text().split("\n")
    assert vocab[:3] == ["<S>", "</S>", "<UNK>"]


def _torchrun_replicas(tmp_path, config):
    """Train ``config`` with two processes into tmp_path/out; each process's final parameters."""
    path = tmp_path / "ddp.cfg"
    config.to_disk(path)
    worker = ["-m", "tests.pretrain.ddp_worker", str(path), str(tmp_path / "out")]
    done = subprocess.run(torchrun(*worker), capture_output=True, text=True, timeout=300, cwd=_repo_root())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "find_unused_parameters" not in done.stderr  # torch's note of a search for unused parameters, not needed
    replicas = [torch.load(tmp_path / "out" / f"replica{r}.pt", weights_only=True) for r in (0, 1)]
    for name, tensor in replicas[0].items():
        assert torch.equal(tensor, replicas[1][name]), name
    return replicas


@pytest.mark.slow
def test_two_processes_with_torchrun_end_with_identical_replicas(tmp_path):
    replicas = _torchrun_replicas(tmp_path, tiny_config(12, checkpoint_every=12, log_every=4))
    losses = [r["loss"] for r in _log(tmp_path / "out")]
    assert len(losses) == 3 and losses[-1] < losses[0]
    # One process takes the run over: model and optimizer exactly, the text at the same point of its epoch.
    typed, raw = load_config(tiny_config(14, checkpoint_every=12, log_every=4))
    with pytest.warns(UserWarning, match="written by 2 processes and 1 are running"):
        alone = Trainer(typed, raw, tmp_path / "out")
    assert alone.step == 12
    for name, tensor in replicas[0].items():
        assert torch.equal(alone.model.state_dict()[name], tensor), name
    alone.run(progress=False)
    assert alone.step == 14


@pytest.mark.slow
def test_two_processes_stop_together_at_max_tokens(tmp_path):
    # Both processes' tokens count, and both stop at the same step (or one would wait for the other forever).
    _torchrun_replicas(tmp_path, tiny_config(100, log_every=1, max_tokens=1000))
    seen = [r["tokens_seen"] for r in _log(tmp_path / "out")]
    assert seen[-2] < 1000 <= seen[-1] and len(seen) < 100


def _repo_root():
    from pathlib import Path

    return Path(__file__).resolve().parents[2]


def test_resume_with_other_settings_names_them_and_changes_nothing(tmp_path):
    _trainer(tmp_path, 5).run(progress=False)
    saved = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ResumeError, match=r"training.grad_clip: 10.0 in the run, 5.0 now") as err:
        _trainer(tmp_path, 10, grad_clip=5.0)
    assert "training.max_steps:" not in str(err.value)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == saved
    # Run length, reporting and step size may change (continuing on a GPU with larger batches, say).
    resumed = _trainer(tmp_path, 10, log_every=2, batch_tokens=240, learn_rate=0.5)
    assert resumed.step == 5 and resumed.optimizer.param_groups[0]["lr"] == 0.5


def test_a_short_run_logs_its_steps(tmp_path):
    _trainer(tmp_path, 3, log_every=50).run(progress=False)
    assert [(r["step"], r["tokens_seen"] > 0) for r in _log(tmp_path)] == [(3, True)]


def test_max_tokens_stops_at_the_first_step_that_reaches_it_and_can_be_raised_on_resume(tmp_path):
    _trainer(tmp_path, 100, log_every=1, max_tokens=500).run(progress=False)
    seen = [r["tokens_seen"] for r in _log(tmp_path)]
    assert seen[-2] < 500 <= seen[-1] and len(seen) < 100
    assert _trainer(tmp_path, 100, log_every=1, max_tokens=500).run(progress=False)["step"] == len(seen)
    longer = _trainer(tmp_path, 100, log_every=1, max_tokens=1000).run(progress=False)
    seen = [r["tokens_seen"] for r in _log(tmp_path)]
    assert longer["tokens_seen"] == seen[-1] and seen[-2] < 1000 <= seen[-1]


def _overfitting_trainer(out, max_steps) -> Trainer:
    """Adam on the 4 training lines, held out on other sentences: the held-out perplexity falls, then rises."""
    dev = out.parent / "dev.txt"
    dev.write_text("the models of language use words .\nwords make the neural networks of language .\n")
    config = tiny_config(max_steps, eval_every=5, optimizer="adam", learn_rate=0.01)
    config["paths"]["dev"] = str(dev)
    return Trainer(*load_config(config), out)


def _weights(folder):
    return load_files(folder / "options.json", folder / "weights.hdf5").state_dict()


def test_best_keeps_the_weights_of_the_lowest_held_out_perplexity_across_a_resume(tmp_path):
    _overfitting_trainer(tmp_path / "a", 53).run(progress=False)
    _overfitting_trainer(tmp_path / "a", 60).run(progress=False)
    evals = _evals(tmp_path / "a")
    lowest = min(evals, key=lambda r: r["average_ppl"])
    assert lowest["step"] < evals[-1]["step"]  # the held-out perplexity rose after its lowest point
    scores = json.loads((tmp_path / "a" / "best" / "scores.json").read_text())
    assert (scores["step"], scores["average_ppl"]) == (lowest["step"], lowest["average_ppl"])
    # A run stopped at that step ends with the same weights.
    _overfitting_trainer(tmp_path / "b", lowest["step"]).run(progress=False)
    best, stopped = _weights(tmp_path / "a" / "best"), _weights(tmp_path / "b")
    assert best.keys() == stopped.keys()
    for name in best:
        assert torch.equal(best[name], stopped[name]), name


def test_rerunning_a_finished_run_evaluates_its_final_weights_and_writes_a_missing_best(tmp_path):
    _trainer(tmp_path, 10, eval_every=5).run(progress=False)
    shutil.rmtree(tmp_path / "best")  # as in an output written before best/ existed
    result = _trainer(tmp_path, 10, eval_every=5).run(progress=False)
    scores = json.loads((tmp_path / "best" / "scores.json").read_text())
    assert result["step"] == scores["step"] == 10 and result["eval"]["average_ppl"] == scores["average_ppl"]


def test_pretrain_command_refuses_a_missing_corpus_without_writing(tmp_path, write_config):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "spacy_elmo", "pretrain", str(write_config(5)), str(out), "--quiet"]
    done = subprocess.run(command + ["--paths.train", str(tmp_path / "nowhere.txt")], capture_output=True, text=True, cwd=_repo_root())
    assert done.returncode == 1
    assert "No text files found" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


def _adapt_config(out, max_steps, text, **initialize):
    config = tiny_config(max_steps, eval_every=max_steps)
    config["paths"].update(train=str(text), dev=str(text))
    config["initialize"].update(initialize)
    return load_config(config)


def test_adapting_a_run_to_new_text_keeps_its_vocabulary_and_lowers_perplexity_there(tmp_path):
    _trainer(tmp_path / "source", 30).run(progress=False)
    text = tmp_path / "domain.txt"
    text.write_text("The patient was given aspirin .\nThe aspirin helped the patient .\nNo patient was harmed .\n")
    typed, raw = _adapt_config(tmp_path, 20, text, run=str(tmp_path / "source"))
    adapted = Trainer(typed, raw, tmp_path / "adapted")
    source = torch.load(tmp_path / "source" / "checkpoint.pt", weights_only=True)["model"]
    for name, tensor in adapted.model.state_dict().items():
        assert torch.equal(tensor, source[name]), name
    assert (tmp_path / "adapted" / "vocab.txt").read_text() == (tmp_path / "source" / "vocab.txt").read_text()
    adapted.run(progress=False)
    before, after = _evals(tmp_path / "adapted")[0], _evals(tmp_path / "adapted")[-1]
    assert after["average_ppl"] < before["average_ppl"] / 2


def test_adapting_elmo_files_builds_a_new_vocabulary(tmp_path):
    _trainer(tmp_path / "source", 5).run(progress=False)
    text = tmp_path / "domain.txt"
    text.write_text("zebra quokka zebra\nquokka zebra\n")
    files = dict(options_file=str(tmp_path / "source" / "options.json"), weight_file=str(tmp_path / "source" / "weights.hdf5"))
    typed, raw = _adapt_config(tmp_path, 2, text, **files)
    adapted = Trainer(typed, raw, tmp_path / "adapted")
    source = ElmoEmbedder(files["options_file"], files["weight_file"]).encoder.bilm.state_dict()
    for name, tensor in adapted.model.bilm.state_dict().items():
        assert torch.equal(tensor, source[name]), name
    assert "quokka" in (tmp_path / "adapted" / "vocab.txt").read_text().split("\n")


def test_adapting_another_architecture_is_refused_before_writing(tmp_path):
    _trainer(tmp_path / "source", 5).run(progress=False)
    config = tiny_config(5)
    config["model"]["lstm_dim"] = 32
    config["initialize"]["run"] = str(tmp_path / "source")
    typed, raw = load_config(config)
    with pytest.raises(InitializeError, match="lstm_dim: 64 there, 32 in"):
        Trainer(typed, raw, tmp_path / "adapted")
    assert not (tmp_path / "adapted").exists()


def test_a_process_beyond_the_machines_gpus_is_refused_in_one_line_before_writing(tmp_path, monkeypatch):
    """``torchrun --nproc_per_node 4`` on a machine with one GPU: processes 1-3 have none of their own."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_RANK", "3")
    with pytest.raises(ElmoSettingsError, match=r"process 3 of this machine has no GPU: .*start at most 1 \(torchrun --nproc_per_node\)"):
        _trainer(tmp_path / "out", 5)
    assert not (tmp_path / "out").exists()


def test_steps_left_are_those_to_max_steps_or_fewer_to_max_tokens_at_the_tokens_per_step_seen():
    assert estimated_steps_left(10, 100, 2000, None, 10, 1000) == 90
    assert estimated_steps_left(10, 100, 2000, 10000, 10, 1000) == 80  # 8000 tokens at 100 a step
    assert estimated_steps_left(10, 50, 2000, 10000, 10, 1000) == 40
    assert estimated_steps_left(10, 100, 2050, 10000, 10, 1000) == 80  # 79.5 steps: the last one ends the run


def test_the_pace_line_gives_steps_per_second_what_is_left_and_the_end_at_that_pace():
    line = pace_line(2.0, 7290, datetime(2026, 1, 1, 23, 30))
    assert line == "2.00 steps/s; 7,290 steps to go: about 1 h 1 min, ending around 2026-01-02 00:30"
    assert pace_line(0.5, 20, datetime(2026, 1, 1)).endswith("about 40 s, ending around 2026-01-01 00:00")


def test_a_run_prints_its_pace_once_after_its_first_evaluation_with_the_steps_left(tmp_path, capsys):
    _trainer(tmp_path, 6, eval_every=2).run(progress=False)
    lines = [line for line in capsys.readouterr().out.splitlines() if "steps/s" in line]
    assert len(lines) == 1 and "; 4 steps to go: about " in lines[0], lines


def test_a_step_leaves_the_softmax_clusters_no_target_reached_as_an_unused_parameter(tmp_path):
    """Every tail cluster runs in every step (so DDP needs no search for unused parameters) and adds nothing to the
    loss; a cluster no target reached keeps no gradient, so the optimizer leaves it and its moments alone."""
    trainer = _trainer(tmp_path / "out", 2)
    words, tail = trainer.vocab.words, trainer.model.softmax.tail
    first_tail_word = words[trainer.model.softmax.cutoffs[0]]
    common = [words[3:6] * 2]  # head words only: no target in any tail cluster
    def kept() -> list:  # the tail's parameters and their optimizer state (its step count included)
        return [(p.detach().clone(), copy.deepcopy(trainer.optimizer.state.get(p))) for p in tail.parameters()]

    def same(a: list, b: list) -> bool:
        return all(torch.equal(x, y) and str(s) == str(t) for (x, s), (y, t) in zip(a, b))

    before = kept()
    trainer.stream.next_batch = lambda: common
    trainer.train_step()
    assert same(before, kept())
    trainer.stream.next_batch = lambda: [[*words[3:6], first_tail_word, *words[3:5]]]
    trainer.train_step()
    assert not same(before, kept())


def test_the_loss_counts_the_targets_of_each_tail_cluster_and_gets_every_parameter_a_gradient(tmp_path):
    trainer = _trainer(tmp_path / "out", 2)
    model, words = trainer.model, trainer.vocab.words
    sentence = [*words[3:6], words[model.softmax.cutoffs[0]], words[4]]
    loss = model([sentence])
    # targets: each word's next (4 forward) and previous (4 backward); the tail word is one of each
    assert loss.tail_targets.tolist() == [2] + [0] * (len(model.softmax.tail) - 1)
    loss.mean.backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.slow
def test_under_torchrun_rank_0_reports_the_run_and_the_others_only_what_they_did(tmp_path):
    path = tmp_path / "ddp.cfg"
    tiny_config(4, checkpoint_every=4, log_every=4).to_disk(path)  # [paths] dev is given
    command = torchrun("-m", "spacy_elmo", "pretrain", str(path), str(tmp_path / "out"), "--quiet")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=_repo_root())
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len([line for line in lines if line.startswith("Done: 4 steps") and "held-out perplexity: forward" in line]) == 1
    assert len([line for line in lines if line.startswith("ELMo files: ")]) == 1
    assert [line for line in lines if line.startswith("Rank ")] == [
        "Rank 1 of 2 done: 4 steps; rank 0 reports the run and writes its files"
    ]
    assert "no held-out perplexity" not in done.stdout
