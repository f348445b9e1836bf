"""Speed of the spaCy layer: ``nlp.pipe`` with the ``elmo`` component vs ``ElmoEmbedder.embed_batch``,
and training words/s of a listener NER with and without the layer cache.

Small run (a minute on 2 CPU cores, tiny reference weights):

    python benchmarks/bench_pipeline.py --sentences 300 --epochs 3 \
        --options ../shared/data/elmo_fixture/allennlp/options.json \
        --weights ../shared/data/elmo_fixture/allennlp/lm_weights.hdf5

Without --options/--weights the embedded default model is used. Sentences come from
CoNLL-2003 (../shared/data/conll2003/train.txt); results print as Markdown rows for BENCHMARKS.md.

ELMo in an app (--serving): words/s of nlp.pipe, of one Doc per call (fp32, int8) and of N Python threads sharing
one nlp with one Doc per call, on the same texts (UD-EWT dev), the modes interleaved round by round; with
--old-tree, the same measurement of another checkout of the package (a git worktree), processes alternating:

    python benchmarks/bench_pipeline.py --serving --preset small --old-tree /tmp/old_tree
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import spacy
import torch
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import ConfigValidationError, fix_random_seed

from spacy_elmo import ElmoEmbedder
from spacy_elmo.model.cpu import native_bf16_cpu

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_embed import UD, _cpu_model, make_model, read_conllu  # noqa: E402

CONLL = Path(__file__).resolve().parents[2] / "shared" / "data" / "conll2003" / "train.txt"


def read_conll(path: Path, n: int) -> List[List[Tuple[str, str]]]:
    """The first ``n`` sentences as (word, NER tag) pairs."""
    sentences, current = [], []
    with path.open(encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if fields and fields[0] != "-DOCSTART-":
                current.append((fields[0], fields[-1]))
            elif current:
                sentences.append(current)
                current = []
                if len(sentences) == n:
                    break
    return sentences


def timed(run: Callable[[], object], repeats: int) -> float:
    """Best wall time of ``repeats`` runs (the first run also warms up)."""
    best = float("inf")
    for _ in range(repeats + 1):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def elmo_config(args: argparse.Namespace, model_settings: Optional[dict] = None, **overrides) -> dict:
    """The component's settings (``model_settings``: more of the biLM block's); threads None: the torch thread
    count set by --threads."""
    model = {"@architectures": "spacy_elmo.ElmoBiLm.v2", "options_file": args.options, "weight_file": args.weights,
             "max_batch_tokens": args.max_batch_tokens, **(model_settings or {})}
    return {"model": model, "threads": None, **overrides}


def bench_component(args: argparse.Namespace, earlier: List[List[str]], text: List[List[str]]) -> List[tuple]:
    """``nlp.pipe`` speed for each precision and token-cache size, on a fresh pipeline each.

    The pipeline first reads ``earlier`` (the cache fills as that text runs: the cold pass), then ``text``, new
    sentences: the steady state of a cache filled by earlier text. Rates are words per second of wall time and
    of process CPU time (the second is steadier on a loaded machine at one thread).
    """
    rows = []
    for precision in args.precision.split(","):
        for cache_size in (int(c) for c in args.cache_sizes.split(",")):
            nlp = spacy.blank("en")
            nlp.add_pipe("elmo", config=elmo_config(args, model_settings={"precision": precision, "cache_size": cache_size}))
            nlp.get_pipe("elmo").initialize()
            rates = []
            for sentences in (earlier, text):
                docs = [Doc(nlp.vocab, words=s) for s in sentences]
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in nlp.pipe(docs, batch_size=64):
                    pass
                n_words = sum(map(len, sentences))
                rates += [n_words / (time.perf_counter() - wall), n_words / (time.process_time() - cpu)]
            rows.append((precision, cache_size, *rates))
    return rows


def bench_inference(args: argparse.Namespace, sentences: List[List[str]]) -> Tuple[float, float]:
    """Words/s of ``ElmoEmbedder.embed_batch`` and of ``nlp.pipe`` on the same pre-tokenised sentences."""
    n_words = sum(map(len, sentences))
    embedder = ElmoEmbedder(args.options, args.weights, max_batch_tokens=args.max_batch_tokens, threads=None)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(args))
    docs = [Doc(nlp.vocab, words=s) for s in sentences]
    embed_time = timed(lambda: embedder.embed_batch(sentences), args.repeats)
    pipe_time = timed(lambda: list(nlp.pipe(docs, batch_size=len(docs))), args.repeats)
    return n_words / embed_time, n_words / pipe_time


NER = {
    "model": {
        "@architectures": "spacy.TransitionBasedParser.v2",
        "state_type": "ner",
        "extra_state_tokens": False,
        "hidden_width": 64,
        "maxout_pieces": 2,
        "use_upper": True,
        "nO": None,
        "tok2vec": {"@architectures": "spacy_elmo.ElmoListener.v1", "upstream": "*"},
    }
}


def bench_training(args: argparse.Namespace, tagged: List[List[Tuple[str, str]]], cache_mb: float) -> float:
    """Training words/s of a listener NER over epochs 2..n (epoch 1 fills the layer cache)."""
    fix_random_seed(0)
    nlp: Language = spacy.blank("en")
    nlp.add_pipe("elmo", config=elmo_config(args, store_vectors=False, train_cache_mb=cache_mb))
    nlp.add_pipe("ner", config=NER)
    examples = []
    for sentence in tagged:
        words, tags = [w for w, _ in sentence], [t for _, t in sentence]
        examples.append(Example(Doc(nlp.vocab, words=words), Doc(nlp.vocab, words=words, ents=tags)))
    optimizer = nlp.initialize(lambda: examples)
    n_words = sum(len(eg) for eg in examples)
    elapsed = 0.0
    for epoch in range(args.epochs):
        start = time.perf_counter()
        for i in range(0, len(examples), args.batch):
            nlp.update(examples[i : i + args.batch], sgd=optimizer)
        if epoch > 0:
            elapsed += time.perf_counter() - start
    return n_words * (args.epochs - 1) / elapsed


def serving_nlp(args: argparse.Namespace, precision: str, **settings) -> Optional[Language]:
    """A blank English pipeline with ``elmo`` at ``precision`` and the component ``settings``, the others the
    defaults (one torch thread, the default token cache); None if this checkout's component lacks a setting."""
    nlp = spacy.blank("en")
    bilm = {"@architectures": "spacy_elmo.ElmoBiLm.v2", "options_file": args.options, "weight_file": args.weights,
            "precision": precision}
    try:
        nlp.add_pipe("elmo", config={"model": bilm, **settings})
    except ConfigValidationError:
        return None
    return nlp


def serving_rates(args: argparse.Namespace, texts: List[str]) -> Dict[str, List[float]]:
    """Words/s of wall time of each serving mode over ``texts``, the modes interleaved, ``args.rounds`` rounds.

    Each pipeline reads the texts once first, which fills its token cache (the warm default cache of a service).
    """
    fp32, int8 = serving_nlp(args, "fp32"), serving_nlp(args, "int8")
    waiting = serving_nlp(args, "fp32", batch_wait_ms=1)
    n_words = sum(len(doc) for doc in fp32.pipe(texts))
    for nlp in (int8, waiting):
        if nlp is not None:
            list(nlp.pipe(texts))
    threads = f"{args.serving_threads} threads, one Doc per call fp32"
    with ThreadPoolExecutor(args.serving_threads) as pool:
        runs: Dict[str, Callable[[], object]] = {
            "nlp.pipe fp32": lambda: list(fp32.pipe(texts, batch_size=64)),
            "one Doc per call fp32": lambda: [fp32(text) for text in texts],
            "one Doc per call int8": lambda: [int8(text) for text in texts],
            threads: lambda: list(pool.map(fp32, texts)),
        }
        if waiting is not None:
            runs[f"{threads}, batch_wait_ms 1"] = lambda: list(pool.map(waiting, texts))
        if args.serving_extras:
            runs.update(extra_runs(args, texts, pool, int8))
        rates: Dict[str, List[float]] = {mode: [] for mode in runs}
        for _ in range(args.rounds):
            for mode, run in runs.items():
                start = time.perf_counter()
                run()
                rates[mode].append(n_words / (time.perf_counter() - start))
    return rates


def extra_runs(
    args: argparse.Namespace, texts: List[str], pool: ThreadPoolExecutor, int8: Language
) -> Dict[str, Callable[[], object]]:
    """For --serving-extras: one Doc per call at bf16 (where this CPU has native bf16) and at fp32 with 2 torch
    threads (each pipeline's token cache filled first), and ``pool``'s threads calling the int8 pipeline."""
    pipelines = {"one Doc per call fp32, 2 torch threads": serving_nlp(args, "fp32", threads=2)}
    if native_bf16_cpu():
        pipelines["one Doc per call bf16"] = serving_nlp(args, "bf16")
    for nlp in pipelines.values():
        list(nlp.pipe(texts))
    runs: Dict[str, Callable[[], object]] = {
        mode: (lambda nlp=nlp: [nlp(text) for text in texts]) for mode, nlp in pipelines.items()
    }
    runs[f"{args.serving_threads} threads, one Doc per call int8"] = lambda: list(pool.map(int8, texts))
    return runs


def serving_report(args: argparse.Namespace, argv: List[str]) -> None:
    """Run :func:`serving_rates` in child processes, this checkout's and ``--old-tree``'s alternately; print a table."""
    trees = {"new": Path(__file__).resolve().parents[1]}
    if args.old_tree:
        trees = {"old": Path(args.old_tree).resolve(), **trees}
    rates: Dict[str, Dict[str, List[float]]] = {name: {} for name in trees}
    for _ in range(args.processes):
        for name, tree in trees.items():
            env = {**os.environ, "PYTHONPATH": str(tree)}
            out = subprocess.run([sys.executable, __file__, *argv, "--serving-child"], env=env, check=True,
                                 capture_output=True, text=True).stdout
            for mode, values in json.loads(out.splitlines()[-1]).items():
                rates[name].setdefault(mode, []).extend(values)
    print(f"command: python {' '.join(sys.argv)}\nmachine: {_cpu_model()}, load: {os.getloadavg()[0]:.2f}")
    print(f"{args.sentences} UD-EWT dev sentences, model {args.preset or args.options or 'embedded'}; words/s of wall "
          f"time, median of {args.rounds} rounds x {args.processes} processes per tree, processes alternating\n")
    median = {name: {mode: statistics.median(v) for mode, v in by_mode.items()} for name, by_mode in rates.items()}
    pipe = {name: next(iter(by_mode.values())) for name, by_mode in median.items()}
    names = list(trees)
    print("| mode | " + " | ".join(f"{n} words/s | {n} x pipe" for n in names) + (" | new / old |" if args.old_tree else " |"))
    print("| --- |" + " ---: | ---: |" * len(names) + (" ---: |" if args.old_tree else ""))
    for mode in median["new"]:
        cells = [f"{median[n][mode]:,.0f} | {median[n][mode] / pipe[n]:.2f}" if mode in median[n] else "- | -" for n in names]
        ratio = f" | {median['new'][mode] / median['old'][mode]:.2f}" if mode in median.get("old", {}) else (" | -" if args.old_tree else "")
        print(f"| {mode} | " + " | ".join(cells) + ratio + " |")


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--options", help="options.json (default: the embedded model)")
    parser.add_argument("--weights", help="weights .hdf5 (default: the embedded model)")
    parser.add_argument("--conll", type=Path, default=CONLL)
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--max-batch-tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3, help="training epochs; the first is not timed")
    parser.add_argument("--batch", type=int, default=32, help="training batch size (sentences)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--preset", choices=["small", "medium", "original"],
                        help="seeded random weights of a published architecture instead of --options/--weights")
    parser.add_argument("--text", choices=["conll", "ud"], default="conll",
                        help="sentences of CoNLL-2003 train or of UD English-EWT dev (ordinary English text)")
    parser.add_argument("--precision", default="fp32", help="comma-separated precisions for the nlp.pipe table")
    parser.add_argument("--cache-sizes", default="0,20000", help="comma-separated token-cache sizes for that table")
    parser.add_argument("--earlier-sentences", type=int, default=2000,
                        help="UD-EWT train sentences read before the measured text (the cache fills on them)")
    parser.add_argument("--inference-only", action="store_true", help="skip the training measurements")
    parser.add_argument("--serving", action="store_true", help="measure ELMo in an app instead (see above)")
    parser.add_argument("--old-tree", help="with --serving: another checkout to measure alternately (a git worktree)")
    parser.add_argument("--rounds", type=int, default=3, help="with --serving: rounds of all modes per process")
    parser.add_argument("--processes", type=int, default=2, help="with --serving: processes per tree")
    parser.add_argument("--serving-threads", type=int, default=8, help="with --serving: Python threads")
    parser.add_argument("--serving-extras", action="store_true",
                        help="with --serving: also one Doc per call at bf16 and with 2 torch threads, and the threads at int8")
    parser.add_argument("--serving-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serving:
        texts = [" ".join(s) for s in read_conllu(UD / "en_ewt-ud-dev.conllu", 1, 10**9, args.sentences)]
        with tempfile.TemporaryDirectory() as tmp:
            if args.preset and not args.serving_child:
                args.options, args.weights = map(str, make_model(Path(tmp), 0, args.preset))
            if args.serving_child:
                print(json.dumps(serving_rates(args, texts)))
            else:
                given = sys.argv[1:] if argv is None else argv
                serving_report(args, [*given, "--options", args.options, "--weights", args.weights])
        return
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the first epoch fills the cache and is not timed)")
    torch.set_num_threads(args.threads)
    tagged = read_conll(args.conll, args.sentences)
    sentences = [[w for w, _ in s] for s in tagged]
    if args.text == "ud":
        sentences = read_conllu(UD / "en_ewt-ud-dev.conllu", 1, 10**9, args.sentences)
    earlier = read_conllu(UD / "en_ewt-ud-train.conllu", 1, 10**9, args.earlier_sentences)
    with tempfile.TemporaryDirectory() as tmp:
        if args.preset:
            args.options, args.weights = map(str, make_model(Path(tmp), 0, args.preset))
        report(args, tagged, earlier, sentences)


def report(
    args: argparse.Namespace, tagged: List[List[Tuple[str, str]]], earlier: List[List[str]], sentences: List[List[str]]
) -> None:
    """Print the tables of :func:`main`."""
    print(f"command: python {' '.join(sys.argv)}\nmachine: {_cpu_model()}")
    print(f"{len(sentences)} sentences, {sum(map(len, sentences))} words ({args.text}), torch threads {args.threads}, "
          f"model: {args.preset or args.options or 'embedded'}\n")
    rows = bench_component(args, earlier, sentences)
    print(f"nlp.pipe (batch_size 64): first {len(earlier)} UD-EWT train sentences ({sum(map(len, earlier))} words; "
          f"the cache fills), then the text above; words/s of wall time / of CPU time")
    base = {cache: cpu for precision, cache, _, _, _, cpu in rows if precision == "fp32"}
    print("| precision | token cache | earlier text (cold) | the text (cache filled before) | x fp32 no cache (CPU) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for precision, cache, wall_a, cpu_a, wall_b, cpu_b in rows:
        ratio = f"{cpu_b / base[0]:.2f}" if 0 in base else "-"
        print(f"| {precision} | {cache:,} | {wall_a:,.0f} / {cpu_a:,.0f} | {wall_b:,.0f} / {cpu_b:,.0f} | {ratio} |")
    print()
    if args.inference_only:
        return
    embed_wps, pipe_wps = bench_inference(args, sentences)
    print("| measurement | words/s |\n| --- | ---: |")
    print(f"| `ElmoEmbedder.embed_batch` | {embed_wps:,.0f} |")
    print(f"| `nlp.pipe` with `elmo` | {pipe_wps:,.0f} |")
    print(f"| spaCy layer cost | {100 * (embed_wps / pipe_wps - 1):+.1f}% |")
    uncached = bench_training(args, tagged, cache_mb=0)
    cached = bench_training(args, tagged, cache_mb=4096)
    print(f"| listener NER training, no layer cache | {uncached:,.0f} |")
    print(f"| listener NER training, layer cache (epochs 2+) | {cached:,.0f} |")
    print(f"| layer cache speed-up | {cached / uncached:.2f}x |")


if __name__ == "__main__":
    main()
