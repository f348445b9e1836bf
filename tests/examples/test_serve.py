"""examples/serve.py, the FastAPI app, served by uvicorn over real HTTP on 127.0.0.1: concurrent requests, one long
text among short ones, each answered with what a serial ``nlp(text)`` gives; ready only once the model has run; a
model that cannot be used stops it with one line; a long request whose client goes away stops being computed.

The app serves the reference fixture model for the vectors (its ``ELMO_OPTIONS_FILE`` / ``ELMO_WEIGHT_FILE``), whose
vectors in a merged batch are those of a serial call within ``ROUNDING``, as the tests of merged calls show; the
embedded English model, slower, for readiness and cancelling."""
import json
import math
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Tuple

import httpx
import numpy as np
import pytest
import spacy

from tests.conftest import ALLENNLP, ROUNDING, free_port

ROOT = Path(__file__).resolve().parents[2]
MODEL = {"options_file": str(ALLENNLP / "options.json"), "weight_file": str(ALLENNLP / "lm_weights.hdf5")}
STARTUP_S = 120  # the longest the server may take to answer /health
REQUEST_S = 120  # the longest one request may take, the long one among the others included


def _vocabulary() -> list:
    return [w for w in (ALLENNLP / "vocab_test.txt").read_text(encoding="utf-8").split("\n") if w.strip()]


def _texts(n: int, seed: int, longest: int) -> list:
    rng, words = np.random.default_rng(seed), _vocabulary()
    return [" ".join(words[j] for j in rng.integers(0, len(words), rng.integers(1, longest))) for _ in range(n)]


def _server_env(**variables: str) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **variables}


def _start(env: dict) -> Tuple[subprocess.Popen, str]:
    """The example app in a uvicorn process on a free port, and its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "serve:app", "--app-dir", "examples", "--host", "127.0.0.1",
               "--port", str(port)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return process, f"http://127.0.0.1:{port}"


@contextmanager
def _serving(env: dict) -> Iterator[Tuple[str, list]]:
    """The example app served until the block ends: its base URL once /health answers 200, and every answer /health
    gave before (its status code, or None when nothing listened yet)."""
    process, url = _start(env)
    answers: list = []
    try:
        deadline = time.monotonic() + STARTUP_S
        while not answers or answers[-1] != 200:
            assert process.poll() is None, f"the server exited: {process.stderr.read()}"
            try:
                answers.append(httpx.get(f"{url}/health", timeout=5).status_code)
            except httpx.TransportError:
                answers.append(None)
            assert time.monotonic() < deadline, f"no answer from /health within {STARTUP_S} s"
            time.sleep(0.1)
        yield url, answers
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def server():
    """The example app serving the fixture model; its base URL."""
    with _serving(_server_env(ELMO_OPTIONS_FILE=MODEL["options_file"], ELMO_WEIGHT_FILE=MODEL["weight_file"])) as (url, _):
        yield url


@pytest.fixture(scope="module")
def embedded_server():
    """The example app serving the embedded English model (slow enough that a long text takes many runs): its base
    URL, the /health answers before it was ready, and /stats then."""
    with _serving(_server_env()) as (url, answers):
        yield url, answers, httpx.get(f"{url}/stats", timeout=5).json()


@pytest.fixture(scope="module")
def nlp():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": MODEL})
    return nlp


@pytest.mark.slow
def test_concurrent_requests_with_a_long_one_among_them_get_the_serial_vectors(server, nlp):
    """24 short texts and one of ~3,000 words (sent fifth) from 8 client threads at once. Each token's vector is the
    serial one within rounding; the mean vector is the mean of the reply's token vectors."""
    texts = _texts(24, seed=21, longest=30)
    texts.insert(4, " ".join(_texts(150, seed=22, longest=40)))
    request = {"token_vectors": True}
    with httpx.Client(base_url=server, timeout=REQUEST_S) as client, ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda text: client.post("/embed", json={"text": text, **request}), texts))
    for text, reply in zip(texts, replies):
        assert reply.status_code == 200, reply.text
        doc, got = nlp(text), reply.json()
        assert got["tokens"] == [token.text for token in doc]
        np.testing.assert_allclose(got["token_vectors"], doc._.elmo, **ROUNDING)
        np.testing.assert_array_equal(got["vector"], np.asarray(got["token_vectors"], np.float32).mean(axis=0))


@pytest.mark.slow
def test_token_vectors_only_on_request_and_a_text_without_tokens_refused(server, nlp):
    text = _texts(1, seed=23, longest=20)[0]
    reply = httpx.post(f"{server}/embed", json={"text": text}, timeout=REQUEST_S).json()
    assert reply["token_vectors"] is None and len(reply["vector"]) == nlp(text)._.elmo.shape[1]
    for empty in ["", "   ", "\n\t "]:
        refused = httpx.post(f"{server}/embed", json={"text": empty}, timeout=REQUEST_S)
        assert refused.status_code == 422 and "no tokens" in refused.text, empty


@pytest.mark.slow
def test_health_answers_200_only_once_the_model_has_run(embedded_server):
    """Until ready nothing answers (the model loads before the app is served), then 200; by then the biLM has run
    once, the warm-up sentence: no request pays for loading."""
    _, answers, stats = embedded_server
    assert set(answers[:-1]) <= {None} and answers[-1] == 200
    assert (stats["batches_run"], stats["items_run"]) == (1, 1)


@pytest.mark.slow
@pytest.mark.parametrize("variable, value, named", [
    ("ELMO_OPTIONS_FILE", str(ROOT / "no_such_options.json"), "no_such_options.json"),
    ("ELMO_PRECISION", "int9", "int9"),
])
def test_a_model_that_cannot_be_used_stops_the_server_with_one_line(variable, value, named):
    env = _server_env(ELMO_WEIGHT_FILE=MODEL["weight_file"], **{variable: value})
    process, _ = _start(env)
    _, stderr = process.communicate(timeout=STARTUP_S)
    assert process.returncode != 0
    assert len(stderr.strip().splitlines()) == 1 and named in stderr, stderr


@pytest.mark.slow
def test_a_long_request_abandoned_by_its_client_stops_being_computed(embedded_server):
    """A text of 60,000 words (at least 60,000 tokens: at least 235 windows of 256) is posted and its connection closed
    once the biLM has started on it: the call is cancelled and the biLM runs fewer segments than the text has."""
    url, _, _ = embedded_server
    words = 60_000
    vocabulary = _vocabulary()
    text = " ".join(vocabulary[j] for j in np.random.default_rng(24).integers(0, len(vocabulary), words))
    stats = lambda: httpx.get(f"{url}/stats", timeout=REQUEST_S).json()  # noqa: E731
    before = stats()
    body = json.dumps({"text": text}).encode("utf-8")
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as connection:
        connection.sendall(b"POST /embed HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + REQUEST_S
        while stats()["items_run"] == before["items_run"]:  # the biLM has started on it
            assert time.monotonic() < deadline, "the long request never ran"
            time.sleep(0.02)
    while (after := stats())["waiting_calls"] or after["running"]:
        assert time.monotonic() < deadline, "the abandoned request was not dropped"
        time.sleep(0.05)
    assert after["calls_cancelled"] == before["calls_cancelled"] + 1
    assert after["items_run"] - before["items_run"] < math.ceil(words / 256)
