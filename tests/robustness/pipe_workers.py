"""``python -m tests.robustness.pipe_workers OUT.npz``: ``nlp.pipe(n_process=2)`` under fork and spawn.

Run in a subprocess by ``test_processes.py`` (so a hang is cut by its timeout). Saves the vectors of one
process (1 torch thread) and of two worker processes per start method, and the torch thread count each
worker had while the parent process ran with 2 threads, and that of a child process of the parent's own.
A listening tagger follows ``elmo``, so that the workers send back Docs that listeners have read.
"""
import multiprocessing
import sys

import numpy as np
import torch
from spacy.language import Language
from spacy.tokens import Doc

from spacy_elmo.pipeline.extensions import install_extensions
from tests.pipeline.conftest import TAGGER, examples, make_nlp

TEXTS = [f"Text number {i} , with {'more ' * (i % 11)}words ." if i % 9 else "" for i in range(40)]

Doc.set_extension("torch_threads", default=None)  # at import, so that spawned workers have it too


@Language.component("record_torch_threads")
def record_torch_threads(doc: Doc) -> Doc:
    doc._.torch_threads = torch.get_num_threads()
    return doc


def threads_in_own_child(nlp: Language, queue: "multiprocessing.Queue") -> None:
    install_extensions()  # an unpickled component does not register its Doc attributes in a new process
    torch.set_num_threads(2)  # the application's own choice before the biLM first runs in this process
    queue.put(nlp("A child process of the application's own .")._.torch_threads)


def main(out: str) -> None:
    torch.set_num_threads(1)
    nlp = make_nlp()
    nlp.add_pipe("tagger", config=TAGGER)
    nlp.add_pipe("record_torch_threads")
    nlp.initialize(lambda: examples(nlp))
    # This fills the token cache that the workers get, so each of their batches is the same computation as here.
    results = {"one_process": np.concatenate([doc._.elmo for doc in nlp.pipe(TEXTS, batch_size=3)])}
    torch.set_num_threads(2)
    for method in ("fork", "spawn"):
        multiprocessing.set_start_method(method, force=True)
        docs = list(nlp.pipe(TEXTS, batch_size=3, n_process=2))
        assert [doc.text for doc in docs] == TEXTS
        results[method] = np.concatenate([doc._.elmo for doc in docs])
        results[f"{method}_threads"] = np.array([doc._.torch_threads for doc in docs])
    results["parent_threads"] = np.array(torch.get_num_threads())
    context = multiprocessing.get_context("spawn")  # forking a process whose torch ran 2 threads can hang
    queue = context.Queue()
    child = context.Process(target=threads_in_own_child, args=(nlp, queue))
    child.start()
    results["own_child_threads"] = np.array(queue.get(timeout=120))
    child.join()
    np.savez(out, **results)


if __name__ == "__main__":
    main(sys.argv[1])
