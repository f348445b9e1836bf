"""Torch threads for inference: ``ElmoEmbedder`` words/s and ``nlp.pipe`` seconds, with 1, 2 and torch's default
number of threads, on a quiet machine and while a competing CPU-bound process holds one core.

The model is the English biLM embedded in the package; the text is the bundled UD English-EWT sample
(assets/sample, CC BY-SA 4.0), so the script runs from a plain checkout. ``ElmoEmbedder`` embeds all sample
sentences (train + dev + test); ``nlp.pipe`` runs ``--texts`` short texts (sample sentences of at most 12 tokens,
repeated) through ``spacy.blank("en")`` + ``elmo``. Each setting runs once to warm up, then ``--passes`` timed
passes; the best counts. The competitor is a pure-Python busy loop in a child process (one core, for as long as
the measurements under load run). "torch default" is ``threads=None``: torch's own setting (one per core).

    python benchmarks/bench_threads.py            # from the repository root; prints Markdown for BENCHMARKS.md
"""
import argparse
import functools
import multiprocessing
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import spacy
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bench_embed import _cpu_model, _load  # noqa: E402
from spacy_elmo import ElmoEmbedder, TokenTruncationWarning  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[1] / "assets" / "sample" / "ud_english_ewt"


def sample_sentences() -> List[List[str]]:
    """The FORM column of every sentence of the bundled UD sample (multi-word token lines skipped)."""
    sentences: List[List[str]] = []
    for split in ("train", "dev", "test"):
        words: List[str] = []
        for line in (SAMPLE / f"{split}.conllu").read_text(encoding="utf-8").splitlines():
            cols = line.split("\t")
            if not line.strip():
                if words:
                    sentences.append(words)
                words = []
            elif not line.startswith("#") and cols[0].isdigit():
                words.append(cols[1])
    return sentences


def best_seconds(run: Callable[[], object], passes: int) -> float:
    run()
    times = []
    for _ in range(passes):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def run_pipe(nlp: spacy.language.Language, texts: List[str]) -> None:
    for _ in nlp.pipe(texts):
        pass


def _busy_loop() -> None:
    while True:
        pass


@contextmanager
def competing_process(active: bool) -> Iterator[None]:
    """A CPU-bound child process for the duration of the block (nothing if not ``active``)."""
    if not active:
        yield
        return
    child = multiprocessing.get_context("spawn").Process(target=_busy_loop, daemon=True)
    child.start()
    try:
        time.sleep(0.5)
        yield
    finally:
        child.terminate()
        child.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--texts", type=int, default=1000, help="number of short texts for nlp.pipe")
    args = parser.parse_args()
    warnings.simplefilter("ignore", TokenTruncationWarning)  # a URL in the sample is longer than the model reads

    sentences = sample_sentences()
    n_words = sum(len(s) for s in sentences)
    short = [" ".join(s) for s in sentences if len(s) <= 12]
    texts = [short[i % len(short)] for i in range(args.texts)]
    settings: List[Optional[int]] = [1, 2, None]

    print(f"machine: {_cpu_model()}; torch {torch.__version__}, default {torch.get_num_threads()} threads; "
          f"load before {_load()}")
    print(f"ElmoEmbedder: {len(sentences)} sentences, {n_words:,} words; nlp.pipe: {len(texts)} texts of <= 12 tokens")
    print()
    print("| competing process | threads | ElmoEmbedder words/s | nlp.pipe seconds |")
    print("|---|---|---|---|")
    for loaded in (False, True):
        with competing_process(loaded):
            for threads in settings:
                embedder = ElmoEmbedder(threads=threads)
                seconds = best_seconds(functools.partial(embedder.embed_batch, sentences), args.passes)
                nlp = spacy.blank("en")
                nlp.add_pipe("elmo", config={"threads": threads})
                pipe = best_seconds(functools.partial(run_pipe, nlp, texts), args.passes)
                label = f"torch default ({torch.get_num_threads()})" if threads is None else str(threads)
                print(f"| {'yes' if loaded else 'no'} | {label} | {n_words / seconds:,.0f} | {pipe:.1f} |", flush=True)
    print(f"\nload after: {_load()} (1-, 5-, 15-minute averages)")


if __name__ == "__main__":
    main()
