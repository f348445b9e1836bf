"""examples/serve.py, the FastAPI app, served by uvicorn over real HTTP on 127.0.0.1: concurrent requests, one long
text among short ones, each answered with what a serial ``nlp(text)`` gives; ready only once the model has run; a
model that cannot be used stops it with one line; a long request whose client goes away stops being computed; bad
requests (a text or body over the limits, text that is not Unicode, a token longer than the model reads) get a 4xx
or a note in one line, and the next request is served.

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
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Tuple

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


# The limits of the limited server: small, so that the tests send little.
TEXT_LIMIT = 2_000
BODY_LIMIT = 20_000
REPLY_LIMIT = 200_000


@pytest.fixture(scope="module")
def limited_server():
    """The example app serving the fixture model with a text limit of TEXT_LIMIT characters, a body limit of
    BODY_LIMIT bytes and a reply limit of REPLY_LIMIT bytes; its base URL."""
    env = _server_env(ELMO_OPTIONS_FILE=MODEL["options_file"], ELMO_WEIGHT_FILE=MODEL["weight_file"],
                      ELMO_MAX_TEXT_CHARS=str(TEXT_LIMIT), ELMO_MAX_BODY_BYTES=str(BODY_LIMIT),
                      ELMO_MAX_REPLY_BYTES=str(REPLY_LIMIT))
    with _serving(env) as (url, _):
        yield url


def _still_serving(url: str) -> bool:
    """Whether the server answers a good request with its tokens."""
    reply = httpx.post(f"{url}/embed", json={"text": "The cat sat ."}, timeout=REQUEST_S)
    return reply.status_code == 200 and reply.json()["tokens"] == ["The", "cat", "sat", "."]


def _raw_answer(url: str, head: bytes, parts: list) -> Tuple[int, str]:
    """Send a request's head and then its parts over a socket, without finishing the body, and read the answer
    until the server closes the connection: its status and body. The server must answer before the body ends."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=REQUEST_S) as connection:
        connection.sendall(head)
        for part in parts:
            connection.sendall(part)
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
    status_line, _, rest = received.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2].decode("utf-8")


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
@pytest.mark.parametrize("variable", ["ELMO_MAX_TEXT_CHARS", "ELMO_MAX_BODY_BYTES", "ELMO_MAX_REPLY_BYTES"])
def test_a_limit_that_is_not_a_positive_number_stops_the_server_with_one_line(variable):
    env = _server_env(ELMO_OPTIONS_FILE=MODEL["options_file"], ELMO_WEIGHT_FILE=MODEL["weight_file"], **{variable: "10MB"})
    process, _ = _start(env)
    _, stderr = process.communicate(timeout=STARTUP_S)
    assert process.returncode == 1
    assert len(stderr.strip().splitlines()) == 1 and variable in stderr and "10MB" in stderr, stderr


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


@pytest.mark.slow
def test_a_text_over_the_default_limit_is_refused_with_413_naming_it(server):
    """spaCy's own limit, 1,000,000 characters, by default: one character over it is refused with one line naming
    the limit and the setting that raises it, and the server goes on."""
    reply = httpx.post(f"{server}/embed", json={"text": "a" * 1_000_001}, timeout=REQUEST_S)
    detail = reply.json()["detail"]
    assert reply.status_code == 413 and "1,000,000" in detail and "ELMO_MAX_TEXT_CHARS" in detail, reply.text
    assert "\n" not in detail and _still_serving(server)


@pytest.mark.slow
def test_the_text_limit_is_the_one_set(limited_server):
    """ELMO_MAX_TEXT_CHARS: a text of exactly that many characters is embedded, one more is refused."""
    at_limit = httpx.post(f"{limited_server}/embed", json={"text": "ab " * (TEXT_LIMIT // 3) + "ab"}, timeout=REQUEST_S)
    over = httpx.post(f"{limited_server}/embed", json={"text": "ab " * (TEXT_LIMIT // 3) + "abc"}, timeout=REQUEST_S)
    assert (at_limit.status_code, over.status_code) == (200, 413), over.text
    assert f"{TEXT_LIMIT:,}" in over.json()["detail"]


@pytest.mark.slow
def test_a_body_declared_over_the_limit_is_refused_before_it_is_sent(limited_server):
    """A Content-Length over ELMO_MAX_BODY_BYTES gets 413 while the body is still unsent (a few bytes of it only)."""
    head = (b"POST /embed HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (BODY_LIMIT + 1))
    status, body = _raw_answer(limited_server, head, [b'{"text": "a'])
    assert status == 413 and f"{BODY_LIMIT:,} bytes" in json.loads(body)["detail"], body
    assert _still_serving(limited_server)


@pytest.mark.slow
@pytest.mark.parametrize("chunks, refused", [(3, True), (1, False)])
def test_a_chunked_body_is_refused_once_it_passes_the_limit(limited_server, chunks: int, refused: bool):
    """A chunked body (no Content-Length) is counted as it arrives: chunks of 8,000 bytes (a short text, then JSON's
    whitespace) pass the 20,000-byte limit at the third, which gets 413 though the body has not ended; one such
    chunk, ended, is read and embedded."""
    head = (b"POST /embed HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    body = b'{"text": "The cat sat ."}'
    first, spaces = body + b" " * (8_000 - len(body)), b" " * 8_000
    frame = lambda data: b"%x\r\n%s\r\n" % (len(data), data)  # noqa: E731
    parts = [frame(first)] + [frame(spaces)] * (chunks - 1) + ([] if refused else [b"0\r\n\r\n"])
    status, answer = _raw_answer(limited_server, head, parts)
    if refused:
        assert status == 413 and "ELMO_MAX_BODY_BYTES" in json.loads(answer)["detail"], answer
    else:
        assert status == 200 and json.loads(answer)["tokens"] == ["The", "cat", "sat", "."], answer
    assert _still_serving(limited_server)


@pytest.mark.slow
@pytest.mark.parametrize("text", ["\\ud800", "bank \\udfff river", "\\ude00\\ud83d"])
def test_a_lone_surrogate_is_refused_with_422_in_one_line(server, text: str):
    """JSON may escape a surrogate without its pair, which no UTF-8 text holds: 422, one line, no traceback."""
    body = b'{"text": "%s"}' % text.encode("ascii")
    reply = httpx.post(f"{server}/embed", content=body, headers={"content-type": "application/json"}, timeout=REQUEST_S)
    detail = reply.json()["detail"]
    assert reply.status_code == 422 and "surrogate" in detail and "\n" not in detail, reply.text
    assert _still_serving(server)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::spacy_elmo.TokenTruncationWarning")  # the local nlp's, expected
@pytest.mark.parametrize("token, read", [
    ("x" * 200_000, "x" * 48),
    ("a" + "中" * 20, "a" + "中" * 15),  # 61 bytes; the 48th byte is inside the 16th 中, which is left out
], ids=["200,000 letters", "cut inside a character"])
def test_a_token_longer_than_the_model_reads_is_reported_and_not_echoed_whole(server, nlp, token: str, read: str):
    """The fixture model reads 48 bytes of a token: the reply lists the token in ``truncated`` with its length in
    bytes, and its ``tokens`` hold what the model read (whole characters), not the whole token."""
    reply = httpx.post(f"{server}/embed", json={"text": f"A {token} here"}, timeout=REQUEST_S)
    assert reply.status_code == 200, reply.text
    got = reply.json()
    assert got["tokens"] == ["A", read, "here"]
    assert got["truncated"] == [{"index": 1, "length": len(token.encode("utf-8")), "read": 48, "unit": "bytes"}]
    assert len(reply.content) < 20_000
    np.testing.assert_allclose(got["vector"], nlp(f"A {token} here")._.elmo.mean(axis=0), **ROUNDING)


@pytest.mark.slow
@pytest.mark.parametrize("body, field", [
    ({"text": 123}, "text"),
    ({"token_vectors": True}, "text"),
    ({"text": "The cat sat .", "token_vectors": "yes"}, "token_vectors"),
    ({"text": "The cat sat .", "token_vectors": 1}, "token_vectors"),
    ({"text": "The cat sat .", "token_vector": True}, "token_vector"),
    ('{"text": "The cat', "the body is not JSON"),
], ids=["text-a-number", "text-missing", "yes-is-no-boolean", "1-is-no-boolean", "field-misspelt", "not-json"])
def test_a_request_of_the_wrong_shape_is_refused_with_422_in_one_line_naming_the_field(server, body, field: str):
    """As every other refusal: one line in ``detail`` (not FastAPI's list of objects), starting with what is wrong;
    a string is not read as a boolean, and a misspelt field is not ignored."""
    content = body if isinstance(body, str) else json.dumps(body)
    reply = httpx.post(f"{server}/embed", content=content, headers={"content-type": "application/json"},
                       timeout=REQUEST_S)
    detail = reply.json()["detail"]
    assert reply.status_code == 422 and isinstance(detail, str) and "\n" not in detail, reply.text
    assert detail.startswith(field), detail
    assert _still_serving(server)


REQUEST = '{"text": "The cat sat ."}'


@pytest.mark.slow
@pytest.mark.parametrize("body, byte", [
    (b'{"text": "caf\xe9 au lait"}', "byte 13 (b'\\xe9')"),  # Latin-1's "é" where UTF-8 is expected
    (REQUEST.encode("utf-16"), "byte 0 (b'\\xff')"),  # what Python's "utf-16" writes: a byte-order mark first
    (REQUEST.encode("utf-16-le"), "byte 1 is 0"),  # no mark: every ASCII character is that character and 0
    (REQUEST.encode("utf-16-be"), "byte 0 is 0"),
    (REQUEST.encode("utf-32-le"), "byte 1 is 0"),
    (b"\xff\xfe", "byte 0 (b'\\xff')"),  # a byte-order mark alone
], ids=["latin-1", "utf-16-with-bom", "utf-16-le", "utf-16-be", "utf-32-le", "bom-alone"])
def test_a_body_that_is_not_utf8_is_refused_with_400_in_one_line_naming_the_byte(server, body: bytes, byte: str):
    """docs/usage.md's row: 400, naming the first byte that is not UTF-8 (Python's JSON reader would decode UTF-16
    and UTF-32, and a 0 byte is valid UTF-8, but never in UTF-8 JSON)."""
    reply = httpx.post(f"{server}/embed", content=body, headers={"content-type": "application/json"},
                       timeout=REQUEST_S)
    detail = reply.json()["detail"]
    assert reply.status_code == 400 and detail.startswith("the body is not UTF-8: ") and "\n" not in detail, reply.text
    assert byte in detail, detail
    assert _still_serving(server)


@pytest.mark.slow
def test_a_truncated_body_is_refused_with_422_saying_where_its_json_stops(server):
    reply = httpx.post(f"{server}/embed", content='{"text": "The cat', headers={"content-type": "application/json"},
                       timeout=REQUEST_S)
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"].startswith("the body is not JSON: Unterminated string starting at character 9; ")


@pytest.mark.slow
def test_a_reply_over_the_limit_is_refused_with_413_before_the_bilm_runs(limited_server, server):
    """ELMO_MAX_REPLY_BYTES: 400 tokens with their vectors make a reply over the limit (measured on the server
    without one): refused, naming the limit, and the biLM does not run for it; the same text without its token
    vectors, and 200 tokens with theirs, are answered, within the limit."""
    def ask(url: str, words: int, token_vectors: bool) -> httpx.Response:
        text = " ".join(["cat"] * words)
        return httpx.post(f"{url}/embed", json={"text": text, "token_vectors": token_vectors}, timeout=REQUEST_S)

    assert len(ask(server, 400, True).content) > REPLY_LIMIT
    before = httpx.get(f"{limited_server}/stats", timeout=REQUEST_S).json()["items_run"]
    refused = ask(limited_server, 400, True)
    detail = refused.json()["detail"]
    assert refused.status_code == 413 and f"{REPLY_LIMIT:,}" in detail and "ELMO_MAX_REPLY_BYTES" in detail, detail
    assert httpx.get(f"{limited_server}/stats", timeout=REQUEST_S).json()["items_run"] == before
    for words, token_vectors in [(400, False), (200, True)]:
        answered = ask(limited_server, words, token_vectors)
        assert answered.status_code == 200 and len(answered.content) <= REPLY_LIMIT, answered.text[:200]


@pytest.mark.slow
def test_the_default_reply_limit_is_32_mib(server):
    """docs/usage.md: 33,554,432 bytes by default. 50,000 tokens with their vectors at the fixture model's width (32
    values, which JSON writes in 21 to 22 bytes each with their commas) would take about 35 MB: refused; without
    their vectors they are answered."""
    text = "a " * 50_000
    refused = httpx.post(f"{server}/embed", json={"text": text, "token_vectors": True}, timeout=REQUEST_S)
    assert refused.status_code == 413 and "33,554,432" in refused.json()["detail"], refused.text
    answered = httpx.post(f"{server}/embed", json={"text": text}, timeout=REQUEST_S)
    assert answered.status_code == 200 and len(answered.json()["tokens"]) == 50_000

def _over_the_limit(chunked: bool) -> Iterable[bytes]:
    """A body of 5 MB, 250 times the limit: one piece (sent with its Content-Length) or 100 (sent chunked)."""
    parts = [b'{"text": "'] + [b"a " * 25_000] * 100 + [b'"}']
    return iter(parts) if chunked else b"".join(parts)


def _post(client: str, url: str, body: Iterable[bytes]) -> Tuple[int, str]:
    """POST ``body`` with ``client`` (Python's urllib, or httpx): the status and body of the answer."""
    headers = {"Content-Type": "application/json"}
    if client == "httpx":
        reply = httpx.post(url, content=body, headers=headers, timeout=REQUEST_S)
        return reply.status_code, reply.text
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers), timeout=REQUEST_S) as reply:
            return reply.status, reply.read().decode("utf-8")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("client", ["urllib", "httpx"])
def test_every_client_reads_the_413_of_a_body_over_the_limit(limited_server, client: str, chunked: bool):
    """urllib (http.client) writes the whole body before it reads the answer: the server reads and drops the rest of
    the body after answering, so it gets the 413 rather than a reset connection or a broken pipe."""
    status, answer = _post(client, f"{limited_server}/embed", _over_the_limit(chunked))
    assert status == 413 and f"{BODY_LIMIT:,} bytes" in json.loads(answer)["detail"], answer
    assert _still_serving(limited_server)
