"""bf16 pretraining (``[training] bf16``, autocast): chosen by init-config or timed by the run ("auto"), refused where
emulated, recorded."""
import json
import time
import warnings

import pytest
import torch
from confection import Config
from typer.testing import CliRunner

import spacy_elmo.pretrain.config as config_module
from spacy_elmo.commands.cli import app
from spacy_elmo.pretrain.config import load_config
from spacy_elmo.pretrain.language_model import BiLanguageModel
from spacy_elmo.pretrain.trainer import CHECKPOINT, TIMED_PASSES, Trainer
from tests.pretrain.conftest import tiny_config


@pytest.fixture
def native_bf16(monkeypatch):
    """Set whether this CPU counts as having native bf16 (training on the CPU, as on a machine without a GPU)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def set_native(native: bool) -> None:
        monkeypatch.setattr(config_module, "native_bf16_cpu", lambda: native)

    return set_native


def _trainer(out, max_steps, **training) -> Trainer:
    return Trainer(*load_config(tiny_config(max_steps, **training)), out)


@pytest.mark.parametrize("native, value, reason", [(True, '"auto"', "has native bf16"), (False, "false", "has no native bf16")])
def test_init_config_sets_bf16_for_this_cpu_with_a_comment_line_saying_why(tmp_path, native_bf16, native, value, reason):
    native_bf16(native)
    done = CliRunner().invoke(app, ["init-config", str(tmp_path / "c.cfg")])
    assert done.exit_code == 0, done.output
    lines = (tmp_path / "c.cfg").read_text(encoding="utf-8").splitlines()
    at = lines.index(f"bf16 = {value}", lines.index("[training]"))
    assert lines[at - 1].startswith(f"# init-config set bf16 = {value}: this CPU (") and reason in lines[at - 1]
    assert Config().from_disk(tmp_path / "c.cfg")["training"]["bf16"] == ("auto" if native else False)


def test_auto_trains_fp32_without_timing_where_bf16_would_be_emulated(tmp_path, native_bf16, monkeypatch):
    native_bf16(False)
    monkeypatch.setattr(Trainer, "_measured_precision", None)  # calling it would fail
    trainer = _trainer(tmp_path, 2, bf16="auto")
    assert trainer.precision == "fp32"
    assert trainer.precision_reason.startswith('[training] bf16 = "auto"; this CPU (') and "no native bf16" in trainer.precision_reason


@pytest.mark.parametrize("slowed, chosen", [("bf16", "fp32"), ("fp32", "bf16")])
def test_auto_trains_in_the_precision_its_timed_passes_found_faster(tmp_path, native_bf16, monkeypatch, slowed, chosen):
    native_bf16(True)
    forward = BiLanguageModel.forward

    def slowed_forward(model, sentences):
        if torch.is_autocast_enabled("cpu") == (slowed == "bf16"):
            time.sleep(0.05)  # far beyond what either precision takes on this tiny model's batch
        return forward(model, sentences)

    monkeypatch.setattr(BiLanguageModel, "forward", slowed_forward)
    trainer = _trainer(tmp_path, 2, bf16="auto")
    assert trainer.precision == chosen
    assert f"x as fast in bf16 as in fp32 here ({TIMED_PASSES} timed passes each)" in trainer.precision_reason


def test_a_run_after_its_timed_passes_equals_one_given_the_chosen_precision(tmp_path, native_bf16):
    native_bf16(True)  # emulated where not native: slow, but the model is tiny
    auto = _trainer(tmp_path / "auto", 3, bf16="auto")
    auto.run(progress=False)
    given = _trainer(tmp_path / "given", 3, bf16=auto.precision == "bf16")
    given.run(progress=False)
    for (name, a), b in zip(auto.model.state_dict().items(), given.model.state_dict().values()):
        assert torch.equal(a, b), name  # the same steps on the same batches, the same random draws
    assert auto.stream.state_dict() == given.stream.state_dict()


def test_a_resumed_auto_run_keeps_its_measured_precision_without_timing_again(tmp_path, native_bf16, monkeypatch):
    native_bf16(True)
    first = _trainer(tmp_path, 5, bf16="auto")
    first.run(progress=False)
    monkeypatch.setattr(Trainer, "_measured_precision", None)  # calling it would fail
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "precision changed"
        resumed = _trainer(tmp_path, 10, bf16="auto")
    assert resumed.step == 5 and resumed.precision == first.precision
    assert resumed.precision_reason == f'[training] bf16 = "auto": {first.precision}, as measured when the run started'


def test_pretrain_refuses_bf16_on_a_cpu_without_native_bf16_in_one_line(tmp_path, native_bf16):
    native_bf16(False)
    path = tmp_path / "c.cfg"
    tiny_config(2, bf16=True).to_disk(path)
    done = CliRunner().invoke(app, ["pretrain", str(path), str(tmp_path / "out"), "--quiet"])
    assert done.exit_code == 1 and isinstance(done.exception, SystemExit)  # not an uncaught error
    assert done.output.startswith("✘ [training] bf16 = true, but this CPU (") and done.output.count("\n") == 1
    assert "--training.bf16 false" in done.output
    assert not (tmp_path / "out").exists()


def test_a_run_prints_its_precision_at_start_and_logs_it_with_every_record(tmp_path, native_bf16):
    native_bf16(True)
    path = tmp_path / "c.cfg"
    tiny_config(4, bf16=True, log_every=2).to_disk(path)
    done = CliRunner().invoke(app, ["pretrain", str(path), str(tmp_path / "out"), "--quiet"])
    assert done.exit_code == 0, done.output
    assert done.output.splitlines()[0].startswith("Training in bf16 on cpu ([training] bf16 = true; this CPU (")
    records = [json.loads(line) for line in (tmp_path / "out" / "log.jsonl").read_text().splitlines()]
    assert [(r["step"], r["precision"]) for r in records if "loss" in r] == [(2, "bf16"), (4, "bf16")]


def test_resuming_at_another_precision_says_so_and_continues(tmp_path, native_bf16):
    native_bf16(True)
    _trainer(tmp_path, 5).run(progress=False)
    assert torch.load(tmp_path / CHECKPOINT, weights_only=True)["precision"] == "fp32"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _trainer(tmp_path, 10).step == 5
    assert not [w for w in caught if "precision" in str(w.message)]  # the same precision resumes silently
    with pytest.warns(UserWarning, match=r"The precision changed \(checkpoint fp32, now bf16\)"):
        resumed = _trainer(tmp_path, 10, bf16=True)
    resumed.run(progress=False)
    assert resumed.step == 10
    assert torch.load(tmp_path / CHECKPOINT, weights_only=True)["precision"] == "bf16"


def test_a_checkpoint_without_its_precision_takes_it_from_the_runs_saved_config(tmp_path, native_bf16):
    native_bf16(True)
    _trainer(tmp_path, 5).run(progress=False)
    state = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    del state["precision"]  # as checkpoints were written before they recorded it
    torch.save(state, tmp_path / CHECKPOINT)
    with pytest.warns(UserWarning, match=r"The precision changed \(checkpoint fp32, now bf16\)"):
        assert _trainer(tmp_path, 10, bf16=True).step == 5


def test_a_bf16_step_trains_fp32_weights_with_a_loss_near_the_fp32_one(tmp_path, native_bf16):
    native_bf16(True)  # emulated where not native: slow, but the model is tiny
    steps = {}
    for bf16 in (False, True):
        trainer = _trainer(tmp_path / str(bf16), 1, bf16=bf16)
        trainer.model.train()
        loss, _ = trainer.train_step()  # both from the same seed, on the same first batch
        steps[bf16] = loss, trainer.model.state_dict()
    (fp32_loss, fp32_weights), (bf16_loss, bf16_weights) = steps[False], steps[True]
    assert bf16_loss != fp32_loss  # the products ran in bf16
    assert abs(bf16_loss - fp32_loss) < 0.01 * fp32_loss  # bf16 keeps 8 significant bits
    for name, tensor in bf16_weights.items():
        assert tensor.dtype == fp32_weights[name].dtype == torch.float32, name
        assert torch.isfinite(tensor).all(), name
