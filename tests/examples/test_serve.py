"""examples/serve.py, the FastAPI app, served by uvicorn over real HTTP on 127.0.0.1: concurrent requests, one long
text among short ones, each answered with what a serial ``nlp(text)`` gives.

The app serves the reference fixture model here (its ``ELMO_OPTIONS_FILE`` / ``ELMO_WEIGHT_FILE``), whose vectors in
a merged batch are those of a serial call within ``ROUNDING``, as the tests of merged calls show."""
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import spacy

from tests.conftest import ALLENNLP, ROUNDING, free_port

ROOT = Path(__file__).resolve().parents[2]
MODEL = {"options_file": str(ALLENNLP / "options.json"), "weight_file": str(ALLENNLP / "lm_weights.hdf5")}
STARTUP_S = 120  # the longest the server may take to answer /health
REQUEST_S = 120  # the longest one request may take, the long one among the others included


def _texts(n: int, seed: int, longest: int) -> list:
    rng = np.random.default_rng(seed)
    words = [w for w in (ALLENNLP / "vocab_test.txt").read_text(encoding="utf-8").split("\n") if w.strip()]
    return [" ".join(words[j] for j in rng.integers(0, len(words), rng.integers(1, longest))) for _ in range(n)]


@pytest.fixture(scope="module")
def server():
    """The example app in a uvicorn process on a free port; the base URL once /health answers. Stopped after."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "ELMO_OPTIONS_FILE": MODEL["options_file"], "ELMO_WEIGHT_FILE": MODEL["weight_file"]}
    command = [sys.executable, "-m", "uvicorn", "serve:app", "--app-dir", "examples", "--host", "127.0.0.1",
               "--port", str(port)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert process.poll() is None, f"the server exited: {process.stderr.read()}"
            try:
                if httpx.get(f"{url}/health", timeout=5).json() == {"status": "ok"}:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"no answer from /health within {STARTUP_S} s"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


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
    refused = httpx.post(f"{server}/embed", json={"text": ""}, timeout=REQUEST_S)
    assert refused.status_code == 422 and "no tokens" in refused.text
