"""ELMo vectors over HTTP: a FastAPI app sharing one spaCy pipeline between its requests.

    pip install -c constraints.txt -e ".[serve]"
    uvicorn serve:app --app-dir examples --port 8000

``POST /embed`` with ``{"text": "The cat sat on the mat."}`` returns the tokens and their mean ELMo vector (with
``"token_vectors": true`` also each token's vector); ``GET /health`` answers once the model is loaded. The model is
the English one embedded in spacy-elmo, or the one whose files the environment variables ``ELMO_OPTIONS_FILE`` and
``ELMO_WEIGHT_FILE`` name (``options.json`` and weights ``.hdf5``).

The endpoints are plain ``def`` functions: FastAPI runs each request in a thread of its pool, so requests that
arrive together call the shared ``nlp`` at the same time, and the ``elmo`` component runs the texts that arrive
while the biLM is busy together, as one batch (``batch_requests``, on by default). An ``async def`` endpoint
would run ``nlp`` on the event loop instead, one request at a time, and stall every other request meanwhile.
"""
import os
from typing import List, Optional

import spacy
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

nlp = spacy.blank("en")
model = {"options_file": os.environ.get("ELMO_OPTIONS_FILE"), "weight_file": os.environ.get("ELMO_WEIGHT_FILE")}
nlp.add_pipe("elmo", config={"model": model})  # both None: the English model embedded in spacy-elmo
app = FastAPI(title="spacy-elmo")


class EmbedRequest(BaseModel):
    text: str
    token_vectors: bool = False


class Embedding(BaseModel):
    tokens: List[str]
    vector: List[float]  # the mean of the tokens' vectors
    token_vectors: Optional[List[List[float]]] = None


@app.post("/embed")
def embed(request: EmbedRequest) -> Embedding:
    doc = nlp(request.text)
    if len(doc) == 0:
        raise HTTPException(status_code=422, detail="the text has no tokens: send some words")
    vectors = doc._.elmo
    return Embedding(
        tokens=[token.text for token in doc],
        vector=vectors.mean(axis=0).tolist(),
        token_vectors=vectors.tolist() if request.token_vectors else None,
    )


@app.get("/health")
def health() -> dict:
    return {"status": "ok"}
