import subprocess
import sys

from confection import Config

from spacy_elmo.options import preset


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "spacy_elmo", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_init_config_writes_the_preset(tmp_path):
    done = _cli("init-config", "--preset", "small", str(tmp_path / "small.cfg"))
    assert done.returncode == 0, done.stderr
    config = Config().from_disk(tmp_path / "small.cfg", interpolate=False)
    assert (config["model"]["lstm_dim"], config["model"]["projection_dim"]) == (1024, 128)
    assert config["model"]["n_highway"] == preset("small").n_highway


def test_pretrain_reports_a_bad_config_without_a_traceback(tmp_path):
    _cli("init-config", str(tmp_path / "c.cfg"))
    done = _cli("pretrain", str(tmp_path / "c.cfg"), str(tmp_path / "out"), "--paths.train", "x.txt", "--training.optimizer", "lion")
    assert done.returncode == 1
    assert "optimizer" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
