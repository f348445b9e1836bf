"""ELMo vectors over HTTP: a FastAPI app sharing one spaCy pipeline between its requests.

    pip install -c constraints.txt -e ".[serve]"
    uvicorn serve:app --app-dir examples --port 8000

``POST /embed`` with ``{"text": "The cat sat on the mat."}`` returns the tokens and their mean ELMo vector (with
``"token_vectors": true`` also each token's vector); a text without words is refused (422). ``GET /health``
answers 200 once the model is loaded and warm; ``GET /stats`` counts the biLM's runs. The model is the English one
embedded in spacy-elmo, or the one whose files the environment variables ``ELMO_OPTIONS_FILE`` and
``ELMO_WEIGHT_FILE`` name (``options.json`` and weights ``.hdf5``); ``ELMO_PRECISION`` chooses the precision of its
products (``fp32``, the default, ``int8``, ``bf16``, ``fp16``).

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
import os
from typing import List, Optional

import spacy
from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from thinc.api import ConfigValidationError

from spacy_elmo import CallCancelled, CancelHandle, ElmoError

# How often a running request checks that its client is still there.
DISCONNECT_POLL_S = 0.1


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
batcher = nlp.get_pipe("elmo").runtime.batcher  # its counts, for /stats
app = FastAPI(title="spacy-elmo")


class EmbedRequest(BaseModel):
    text: str
    token_vectors: bool = False


class Embedding(BaseModel):
    tokens: List[str]
    vector: List[float]  # the mean of the tokens' vectors
    token_vectors: Optional[List[List[float]]] = None


@app.post("/embed")
async def embed(body: EmbedRequest, request: Request) -> Embedding:
    if not body.text.strip():
        raise HTTPException(status_code=422, detail="the text has no tokens: send some words")
    handle = CancelHandle()

    def work() -> Embedding:
        with handle.scope():
            doc = nlp(body.text)
        vectors = doc._.elmo
        return Embedding(
            tokens=[token.text for token in doc],
            vector=vectors.mean(axis=0).tolist(),
            token_vectors=vectors.tolist() if body.token_vectors else None,
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
    return {"batches_run": batcher.batches_run, "items_run": batcher.items_run,
            "calls_cancelled": batcher.calls_cancelled, "waiting_calls": batcher.waiting_calls,
            "running": batcher.leading}
