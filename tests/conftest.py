"""Shared fixtures: the reference ELMo test files bundled in tests/fixtures, and the research-only data sets.

The reference fixtures (Apache-2.0) are in the repository, so the tests run from a plain clone. The research-only
data sets (CoNLL-2003, SST, Weibo NER) never are: tests that need them read ``../shared/data`` beside the
checkout and skip, naming the folder, when it is absent. ``SPACY_ELMO_REQUIRE_SHARED=1`` (set by ``.ci/run``)
turns those skips into failures, so that CI cannot pass by skipping.

Tiers: tests marked ``slow`` (they start processes or take over ~5 s) are left out by pytest.ini's
``-m "not slow"``; ``--all`` runs them too.
"""
import json
import os
import shutil
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Callable, List, Optional, Tuple

import pytest
import torch

from spacy_elmo.sources.download import sha256_of

# The test models are tiny: one thread is faster for them, and avoids threads spinning against each other.
torch.set_num_threads(1)

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "elmo"
ALLENNLP = FIXTURE / "allennlp"
BILM_TF = FIXTURE / "bilm-tf" / "model"
REQUIRE_SHARED_VAR = "SPACY_ELMO_REQUIRE_SHARED"
# Two different computations of the biLM's float32 layers (another batch, padding, cache, kernel): equal up to
# rounding, which the LSTM carries along a sentence; values reach ~4, where one float32 step is 4.8e-7 (limits.md).
ROUNDING = {"rtol": 1e-5, "atol": 1e-6}
# What a sentence's vectors at int8 or bf16 may differ by with its batch or with what ran before it (limits.md).
BATCH_INDEPENDENCE = 1e-5


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--all``: the slow tier too, so that one command runs every test."""
    parser.addoption("--all", action="store_true", help="run the slow tier too (tests marked slow)")


def pytest_configure(config: pytest.Config) -> None:
    """``--all`` drops pytest.ini's ``-m "not slow"``; any other ``-m`` of the command line stays."""
    if config.getoption("--all") and config.option.markexpr == "not slow":
        config.option.markexpr = ""


def free_port() -> int:
    """A TCP port the OS has just found free, for a server or rendezvous a test starts (no fixed port to clash)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args: str) -> List[str]:
    """The command that runs ``args`` in two processes under torchrun, rendezvous on a free port."""
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    return [*launch, "--master_port", str(free_port()), *args]


def shared_data(name: str) -> Path:
    """The folder ``../shared/data/<name>`` of a data set that is not in the repository; skip if it is absent.

    With ``SPACY_ELMO_REQUIRE_SHARED=1`` a missing folder fails the test instead.
    """
    folder = SHARED / "data" / name
    if not folder.is_dir():
        reason = f"data set not in the repository and not found at {folder} (put ../shared beside the checkout)"
        if os.environ.get(REQUIRE_SHARED_VAR) == "1":
            pytest.fail(f"{reason}; {REQUIRE_SHARED_VAR}=1 requires it")
        pytest.skip(reason)
    return folder


@pytest.fixture(scope="session")
def allennlp_files():
    return ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"


@pytest.fixture(scope="session")
def bilm_tf_files():
    return BILM_TF / "options.json", BILM_TF / "lm_weights.hdf5"


def stand_in_download(cache: Path, name: str) -> None:
    """The published model ``name`` in the model cache ``cache`` as a download leaves it (its files and a manifest of
    their checksums), the AllenNLP test model standing in for it."""
    folder = cache / name
    folder.mkdir(parents=True)
    shutil.copy(ALLENNLP / "options.json", folder / "options.json")
    shutil.copy(ALLENNLP / "lm_weights.hdf5", folder / "weights.hdf5")
    digests = {file: sha256_of(folder / file) for file in ("options.json", "weights.hdf5")}
    (folder / "manifest.json").write_text(json.dumps({"sha256": digests}))


@pytest.fixture
def downloaded_original(tmp_path, monkeypatch) -> Path:
    """A model cache where "original" is downloaded (:func:`stand_in_download`). Returns the cache folder."""
    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path))
    stand_in_download(tmp_path, "original")
    return tmp_path


# --- calls from several Python threads at once (tests of the request batcher and its users) ---

JOIN_TIMEOUT = 60  # seconds; a join that times out is the failure signal of a deadlock


def start_threads(work: Callable, inputs: list, answers: Optional[dict] = None) -> Tuple[list, dict]:
    """One thread per input running ``work(x)``; returns the threads and a dict input -> result or exception (a new
    one, or ``answers``, filled as the calls return), in which ``"order"`` lists the inputs as their calls returned."""
    answers = {} if answers is None else answers
    answers.setdefault("order", [])

    def call(x):
        try:
            answers[x] = work(x)
        except BaseException as err:  # noqa: BLE001 - the test inspects what each caller got
            answers[x] = err
        answers["order"].append(x)

    threads = [threading.Thread(target=call, args=(x,), daemon=True) for x in inputs]
    for thread in threads:
        thread.start()
    return threads, answers


def join_threads(threads: list) -> None:
    for thread in threads:
        thread.join(JOIN_TIMEOUT)
    assert not any(thread.is_alive() for thread in threads), "a caller is still waiting: deadlock"


def wait_until(condition: Callable[[], bool]) -> None:
    """Return once ``condition()`` holds (polled); fail after ``JOIN_TIMEOUT``."""
    for _ in range(JOIN_TIMEOUT * 100):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError("timed out waiting for the threads")


def interrupt_main_thread() -> None:
    """Ctrl-C for the main thread (SIGINT sent to it), from another thread."""
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


@pytest.fixture
def ctrl_c_interrupts():
    """Python's own Ctrl-C handler for the test's duration: a suite started in the background by a shell inherits
    SIGINT ignored, and then no Ctrl-C would reach the waiting caller."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
