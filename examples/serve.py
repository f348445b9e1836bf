"""ELMo vectors over HTTP: a FastAPI app sharing one spaCy pipeline between its requests.

    pip install -c constraints.txt -e ".[serve]"
    uvicorn serve:app --app-dir examples --port 8000

``POST /embed`` with ``{"text": "The cat sat on the mat."}`` returns the tokens and their mean ELMo vector (with
``"token_vectors": true`` also each token's vector); a text without words is refused (422). ``GET /health``
answers 200 once the model is loaded and warm; ``GET /stats`` counts the biLM's runs. The model is the English one
embedded in spacy-elmo, or the one whose files the environment variables ``ELMO_OPTIONS_FILE`` and
``ELMO_WEIGHT_FILE`` name (``options.json`` and weights ``.hdf5``); ``ELMO_PRECISION`` chooses the precision of its
products (``fp32``, the default, ``int8``, ``bf16``, ``fp16``).

Limits: a request body over ``ELMO_MAX_BODY_BYTES`` bytes (default: 12 bytes per character of the longest text,
plus 64 KiB) is refused with 413 before it is read whole, by its ``Content-Length`` or, for a chunked body, as soon
as the bytes read pass it; the rest of the body is then read and dropped (10 s and 64 MiB at most) so that a client
still sending reads the 413; a text over ``ELMO_MAX_TEXT_CHARS`` characters (default spaCy's ``nlp.max_length``,
1,000,000) is refused with 413, naming the limit; a request whose reply could pass ``ELMO_MAX_REPLY_BYTES`` bytes
(default 32 MiB; 24 bytes per vector value, the most one takes) is refused with 413 before the biLM runs. A body
that is not UTF-8 is refused with 400; one that is not the JSON above (a field missing, misspelt or of another
type: ``"token_vectors": "yes"`` is not a boolean) with 422, as is a text that is not Unicode (a lone surrogate such
as ``"\ud800"``) or that the tokenizer cannot take. A token longer than the model reads (48 bytes for the published
models) is answered with what the model read of it, and listed in ``truncated``. Every refusal is one line in
``detail``; the server goes on serving.

Start-up: the model is loaded and run once when the app is imported, before the server takes requests, so no
request pays for loading, and a model that cannot load stops the server with one line naming the problem (exit
status 1) instead of failing every request.

Requests run in threads of FastAPI's pool, so requests that arrive together call the shared ``nlp`` at the same
time, and the ``elmo`` component runs the texts that arrive while the biLM is busy together, in shared batches
(``batch_requests``, on by default). The endpoint itself is ``async``: it waits for its thread while watching the
connection, and when the client goes away (a timeout, a closed page) it cancels the call through a
``spacy_elmo.CancelHandle``: the biLM stops working for it after the run in progress (at the run's next pause, when
the run is the request's alone).
"""
import asyncio
import json
import os
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

import spacy
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict
from spacy.tokens import Doc
from starlette.concurrency import run_in_threadpool
from thinc.api import ConfigValidationError

from spacy_elmo import CallCancelled, CancelHandle, ElmoError

# How often a running request checks that its client is still there.
DISCONNECT_POLL_S = 0.1
# The most a JSON string takes per character of the text (one outside the BMP, written as a pair of \\u escapes: 12
# bytes), and room for the rest of the body: the default body limit admits any text under the text limit, however
# its JSON is written.
JSON_BYTES_PER_CHAR = 12
BODY_OVERHEAD = 64 * 1024
# The default bound on a reply: 32 MiB, about 5,400 tokens with their vectors at the embedded model's width (256).
DEFAULT_MAX_REPLY_BYTES = 32 * 1024 * 1024
# The most JSON bytes one vector value takes: a float32 value written as the float64 it is in Python (sign, 17
# significant digits, point, exponent down to e-45) and its comma; and the reply's bytes besides tokens and vectors.
FLOAT_JSON_BYTES = 24
REPLY_OVERHEAD = 128
# After refusing a body over the limit, the rest of it is read and dropped (as nginx's "lingering close") for at most
# this long, this many bytes, and this long without data, so that a client still sending (Python's urllib) reads the
# answer instead of a reset connection; then the connection is closed.
DRAIN_S = 10.0
DRAIN_BYTES = 64 * 1024 * 1024
DRAIN_IDLE_S = 2.0

Receive = Callable[[], Awaitable[Dict[str, Any]]]
Send = Callable[[Dict[str, Any]], Awaitable[None]]


def limit_from_env(name: str, default: int) -> int:
    """A positive whole number from the environment variable ``name``, else ``default``; a bad value stops the
    server with one line."""
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if not value.isdigit() or int(value) <= 0:
        raise SystemExit(f"serve.py: {name}={value!r} is not a positive whole number; set it to one, e.g. {default}")
    return int(value)


def load_pipeline() -> spacy.language.Language:
    """The pipeline with ``elmo`` on the model the environment names, loaded and run once (warm)."""
    model = {
        "@architectures": "spacy_elmo.ElmoBiLm.v2",
        "options_file": os.environ.get("ELMO_OPTIONS_FILE"),  # both None: the English model embedded in spacy-elmo
        "weight_file": os.environ.get("ELMO_WEIGHT_FILE"),
        "precision": os.environ.get("ELMO_PRECISION", "fp32"),
    }
    pipeline = spacy.blank("en")
    try:
        pipeline.add_pipe("elmo", config={"model": model})
        pipeline("The service loads its model and runs it once before it takes requests.")
    except ConfigValidationError as err:  # a setting of the wrong kind, e.g. ELMO_PRECISION
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors)
        raise SystemExit(f"serve.py: the ELMo model cannot be used: {problems}") from None
    except (ElmoError, OSError) as err:
        raise SystemExit(f"serve.py: the ELMo model cannot be used: {err}") from None
    return pipeline


nlp = load_pipeline()
runtime = nlp.get_pipe("elmo").runtime
# What the model reads of a token: its first MAX_TOKEN_UNITS UTF-8 bytes (characters, for a model with a character table).
MAX_TOKEN_UNITS = runtime.options.max_token_units
TOKEN_UNITS_ARE_BYTES = runtime.options.char_vocabulary is None
MAX_TEXT_CHARS = limit_from_env("ELMO_MAX_TEXT_CHARS", nlp.max_length)
MAX_BODY_BYTES = limit_from_env("ELMO_MAX_BODY_BYTES", JSON_BYTES_PER_CHAR * MAX_TEXT_CHARS + BODY_OVERHEAD)
MAX_REPLY_BYTES = limit_from_env("ELMO_MAX_REPLY_BYTES", DEFAULT_MAX_REPLY_BYTES)
VECTOR_WIDTH = runtime.options.output_dim
nlp.max_length = MAX_TEXT_CHARS
app = FastAPI(title="spacy-elmo")


def one_line(error: Dict[str, Any]) -> str:
    """A validation error of pydantic's, as one line naming the field: ``token_vectors: Input should be a valid
    boolean (found 'yes')``; a body that is not JSON: where it stops being JSON."""
    if error["type"] == "json_invalid":  # json's message, such as "Unterminated string starting at", and where
        return f"the body is not JSON: {error['ctx']['error'].removesuffix(' at')} at character {error['loc'][-1]}"
    field = ".".join(str(part) for part in error["loc"] if part != "body") or "the body"
    found = "" if error["type"] == "missing" else f" (found {json.dumps(error['input'])[:80]})"
    return f"{field}: {error['msg']}{found}"


@app.exception_handler(RequestValidationError)
async def refuse_invalid(request: Request, error: RequestValidationError) -> JSONResponse:
    """422 with every problem of the request in one line of ``detail`` (FastAPI's default is a list of objects)."""
    problems = "; ".join(one_line(item) for item in error.errors())
    detail = f'{problems}; send JSON such as {{"text": "The cat sat.", "token_vectors": false}}'
    return JSONResponse(status_code=422, content={"detail": detail})


def not_utf8(body: bytes) -> Optional[str]:
    """Why ``body`` is not JSON in UTF-8, naming its first byte that is not; None when it is. Python's JSON reader
    would take UTF-16 and UTF-32 too, guessing from the first bytes; UTF-8 JSON never holds a 0 byte (a control
    character must be escaped), which those write in every ASCII character."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as err:
        return f"byte {err.start} ({body[err.start:err.start + 1]!r}) cannot be decoded"
    zero = body.find(b"\x00")
    return None if zero < 0 else f"byte {zero} is 0, as in UTF-16 or UTF-32"


class Utf8Body(APIRoute):
    """A route whose body is not UTF-8 is refused with 400 and one line saying where (FastAPI decodes UTF-16 and
    UTF-32 as well, and says only "There was an error parsing the body" of what it cannot decode)."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Any]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Any:
            problem = not_utf8(await request.body())  # read once: the handler reads the same bytes
            if problem is not None:
                raise HTTPException(status_code=400, detail=f"the body is not UTF-8: {problem}; send JSON in UTF-8")
            return await handler(request)

        return route


app.router.route_class = Utf8Body


class BodyTooLarge(Exception):
    """The request body passed the limit while it was read."""


async def drain(receive: Receive) -> None:
    """Read and drop the rest of a request body: until it ends, or DRAIN_BYTES, DRAIN_S, or DRAIN_IDLE_S without
    data, whichever comes first."""
    loop = asyncio.get_running_loop()
    deadline, dropped = loop.time() + DRAIN_S, 0
    while dropped < DRAIN_BYTES and (left := deadline - loop.time()) > 0:
        try:
            message = await asyncio.wait_for(receive(), timeout=min(DRAIN_IDLE_S, left))
        except asyncio.TimeoutError:
            return
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
        dropped += len(message.get("body", b""))


async def refuse_body(send: Send, receive: Receive, limit: int, more_body: bool) -> None:
    """Answer 413 for a body over ``limit`` bytes; then, while the body may go on (``more_body``), read and drop the
    rest of it (:func:`drain`) before the answer ends and the connection closes: a client that writes its whole body
    before reading the answer then reads it, instead of a reset connection."""
    detail = (f"the request body is larger than this service's limit of {limit:,} bytes: send a shorter text, or "
              f"start the service with ELMO_MAX_BODY_BYTES set higher")
    body = json.dumps({"detail": detail}).encode("utf-8")
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body, "more_body": True})
    if more_body:
        await drain(receive)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


class BodyLimit:
    """ASGI middleware refusing a body over ``limit`` bytes before the app reads it whole: at once by its
    ``Content-Length``, else (a chunked body) as soon as the bytes received pass the limit. Once it has answered,
    the app is told that the client left, and what the app then sends is dropped."""

    def __init__(self, app: Callable[..., Awaitable[None]], limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await refuse_body(send, receive, self.limit, more_body=True)
            return
        received, refused = 0, False

        async def counted_receive() -> Dict[str, Any]:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    refused = True
                    await refuse_body(send, receive, self.limit, more_body=message.get("more_body", False))
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Dict[str, Any]) -> None:
            if not refused:
                await send(message)

        await self.app(scope, counted_receive, guarded_send)


app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)


class EmbedRequest(BaseModel):
    # strict: "token_vectors": "yes" or 1 is refused, not read as true; a misspelt field is refused, not ignored
    model_config = ConfigDict(strict=True, extra="forbid")

    text: str
    token_vectors: bool = False


class TruncatedToken(BaseModel):
    index: int  # its position in ``tokens``
    length: int  # its length in the unit the model reads (``unit``)
    read: int  # how many of those the model read; ``tokens`` holds only these
    unit: str  # "bytes" (UTF-8) or "characters"


class Embedding(BaseModel):
    tokens: List[str]  # as the model read them: a token longer than it reads is cut (see ``truncated``)
    vector: List[float]  # the mean of the tokens' vectors
    token_vectors: Optional[List[List[float]]] = None
    truncated: List[TruncatedToken] = []  # tokens longer than the model reads, whose rest it ignored


def lone_surrogate(text: str) -> Optional[int]:
    """The position of the first character UTF-8 cannot encode (a lone surrogate), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return err.start
    return None


def as_read(token: str) -> Tuple[str, Optional[TruncatedToken]]:
    """What the model reads of ``token``, in whole characters, and the note saying it was cut (None if not)."""
    if TOKEN_UNITS_ARE_BYTES:
        data = token.encode("utf-8")
        if len(data) <= MAX_TOKEN_UNITS:
            return token, None
        read = data[:MAX_TOKEN_UNITS].decode("utf-8", errors="ignore")  # a character cut in two is left out
        return read, TruncatedToken(index=-1, length=len(data), read=MAX_TOKEN_UNITS, unit="bytes")
    if len(token) <= MAX_TOKEN_UNITS:
        return token, None
    return token[:MAX_TOKEN_UNITS], TruncatedToken(index=-1, length=len(token), read=MAX_TOKEN_UNITS, unit="characters")


def check_text(text: str) -> None:
    """Refuse, with one line, a text this service does not embed: over the length limit (413), not Unicode (422),
    without tokens (422)."""
    if len(text) > MAX_TEXT_CHARS:
        raise HTTPException(status_code=413, detail=(
            f"the text has {len(text):,} characters, more than this service's limit of {MAX_TEXT_CHARS:,}: send it "
            f"in parts, or start the service with ELMO_MAX_TEXT_CHARS set higher"))
    position = lone_surrogate(text)
    if position is not None:
        raise HTTPException(status_code=422, detail=(
            f"the text is not valid Unicode: character {position} is a lone surrogate "
            f"({ascii(text[position])}), which UTF-8 cannot encode; send text in UTF-8"))
    if not text.strip():
        raise HTTPException(status_code=422, detail="the text has no tokens: send some words")


def tokenize(text: str) -> Doc:
    """The text as a Doc, or 422 with the tokenizer's complaint in one line."""
    try:
        return nlp.make_doc(text)
    except (ValueError, UnicodeError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise HTTPException(status_code=422, detail=f"the tokenizer cannot take this text: {first_line}") from None


def read_tokens(doc: Doc) -> Tuple[List[str], List[TruncatedToken]]:
    """The Doc's tokens as the model reads them, and a note for each it cuts."""
    tokens, truncated = [], []
    for index, token in enumerate(doc):
        read, note = as_read(token.text)
        tokens.append(read)
        if note is not None:
            truncated.append(note.model_copy(update={"index": index}))
    return tokens, truncated


def check_reply_size(tokens: List[str], truncated: List[TruncatedToken], with_token_vectors: bool) -> None:
    """Refuse with 413, before the biLM runs, a request whose reply could pass MAX_REPLY_BYTES: its size is bounded
    by its tokens written as JSON (escaped to ASCII, the longest way), its notes, and FLOAT_JSON_BYTES per value of
    the vectors it asks for, so that no reply sent is over the limit."""
    vectors = 1 + (len(tokens) if with_token_vectors else 0)
    bound = (REPLY_OVERHEAD + sum(len(json.dumps(token)) + 1 for token in tokens)
             + sum(len(note.model_dump_json()) + 1 for note in truncated)
             + vectors * (VECTOR_WIDTH * FLOAT_JSON_BYTES + 2))
    if bound > MAX_REPLY_BYTES:
        asked = f"{len(tokens):,} tokens" + (" with their vectors" if with_token_vectors else "")
        instead = "leave token_vectors out, send a shorter text" if with_token_vectors else "send a shorter text"
        raise HTTPException(status_code=413, detail=(
            f"the reply ({asked}) could take {bound:,} bytes, more than this service's limit of "
            f"{MAX_REPLY_BYTES:,}: {instead}, or start the service with ELMO_MAX_REPLY_BYTES set higher"))


@app.post("/embed")
async def embed(body: EmbedRequest, request: Request) -> Embedding:
    check_text(body.text)
    handle = CancelHandle()

    def work() -> Embedding:
        doc = tokenize(body.text)
        tokens, truncated = read_tokens(doc)
        check_reply_size(tokens, truncated, body.token_vectors)
        with handle.scope():
            vectors = nlp(doc)._.elmo
        return Embedding(
            tokens=tokens,
            vector=vectors.mean(axis=0).tolist(),
            token_vectors=vectors.tolist() if body.token_vectors else None,
            truncated=truncated,
        )

    call = asyncio.ensure_future(run_in_threadpool(work))
    while not (await asyncio.wait({call}, timeout=DISCONNECT_POLL_S))[0]:
        if await request.is_disconnected():
            handle.cancel()
    try:
        return await call
    except CallCancelled:
        raise HTTPException(status_code=499, detail="the client went away") from None


@app.get("/health")
def health() -> dict:
    """200 once the model is loaded and warm: the app is imported (and so answers) only then."""
    return {"status": "ok"}


@app.get("/stats")
def stats() -> dict:
    """What the biLM has done: batches run, segments (sentences or windows) run, calls cancelled; and now: calls
    waiting, and whether a batch is running."""
    return runtime.counts()._asdict()
