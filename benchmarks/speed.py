"""Speed and memory of the biLM, the ``elmo`` component and ELMo in an app; and old code against new (``ab``).

    python benchmarks/speed.py embed --preset small --precision fp32,int8      # ElmoEmbedder words/s
    python benchmarks/speed.py pipeline                                        # nlp.pipe: token cache, spaCy's cost
    python benchmarks/speed.py training                                        # listener training, layer cache
    python benchmarks/speed.py serving                                         # one Doc per call, threads
    python benchmarks/speed.py threads                                         # 1 or 2 torch threads, busy or not
    python benchmarks/speed.py memory                                          # RSS over 100,000 Docs
    python benchmarks/speed.py finetune --budgets 1000000,500                  # a fine-tuning step's peak memory
    python benchmarks/speed.py profile --precision int8                        # where a batch's time goes
    python benchmarks/speed.py products                                        # one LSTM product by rows
    python benchmarks/speed.py floor --preset original                         # one-Doc calls vs memory bandwidth
    python benchmarks/speed.py schedule --model embedded                       # the LSTM schedule vs a wavefront
    python benchmarks/speed.py measure pipe --model small                      # one figure (what ab runs)
    python benchmarks/speed.py ab --old ../old_checkout --new . --what pipe    # two source trees, alternating

Models: ``--preset``/``--model`` ``small``, ``medium``, ``original`` are seeded random weights of the published
architectures (speed does not depend on the weights; nothing to download), ``embedded`` the package's English
model, or a folder with ``options.json`` + ``weights.hdf5`` (or ``lm_weights.hdf5``). Text: UD English-EWT (../shared/data), but ``threads``,
which reads the UD sample in assets/. Every report starts with the command and the machine (CPU model and flags,
torch, load average). ``--pause-pretraining`` stops a ``spacy_elmo pretrain`` run on the same machine while timing.
"""
import argparse
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from common import (PRESETS, add_allow_load, best_time, header, interleaved, load, load_sentences, pretraining_paused, quiet_machine,
                    seeded_model)

ModelFiles = Tuple[Optional[str], Optional[str]]
MEASURES = ("pipe", "one-doc", "pipe-listener", "one-doc-listener", "threads8", "embed-batch1", "embed-batch32",
            "memory-100k", "kept-2000", "kept-2000-listener-off", "allennlp-finetune")
LISTENING_TAGGER = {"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": {"@architectures": "spacy_elmo.ElmoListener.v1"}}}


def model_files(model: str, directory: Path) -> ModelFiles:
    """(options, weights) of ``model`` (see the module's help); (None, None) is the embedded model."""
    if model in PRESETS or model == "tiny":
        return tuple(map(str, seeded_model(directory, model)))  # type: ignore[return-value]
    if model == "embedded":
        return None, None
    folder = Path(model)
    if not (folder / "options.json").is_file():
        sys.exit(f"--model {model}: not a preset ({', '.join(PRESETS)}), 'embedded' or a folder with options.json")
    weights = folder / "weights.hdf5" if (folder / "weights.hdf5").is_file() else folder / "lm_weights.hdf5"
    return str(folder / "options.json"), str(weights)


def elmo_nlp(files: ModelFiles, precision: str = "fp32", **settings):
    """``spacy.blank("en")`` with the ``elmo`` component on ``files`` at ``precision``; ``settings``: the
    component's (its defaults otherwise: one torch thread, the token cache). None if this checkout lacks one."""
    import spacy
    from thinc.api import ConfigValidationError

    nlp = spacy.blank("en")
    bilm = {"@architectures": "spacy_elmo.ElmoBiLm.v2", "options_file": files[0], "weight_file": files[1],
            "precision": precision}
    bilm.update(settings.pop("bilm", {}))
    try:
        nlp.add_pipe("elmo", config={"model": bilm, **settings})
    except ConfigValidationError:
        return None
    return nlp


def listener_nlp(files: ModelFiles, precision: str = "fp32"):
    """:func:`elmo_nlp` with nothing stored on Docs and an (untrained) tagger listening to it, initialized."""
    from spacy.training import Example

    nlp = elmo_nlp(files, precision, store_vectors=False)
    nlp.add_pipe("tagger", config=LISTENING_TAGGER)
    example = Example.from_dict(nlp.make_doc("A dog sat ."), {"tags": ["DT", "NN", "VBD", "."]})
    nlp.initialize(lambda: [example])
    return nlp


def ud_texts(n: int) -> List[str]:
    """The first ``n`` UD-EWT dev sentences as plain text (spaCy's tokenizer then splits them)."""
    return [" ".join(words) for words in load_sentences("ud", "dev", limit=n)]


def frequent_words(n: int) -> List[str]:
    """The ``n`` most frequent words of UD-EWT train: what fills a token cache before the measured text."""
    counts = Counter(w for words in load_sentences("ud", "train") for w in words)
    return [w for w, _ in counts.most_common(n)]


def in_batches(embedder, sentences: Sequence[Sequence[str]], batch_size: Optional[int]) -> List[np.ndarray]:
    """``embed_batch`` over ``sentences``, ``batch_size`` at a time (None: one call)."""
    if batch_size is None:
        return embedder.embed_batch(sentences)
    out: List[np.ndarray] = []
    for start in range(0, len(sentences), batch_size):
        out.extend(embedder.embed_batch(sentences[start : start + batch_size]))
    return out


def top_layer_fidelity(result: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> Tuple[float, float]:
    """Mean and 1st-percentile cosine per token of the top layers of ``result`` to those of ``reference``."""
    x = np.concatenate([r[-1] for r in result])
    y = np.concatenate([r[-1] for r in reference])
    cos = (x * y).sum(1) / np.maximum(np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1), 1e-30)
    return float(cos.mean()), float(np.percentile(cos, 1))


# --- embed ---------------------------------------------------------------------------------------------------------

def embed(args: argparse.Namespace) -> None:
    """``ElmoEmbedder`` words/s for each precision, token cache and batching, interleaved round by round."""
    import torch

    from spacy_elmo import ElmoEmbedder

    torch.set_num_threads(args.threads)
    sentences = load_sentences("ud", "dev", 5, 40, args.sentences)
    words = sum(map(len, sentences))
    cache_sizes = [int(c) for c in args.cache_sizes.split(",")]
    cache_words = frequent_words(max(cache_sizes))
    batch_sizes = [None if b == "all" else int(b) for b in args.batch_sizes.split(",")]
    runs: Dict[Tuple[str, int, Optional[int]], Callable[[], List[np.ndarray]]] = {}
    refused = []
    with tempfile.TemporaryDirectory() as tmp:
        files = model_files(args.preset, Path(tmp))
        for setting in precision_settings(args.precision, args.int8_kernels):
            precision = setting.split(" ")[0]
            for cache in cache_sizes:
                try:
                    with int8_kernel(setting):
                        embedder = ElmoEmbedder(*files, initial_state="zeros", cache_size=cache, threads=None,
                                                cache_words=cache_words[:cache] if cache else None, precision=precision)
                except ValueError as err:  # a precision this CPU refuses
                    refused.append(f"{setting}: {err}")
                    break
                for batch in batch_sizes:
                    runs[setting, cache, batch] = lambda e=embedder, b=batch: in_batches(e, sentences, b)
    outputs = {key: run() for key, run in runs.items()}  # a warm-up, and the vectors compared
    wall, cpu = interleaved(runs, args.rounds)
    reference = next(iter(outputs.values()))
    header(sys.argv)
    print(f"{args.preset}, {args.threads} torch thread(s); {len(sentences)} UD-EWT dev sentences of 5-40 tokens, "
          f"{words:,} words; token cache filled with the most frequent UD-EWT train words; {args.rounds} rounds, "
          f"the settings interleaved; fidelity: top layer against the first setting\n")
    int8_base = next((s for s in precision_settings(args.precision, args.int8_kernels) if " " in s), None)
    bases = ["fp32"] + ([int8_base] if int8_base else [])
    print("| precision | token cache | batch | words/s (best) | words per CPU-second (best) | "
          + " | ".join(f"x {b}, per-round median" for b in bases) + " | top-layer cosine mean / 1st pct |")
    print("| --- | ---: | --- | ---: | ---: |" + " ---: |" * len(bases) + " --- |")
    for (precision, cache, batch), seconds in cpu.items():
        ratios = []
        for name in bases:
            base = cpu.get((name, cache, batch))
            ratios.append(f"{statistics.median(b / s for b, s in zip(base, seconds)):.2f}" if base else "-")
        mean, low = top_layer_fidelity(outputs[precision, cache, batch], reference)
        print(f"| {precision} | {cache:,} | {batch or 'all at once'} | {words / min(wall[precision, cache, batch]):,.0f} "
              f"| {words / min(seconds):,.0f} | {' | '.join(ratios)} | {mean:.5f} / {low:.4f} |")
    for line in refused:
        print(f"refused: {line}")


def profile(args: argparse.Namespace) -> None:
    """Where a batch's time goes: ``torch.profiler``'s operators by self CPU time, for ``ElmoEmbedder.embed_batch`` on
    ``--sentences`` UD-EWT dev sentences in batches of ``--batch-size``, no token cache, one thread, after a warm-up."""
    import torch
    from torch.profiler import ProfilerActivity, profile as torch_profile

    from spacy_elmo import ElmoEmbedder

    torch.set_num_threads(1)
    sentences = load_sentences("ud", "dev", 5, 40, args.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        embedder = ElmoEmbedder(*model_files(args.model, Path(tmp)), initial_state="zeros", cache_size=0,
                                precision=args.precision, threads=1)
        in_batches(embedder, sentences, args.batch_size)
        with torch_profile(activities=[ProfilerActivity.CPU]) as profiled:
            start = time.process_time()
            in_batches(embedder, sentences, args.batch_size)
            seconds = time.process_time() - start
    header(sys.argv)
    print(f"{args.model}, {args.precision}, batches of {args.batch_size}: {seconds:.3f} CPU-s (profiled)\n")
    print(profiled.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))


def precision_settings(precisions: str, int8_kernels: Optional[str]) -> List[str]:
    """``--precision``'s names, ``int8`` once per kernel of ``--int8-kernels`` (``"int8 onednn"``) when given."""
    settings = []
    for precision in precisions.split(","):
        kernels = int8_kernels.split(",") if precision == "int8" and int8_kernels else [None]
        settings += [precision if kernel is None else f"{precision} {kernel}" for kernel in kernels]
    return settings


@contextmanager
def int8_kernel(setting: str) -> Iterator[None]:
    """The int8 kernel that ``setting`` names (``"int8 onednn"``) for the biLMs made inside: the package reads
    SPACY_ELMO_INT8_KERNEL when it converts weights to int8; without a name, its own choice."""
    kernel = setting.split(" ")[1] if " " in setting else None
    before = os.environ.pop("SPACY_ELMO_INT8_KERNEL", None)
    if kernel:
        os.environ["SPACY_ELMO_INT8_KERNEL"] = kernel
    try:
        yield
    finally:
        os.environ.pop("SPACY_ELMO_INT8_KERNEL", None)
        if before is not None:
            os.environ["SPACY_ELMO_INT8_KERNEL"] = before


# --- pipeline and training -----------------------------------------------------------------------------------------

def pipeline(args: argparse.Namespace) -> None:
    """``nlp.pipe`` words/s for each precision and token-cache size (the cache filling on earlier text, then new
    text), and ``nlp.pipe`` against ``ElmoEmbedder.embed_batch`` on the same sentences: the spaCy layer's cost."""
    import torch
    from spacy.tokens import Doc

    from spacy_elmo import ElmoEmbedder

    torch.set_num_threads(1)
    text = load_sentences("ud", "dev", limit=args.sentences)
    earlier = load_sentences("ud", "train", limit=args.earlier_sentences)
    header(sys.argv)
    with tempfile.TemporaryDirectory() as tmp:
        files = model_files(args.model, Path(tmp))
        print(f"model {args.model}, one torch thread, nlp.pipe(batch_size=64); a fresh pipeline per row reads "
              f"{len(earlier):,} UD-EWT train sentences ({sum(map(len, earlier)):,} words: the cache fills), then "
              f"{len(text):,} dev sentences ({sum(map(len, text)):,} words: new text); words per CPU-second\n")
        print("| precision | token cache | earlier text | new text | x fp32 without cache, new text |")
        print("| --- | ---: | ---: | ---: | ---: |")
        base = None
        for precision in args.precision.split(","):
            for cache in (int(c) for c in args.cache_sizes.split(",")):
                nlp = elmo_nlp(files, precision, bilm={"cache_size": cache})
                nlp.initialize()
                rates = []
                for sentences in (earlier, text):
                    docs = [Doc(nlp.vocab, words=s) for s in sentences]
                    start = time.process_time()
                    for _ in nlp.pipe(docs, batch_size=64):
                        pass
                    rates.append(sum(map(len, sentences)) / (time.process_time() - start))
                base = base or rates[1]
                print(f"| {precision} | {cache:,} | {rates[0]:,.0f} | {rates[1]:,.0f} | {rates[1] / base:.2f} |")
        nlp = elmo_nlp(files, bilm={"cache_size": 0})
        embedder = ElmoEmbedder(*files, threads=1)
        docs = [Doc(nlp.vocab, words=s) for s in text]
        words = sum(map(len, text))
        embed_rate = words / best_time(lambda: embedder.embed_batch(text), args.passes)[1]
        pipe_rate = words / best_time(lambda: list(nlp.pipe(docs, batch_size=len(docs))), args.passes)[1]
    print(f"\nThe same {len(text):,} sentences, no token cache, best of {args.passes} (words per CPU-second): "
          f"ElmoEmbedder.embed_batch {embed_rate:,.0f}, nlp.pipe {pipe_rate:,.0f}; spaCy layer cost "
          f"{100 * (embed_rate / pipe_rate - 1):+.1f}%")


NER = {
    "@architectures": "spacy.TransitionBasedParser.v2", "state_type": "ner", "extra_state_tokens": False,
    "hidden_width": 64, "maxout_pieces": 2, "use_upper": True, "nO": None,
    "tok2vec": {"@architectures": "spacy_elmo.ElmoListener.v1", "upstream": "*"},
}  # fmt: skip


def training(args: argparse.Namespace) -> None:
    """Training words/s of a listener NER on a frozen biLM, without and with the layer cache (epochs 2+)."""
    import torch
    from spacy.tokens import Doc
    from spacy.training import Example
    from thinc.api import fix_random_seed

    torch.set_num_threads(1)
    tagged = load_sentences("conll", "train", limit=args.sentences, tags=True)
    header(sys.argv)
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = model_files(args.model, Path(tmp))
        for cache_mb in (0, 4096):
            fix_random_seed(0)
            nlp = elmo_nlp(files, store_vectors=False, train_cache_mb=cache_mb)
            nlp.add_pipe("ner", config={"model": NER})
            examples = [Example(Doc(nlp.vocab, words=w), Doc(nlp.vocab, words=w, ents=t)) for w, t in tagged]
            optimizer = nlp.initialize(lambda examples=examples: examples)
            elapsed = 0.0
            for epoch in range(args.epochs):
                start = time.perf_counter()
                for i in range(0, len(examples), 32):
                    nlp.update(examples[i : i + 32], sgd=optimizer)
                elapsed += (time.perf_counter() - start) if epoch else 0.0
            rates[cache_mb] = sum(len(w) for w, _ in tagged) * (args.epochs - 1) / elapsed
    print(f"model {args.model}; listener NER on the first {len(tagged):,} CoNLL-2003 training sentences, batches of "
          f"32, epochs 2-{args.epochs} timed (the first fills the cache); words/s\n")
    print(f"| layer cache | words/s |\n| --- | ---: |\n| off | {rates[0]:,.0f} |\n| on | {rates[4096]:,.0f} |")
    print(f"\nspeed-up {rates[4096] / rates[0]:.2f}x")


# --- ELMo in an app --------------------------------------------------------------------------------------------------

def serving(args: argparse.Namespace) -> None:
    """Words/s of ``nlp.pipe``, of one Doc per call and of N Python threads calling one ``nlp``, on the same texts,
    the modes interleaved round by round; each pipeline's token cache filled by a first pass."""
    from spacy_elmo.model.precision import native_bf16_cpu

    texts = ud_texts(args.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        files = model_files(args.model, Path(tmp))
        fp32, int8 = elmo_nlp(files), elmo_nlp(files, "int8")
        pipelines = {"fp32": fp32, "int8": int8}
        if args.extras:
            pipelines["fp32, 2 torch threads"] = elmo_nlp(files, threads=2)
            if native_bf16_cpu():
                pipelines["bf16"] = elmo_nlp(files, "bf16")
        words = sum(len(doc) for doc in fp32.pipe(texts))
        for nlp in pipelines.values():
            list(nlp.pipe(texts))
        n = args.threads
        with ThreadPoolExecutor(n) as pool:
            runs: Dict[str, Callable[[], object]] = {"nlp.pipe fp32": lambda: list(fp32.pipe(texts, batch_size=64))}
            for name, nlp in pipelines.items():
                runs[f"one Doc per call {name}"] = lambda nlp=nlp: [nlp(text) for text in texts]
            runs[f"{n} threads, one Doc per call fp32"] = lambda: list(pool.map(fp32, texts))
            if args.extras:
                runs[f"{n} threads, one Doc per call int8"] = lambda: list(pool.map(int8, texts))
            seconds = interleaved(runs, args.rounds)[0]
        header(sys.argv)
        print(f"model {args.model}; {len(texts)} UD-EWT dev sentences ({words:,} words), warm default token cache, the "
              f"component's one torch thread; words/s of wall time, median of {args.rounds} interleaved rounds\n")
        print("| mode | words/s | x nlp.pipe fp32 |\n| --- | ---: | ---: |")
        pipe = words / statistics.median(seconds["nlp.pipe fp32"])
        for mode, times in seconds.items():
            rate = words / statistics.median(times)
            print(f"| {mode} | {rate:,.0f} | {rate / pipe:.2f} |")


# --- threads ---------------------------------------------------------------------------------------------------------

def _busy_loop() -> None:
    while True:
        pass


@contextmanager
def competing_process(active: bool) -> Iterator[None]:
    """A CPU-bound child process holding one core for the block (nothing if not ``active``)."""
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


def threads(args: argparse.Namespace) -> None:
    """``ElmoEmbedder`` words/s and ``nlp.pipe`` seconds at 1, 2 and torch's default threads, with and without a
    busy-loop process holding one core. The embedded English model on the bundled UD sample (runs from a checkout)."""
    import spacy
    import torch

    from spacy_elmo import ElmoEmbedder, TokenTruncationWarning

    warnings.simplefilter("ignore", TokenTruncationWarning)  # a URL in the sample is longer than the model reads
    sentences = load_sentences("ud-sample", "all")
    words = sum(map(len, sentences))
    short = [" ".join(s) for s in sentences if len(s) <= 12]
    texts = [short[i % len(short)] for i in range(args.texts)]
    header(sys.argv)
    print(f"embedded English model; ElmoEmbedder: {len(sentences)} sentences, {words:,} words; nlp.pipe: {len(texts)} "
          f"texts of <= 12 tokens; best of {args.passes} after a warm-up\n")
    print("| competing process | threads | ElmoEmbedder words/s | nlp.pipe seconds |\n| --- | --- | ---: | ---: |")
    for busy in (False, True):
        with competing_process(busy):
            for n in (1, 2, None):
                embedder = ElmoEmbedder(threads=n)
                seconds = best_time(lambda e=embedder: e.embed_batch(sentences), args.passes)[0]
                nlp = spacy.blank("en")
                nlp.add_pipe("elmo", config={"threads": n})
                pipe = best_time(lambda nlp=nlp: list(nlp.pipe(texts)), args.passes)[0]
                label = f"torch default ({torch.get_num_threads()})" if n is None else str(n)
                print(f"| {'yes' if busy else 'no'} | {label} | {words / seconds:,.0f} | {pipe:.1f} |", flush=True)
    print(f"\nload average after: {load()}")


# --- memory ----------------------------------------------------------------------------------------------------------

STREAM_WORDS = (
    "the of and to in a is was that for it with as his on be at by had not are but from or have an they which one "
    "you were her all she there would their we him been has when who will more no if out so said what up its about "
    "into than them can only other new some could time these two may then do first any my now such like our over "
    "man me even most made after also did many before must through back years where much your way well down"
).split()


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status (this measurement needs Linux)")


def stream_texts(n: int, new_strings: bool, seed: int = 0) -> Iterator[str]:
    """Short random texts of common words, each with a string never seen before (an id) if ``new_strings``."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        words = list(rng.choice(STREAM_WORDS, rng.integers(4, 21)))
        if new_strings:
            words.insert(int(rng.integers(len(words) + 1)), f"id{i:07d}")
        yield " ".join(words) + " ."


def stream_rss(args: argparse.Namespace, zones: bool) -> List[float]:
    """RSS (MB) every ``args.every`` Docs of ``args.docs`` streamed through ``nlp.pipe`` (in ``nlp.memory_zone()``
    per ``args.zone_docs`` Docs if ``zones``)."""
    from contextlib import nullcontext

    nlp = elmo_nlp((args.options, args.weights))
    nlp.initialize()
    stream = stream_texts(args.docs, args.new_strings)
    samples: List[float] = []
    done = 0
    while done < args.docs:
        chunk = min(args.zone_docs, args.docs - done)
        with nlp.memory_zone() if zones else nullcontext():
            for _ in nlp.pipe((next(stream) for _ in range(chunk)), batch_size=256):
                done += 1
                if done % args.every == 0:
                    samples.append(rss_mb())
    return samples


def memory(args: argparse.Namespace) -> None:
    """RSS of one process streaming short Docs through ``nlp.pipe``, without and with memory zones, each mode in a
    fresh process; growth from the first sample (after the allocator has warmed up)."""
    if args.child:
        print(json.dumps(stream_rss(args, args.child == "zone")))
        return
    header(sys.argv)
    with tempfile.TemporaryDirectory() as tmp:
        files = model_files(args.model, Path(tmp))
        rows = {}
        for mode in ("plain", "zone"):
            command = [sys.executable, __file__, "memory", "--child", mode, "--docs", str(args.docs), "--every",
                       str(args.every), "--zone-docs", str(args.zone_docs)]
            command += [] if args.new_strings else ["--no-new-strings"]
            command += ["--options", files[0], "--weights", files[1]] if files[0] else []
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            rows[mode] = json.loads(out.strip().splitlines()[-1])
    print(f"model {args.model}; {args.docs:,} Docs of 5-21 words{', each with a new string' * args.new_strings}; "
          f"zone: nlp.memory_zone() per {args.zone_docs:,} Docs; RSS (MB) every {args.every:,} Docs\n")
    print("| mode | " + " | ".join(f"{(i + 1) * args.every:,}" for i in range(len(rows['plain']))) + " | change | peak |")
    print("| --- |" + " ---: |" * (len(rows["plain"]) + 2))
    for mode, samples in rows.items():
        cells = " | ".join(f"{s:.0f}" for s in samples)
        print(f"| {mode} | {cells} | {samples[-1] - samples[0]:+.1f} | {max(samples) - samples[0]:+.1f} |")


def finetune_step(args: argparse.Namespace) -> Dict[str, float]:
    """Peak RSS growth and seconds of one fine-tuning step (the biLM's forward with autograd, then its backward) of
    UD-EWT dev sentences, one Doc each, totalling ``args.tokens`` tokens, under the budget ``args.child``."""
    import spacy_elmo
    from spacy.tokens import Doc

    warnings.simplefilter("ignore", spacy_elmo.TokenTruncationWarning)
    nlp = elmo_nlp((args.options, args.weights), frozen=False, bilm={"max_batch_tokens": args.child})
    model = nlp.get_pipe("elmo").model
    docs, total = [], 0
    for words in load_sentences("ud", "dev"):
        words = words[: args.tokens - total]
        docs.append(Doc(nlp.vocab, words=words))
        total += len(words)
        if total == args.tokens:
            break

    def step(batch):
        layers, backprop = model.begin_update(batch)
        backprop([model.ops.xp.ones_like(x) for x in layers])

    step(docs[:2])  # the weights loaded, the first allocations made
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    step(docs)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"growth_mb": peak - before, "peak_mb": peak, "seconds": seconds, "tokens": total, "docs": len(docs)}


def finetune(args: argparse.Namespace) -> None:
    """Peak memory of one fine-tuning step of ``--tokens`` tokens with the biLM's ``max_batch_tokens`` at each of
    ``--budgets`` (a training batch runs in pieces within it, each computed again in the backward pass), each step in
    a fresh process, the budgets alternating round by round."""
    if args.child:
        print(json.dumps(finetune_step(args)))
        return
    header(sys.argv)
    budgets = [int(b) for b in args.budgets.split(",")]
    rows: Dict[int, List[dict]] = {b: [] for b in budgets}
    with tempfile.TemporaryDirectory() as tmp:
        files = model_files(args.model, Path(tmp))
        for round_ in range(args.rounds):
            for budget in budgets if round_ % 2 == 0 else budgets[::-1]:
                command = [sys.executable, __file__, "finetune", "--child", str(budget), "--tokens", str(args.tokens)]
                command += ["--options", files[0], "--weights", files[1]] if files[0] else []
                out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
                rows[budget].append(json.loads(out.strip().splitlines()[-1]))
    first = rows[budgets[0]][0]
    print(f"model {args.model}; one step of {first['tokens']:,} tokens in {first['docs']} Docs (UD-EWT dev "
          f"sentences); {args.rounds} rounds, one process per step; load average after: {load()}\n")
    print("| `max_batch_tokens` | peak RSS growth of the step, MB | peak RSS, MB | step, s |")
    print("| ---: | ---: | ---: | ---: |")
    for budget, results in rows.items():
        growth, peak, seconds = (statistics.median(r[key] for r in results) for key in ("growth_mb", "peak_mb", "seconds"))
        print(f"| {budget:,} | {growth:,.0f} | {peak:,.0f} | {seconds:.1f} |")


# --- what bounds one Doc per call ------------------------------------------------------------------------------------

def products(args: argparse.Namespace) -> None:
    """A row's cost in each LSTM product of one layer (both directions) by the number of rows that run together: the
    shapes of ``--preset``, fp32 (``torch.baddbmm``), int8 on fbgemm's dynamic kernel (quantized tensors) and on
    oneDNN's (``torch.ops.onednn.qlinear_pointwise``, plain int8 tensors), plain torch, hot; ``--precision``: which."""
    import torch

    from spacy_elmo import ElmoOptions
    from spacy_elmo.model.options import preset

    torch.set_num_threads(1)
    options: ElmoOptions = preset(args.preset)
    p, h = options.projection_dim, options.lstm_dim
    shapes = {"input": (p, 4 * h), "hidden": (p, 4 * h), "projection": (h, p)}
    header(sys.argv)
    print(f"{args.preset}: one layer, both directions, one torch thread; us per row (GFLOP/s)\n")
    print("| precision | rows | " + " | ".join(shapes) + " | a word's products (all layers), us |")
    print("| --- | ---: |" + " ---: |" * (len(shapes) + 1))
    torch.manual_seed(0)
    weights = {name: torch.randn(2, k, n) / k**0.5 for name, (k, n) in shapes.items()}
    for precision in args.precision.split(","):
        for rows in map(int, args.rows.split(",")):
            cells, total = [], 0.0
            for name, (k, n) in shapes.items():
                run = _product(weights[name], rows, precision)
                calls = max(3, int(2e5 / (rows * k * n) * 50))
                seconds = best_time(lambda r=run, c=calls: [r() for _ in range(c)], 5)[0] / calls / rows
                total += seconds
                cells.append(f"{seconds * 1e6:.1f} ({2 * 2 * k * n / seconds / 1e9:.0f})")
            print(f"| {precision} | {rows} | " + " | ".join(cells) + f" | {options.n_layers * total * 1e6:.0f} |")


def _product(weight, rows: int, precision: str) -> Callable[[], object]:
    """One call of both directions' product of ``rows`` random rows with ``weight`` ``(2, k, n)``: ``precision``
    fp32, ``int8`` (fbgemm), ``int8-onednn``, ``int8-int-mm`` (``torch._int_mm``) or ``int8-weight-only``
    (``torch._weight_int8pack_mm``)."""
    import torch

    x = torch.randn(2, rows, weight.shape[1])
    if precision == "fp32":
        out, bias = torch.empty(2, rows, weight.shape[2]), torch.zeros(2, 1, weight.shape[2])
        return lambda: torch.baddbmm(bias, x, weight, out=out)
    columns = weight.transpose(1, 2)
    scales = (columns.abs().amax(2) / 127).clamp_min(1e-12)
    levels = (columns / scales[..., None]).round().to(torch.int8).contiguous()
    if precision == "int8-int-mm":  # int8 x int8 -> int32, then the scales
        rows_q, weight_q = torch.randint(-63, 64, x.shape, dtype=torch.int8), levels.transpose(1, 2).contiguous()
        return lambda: [torch._int_mm(rows_q[d], weight_q[d]).mul(scales[d]) for d in range(2)]
    if precision == "int8-weight-only":  # float32 rows, int8 weights
        return lambda: [torch._weight_int8pack_mm(x[d], levels[d], scales[d]) for d in range(2)]
    if precision == "int8-onednn":
        packed = [torch.ops.onednn.qlinear_prepack(w, None) for w in levels]
        q, zero_points = torch.randint(1, 128, x.shape, dtype=torch.uint8), torch.zeros(len(scales[0]), dtype=torch.int32)
        linear = torch.ops.onednn.qlinear_pointwise.default
        return lambda: [linear(q[d], 1.0, 64, packed[d], scales[d], zero_points, None, 1.0, 0, torch.float32, "none", [],
                               "") for d in range(2)]
    with warnings.catch_warnings():  # torch 2.13 marks quantized tensors deprecated; fbgemm's kernels are what runs
        warnings.simplefilter("ignore", UserWarning)
        packed = [torch.ops.quantized.linear_prepack(torch._make_per_channel_quantized_tensor(
            w, s.double(), torch.zeros(len(s), dtype=torch.long), 0), None) for w, s in zip(levels, scales)]
    linear = torch.ops.quantized.linear_dynamic.default
    return lambda: [linear(x[d], packed[d], True) for d in range(2)]


def floor(args: argparse.Namespace) -> None:
    """One-sentence calls against the memory floor: a one-row step reads every layer's recurrent and projection
    weights, a call reads the input weights once; the floor is those bytes over one thread's read bandwidth."""
    import torch

    from spacy_elmo import ElmoEmbedder, ElmoOptions

    torch.set_num_threads(1)
    sentences = load_sentences("ud", "dev", 5, 40, args.sentences)
    bytes_per_weight = {"fp32": 4, "int8": 1}
    with tempfile.TemporaryDirectory() as tmp:
        files = model_files(args.preset, Path(tmp))
        options = ElmoOptions.from_file(files[0])
        embedders = {p: ElmoEmbedder(*files, precision=p, cache_size=20000) for p in bytes_per_weight}
    runs = {p: (lambda e=e: in_batches(e, sentences, 1)) for p, e in embedders.items()}
    for run in runs.values():
        run()  # fills the token cache
    seconds = interleaved(runs, args.rounds)[1]
    x = torch.ones(512 * 2**18)
    bandwidth = x.numel() * 4 / best_time(x.sum, 5)[0]
    p, h, n = options.projection_dim, options.lstm_dim, options.n_layers
    per_step, per_call = 2 * n * (p * 4 * h + h * p), 2 * n * p * 4 * h
    steps = sum(len(s) + 2 for s in sentences)  # <S> and </S> run too
    header(sys.argv)
    print(f"{args.preset}, {len(sentences)} sentences of {sum(map(len, sentences)) / len(sentences):.1f} words, one per "
          f"call, warm token cache, one thread; read bandwidth {bandwidth / 1e9:.1f} GB/s\n")
    for name, size in bytes_per_weight.items():
        bound = (per_step * steps + per_call * len(sentences)) * size / bandwidth / len(sentences)
        best = min(seconds[name]) / len(sentences)
        print(f"{name}: {best * 1e3:.0f} ms per call; weights read per step {per_step * size / 1e6:.0f} MB, per call "
              f"{per_call * size / 1e6:.0f} MB; floor {bound * 1e3:.0f} ms per call, reached {bound / best:.0%}")


def schedule(args: argparse.Namespace) -> None:
    """A biLM run by rows: the package's schedule (each layer over every step, its two directions in one product)
    against a wavefront (layer k at step t beside layer k+1 at step t-1: T + L - 1 steps of one product for every
    layer and direction), written here from the same weights; and each schedule's matrix products alone, its floor.
    The wavefront here leaves out the package's packing, final states and layer writes: a lower bound of what it
    would take in the package."""
    import torch

    from spacy_elmo import ElmoEmbedder

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        bilm = ElmoEmbedder(*model_files(args.model, Path(tmp)), threads=1).runtime.encoder.bilm
    header(sys.argv)
    print(f"{args.model}: fp32, one thread, every row {args.steps} steps; ms per run (CPU), median of "
          f"{args.rounds} rounds, the runs interleaved in each\n")
    print("| rows | package | wavefront | wavefront / package: median (range) | products alone: package | wavefront |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    weights = _stacked_lstms(bilm)
    torch.manual_seed(0)
    for rows in map(int, args.rows.split(",")):
        ms = _schedule_times(bilm, weights, rows, args.steps, args.rounds)
        ratios = [w / p for w, p in zip(ms["wavefront"], ms["package"])]
        print(f"| {rows} | {statistics.median(ms['package']):.2f} | {statistics.median(ms['wavefront']):.2f} | "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
              f"{statistics.median(ms['package products']):.2f} | {statistics.median(ms['wavefront products']):.2f} |",
              flush=True)
    print(f"\nload average after: {load()}")


def _schedule_times(bilm, weights: Dict[str, object], rows: int, steps: int, rounds: int) -> Dict[str, List[float]]:
    """ms per run of each schedule and of its products alone, per round, on random token vectors of ``rows`` rows,
    after checking that the wavefront gives the package's forward top layer."""
    import torch

    tokens = torch.randn(rows, steps, bilm.options.projection_dim) * 0.5
    packed = tokens.transpose(0, 1).reshape(1, -1, tokens.shape[2]).expand(2, -1, -1).contiguous()  # step-major
    calls = max(1, 4000 // (rows * steps))
    with torch.inference_mode():
        forward = _wavefront(weights, bilm.options, packed, rows)[0].view(steps, rows, -1).transpose(0, 1)
        top = bilm(tokens, [steps] * rows)[0][-1][..., : forward.shape[2]]
        assert torch.allclose(forward, top, rtol=1e-4, atol=1e-4), "the wavefront here is not the package's biLM"
        runs = {
            "package": lambda: [bilm(tokens, [steps] * rows) for _ in range(calls)],
            "wavefront": lambda: [_wavefront(weights, bilm.options, packed, rows) for _ in range(calls)],
            "package products": lambda: [_products_alone(weights, packed, rows, False) for _ in range(calls)],
            "wavefront products": lambda: [_products_alone(weights, packed, rows, True) for _ in range(calls)],
        }
        for run in runs.values():
            run()
        cpu = interleaved(runs, rounds)[1]
    return {name: [s / calls * 1e3 for s in seconds] for name, seconds in cpu.items()}


def _stacked_lstms(bilm) -> Dict[str, object]:
    """Every layer's and direction's weights stacked, ``(2 n_layers, ...)``, layer by layer, forward then backward;
    the ``j`` gate's columns doubled (tanh as 2 sigmoid(2x) - 1, as the package computes it)."""
    import torch

    lstms = [lstm for pair in zip(bilm.forward_lstms, bilm.backward_lstms) for lstm in pair]
    cells = bilm.options.lstm_dim
    scale = torch.ones(4 * cells)
    scale[cells : 2 * cells] = 2.0
    forget = torch.zeros(4 * cells)
    forget[2 * cells : 3 * cells] = 1.0

    def stack(name: str) -> torch.Tensor:
        return torch.stack([getattr(lstm, name).detach() for lstm in lstms])

    return {"input": stack("w_input") * scale, "hidden": stack("w_hidden") * scale, "projection": stack("w_proj"),
            "bias": ((stack("bias") + forget) * scale).unsqueeze(1)}


def _wavefront(weights: Dict[str, object], options, packed, rows: int):
    """The top layer ``(2, steps * rows, dim)`` (two layers) of rows of equal length from zeros; ``packed``: each
    direction's inputs ``(2, steps * rows, dim)``, step-major, in the order that direction reads them."""
    import torch

    w, n = weights, options.n_layers
    steps, dim, cells = packed.shape[1] // rows, options.projection_dim, options.lstm_dim
    cell_clip, proj_clip = 2.0 * options.cell_clip, options.proj_clip
    first = torch.baddbmm(w["bias"][:2], packed, w["input"][:2])
    later = w["bias"][2:].expand(-1, steps * rows, -1)
    step_in = torch.cat((first, later)).split(rows, dim=1)
    h, c2 = packed.new_zeros(2 * n, rows, dim), packed.new_zeros(2 * n, rows, cells)
    outputs = []
    for s in range(steps + n - 1):
        lo, hi = 2 * max(0, s - steps + 1), 2 * min(n, s + 1)  # the layers at a real step
        z = torch.baddbmm(step_in[min(s, steps - 1)][lo:hi], h[lo:hi], w["hidden"][lo:hi])  # past T: biases only
        inner = max(lo, 2)
        if hi > inner:
            z[inner - lo :].baddbmm_(h[inner - 2 : hi - 2], w["input"][inner:hi])
        i, j, f, o = z.sigmoid_().chunk(4, dim=2)
        c_new = torch.mul(f, c2[lo:hi]).addcmul_(i, j, value=4.0).sub_(i, alpha=2.0).clamp_(-cell_clip, cell_clip)
        h_new = torch.bmm(torch.addcmul(torch.neg(o), o, torch.sigmoid(c_new), value=2.0), w["projection"][lo:hi])
        h_new.clamp_(-proj_clip, proj_clip)
        if hi - lo < 2 * n:
            h_new, c_new = h.index_copy(0, torch.arange(lo, hi), h_new), c2.index_copy(0, torch.arange(lo, hi), c_new)
        h, c2 = h_new, c_new
        outputs.append(h)
    out = torch.cat(outputs, dim=1)
    layers = [out[2 * k : 2 * k + 2, k * rows : (k + steps) * rows] for k in range(n)]
    top = layers[-1]
    if options.use_skip_connections and n > 1:
        top = top + layers[-2]
    return top


def _products_alone(weights: Dict[str, object], packed, rows: int, wavefront: bool) -> None:
    """The matrix products of one run of a schedule (the package's, or the wavefront), nothing between them."""
    import torch

    w, steps = weights, packed.shape[1] // rows
    n = w["hidden"].shape[0] // 2
    h = packed.new_zeros(2 * n, rows, packed.shape[2])
    cell_out = packed.new_zeros(2 * n, rows, w["projection"].shape[1])
    if wavefront:
        torch.baddbmm(w["bias"][:2], packed, w["input"][:2])
        for _ in range(steps + n - 1):
            z = torch.baddbmm(w["bias"], h, w["hidden"])
            z[2:].baddbmm_(h[:-2], w["input"][2:])
            torch.bmm(cell_out, w["projection"])
        return
    for k in range(n):
        layer = slice(2 * k, 2 * k + 2)
        torch.baddbmm(w["bias"][layer], packed, w["input"][layer])
        for _ in range(steps):
            torch.baddbmm(w["bias"][layer], h[layer], w["hidden"][layer])
            torch.bmm(cell_out[layer], w["projection"][layer])


# --- one figure, and two source trees against each other -------------------------------------------------------------

def measure_one(what: str, files: ModelFiles, precision: str, sentences: int, passes: int) -> Dict[str, object]:
    """One figure of this process's ``spacy_elmo``: words per CPU-second (best of ``passes`` after a warm-up pass
    that also fills the token cache), words/s of wall time for ``threads8``, or peak RSS for ``memory-100k``."""
    import spacy_elmo

    warnings.simplefilter("ignore", spacy_elmo.TokenTruncationWarning)  # a URL in UD-EWT dev, reported once
    found = {"spacy_elmo": str(Path(spacy_elmo.__file__).parent)}
    if what == "memory-100k":
        from spacy.tokens import Doc

        nlp = elmo_nlp(files, precision)
        nlp("A first short text .")
        words = [w for s in load_sentences("ud", "dev") for w in s]
        words = (words * (100_000 // len(words) + 1))[:100_000]
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        doc = nlp(Doc(nlp.vocab, words=words))  # UD-EWT dev's words, repeated: one Doc of exactly 100,000 tokens
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {**found, "value": peak, "unit": "MB peak RSS", "tokens": len(doc), "before_mb": before}
    if what.startswith("embed-batch"):
        from spacy_elmo import ElmoEmbedder

        batch = load_sentences("ud", "dev", 5, 40, sentences)
        embedder = ElmoEmbedder(*files, precision=precision, threads=1)
        cpu = best_time(lambda: in_batches(embedder, batch, int(what[len("embed-batch"):])), passes)[1]
        return {**found, "value": sum(map(len, batch)) / cpu, "unit": "words per CPU-second"}
    if what == "allennlp-finetune":
        from spacy_elmo.allennlp import Elmo, batch_to_ids

        batch = load_sentences("ud", "dev", 5, 40, sentences)
        elmo = Elmo(*files, 2, requires_grad=True, do_layer_norm=True, dropout=0.0, threads=1)
        ids = [batch_to_ids(batch[i : i + 32]) for i in range(0, len(batch), 32)]

        def finetune_pass() -> None:
            for chars in ids:
                sum(r.sum() for r in elmo(chars)["elmo_representations"]).backward()

        return {**found, "value": sum(map(len, batch)) / best_time(finetune_pass, passes)[1], "unit": "words per CPU-second"}
    if what.startswith("kept-2000"):
        import gc
        import tracemalloc

        texts = (ud_texts(2000) * 2)[:2000]
        nlp = listener_nlp(files, precision) if what.endswith("listener-off") else elmo_nlp(files, precision, store_vectors=False)
        list(nlp.pipe(texts[:200]))
        gc.collect()
        tracemalloc.start()  # what Python objects and numpy arrays hold (RSS also keeps what malloc was given back)
        with nlp.select_pipes(disable=[name for name in nlp.pipe_names if name != "elmo"]):
            docs = list(nlp.pipe(texts))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] / 2**20
        return {**found, "value": held, "unit": f"MB held with {len(docs):,} Docs kept (tracemalloc)"}
    texts = ud_texts(sentences)
    nlp = listener_nlp(files, precision) if what.endswith("-listener") else elmo_nlp(files, precision)
    words = sum(len(doc) for doc in nlp.pipe(texts))
    if what == "threads8":
        with ThreadPoolExecutor(8) as pool:
            wall = best_time(lambda: list(pool.map(nlp, texts)), passes)[0]
        return {**found, "value": words / wall, "unit": "words/s"}
    run = (lambda: list(nlp.pipe(texts, batch_size=64))) if what.startswith("pipe") else (lambda: [nlp(t) for t in texts])
    return {**found, "value": words / best_time(run, passes)[1], "unit": "words per CPU-second"}


def measure(args: argparse.Namespace) -> None:
    """One figure of ``what`` for the ``spacy_elmo`` this process imports, as JSON (what ``ab`` runs per tree)."""
    with tempfile.TemporaryDirectory() as tmp:
        files = (args.options, args.weights) if args.options else model_files(args.model, Path(tmp))
        print(json.dumps(measure_one(args.what, files, args.precision, args.sentences, args.passes)))


def ab(args: argparse.Namespace) -> None:
    """``measure`` of two source trees in alternating child processes (``PYTHONPATH=<tree>``: each imports its own
    ``spacy_elmo``; the order flips every round), on the same model files; per-round ratios and their median."""
    trees = {"old": Path(args.old).resolve(), "new": Path(args.new).resolve()}
    for name, tree in trees.items():
        if not (tree / "spacy_elmo" / "__init__.py").is_file():
            sys.exit(f"--{name} {tree}: no spacy_elmo package there (give the root of a checkout)")
    results: Dict[str, List[dict]] = {name: [] for name in trees}
    header(sys.argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "embedded":  # the new tree's embedded model for both, so that only the code differs
            files = (str(trees["new"] / "spacy_elmo/data/en_gutenberg_tiny/options.json"),
                     str(trees["new"] / "spacy_elmo/data/en_gutenberg_tiny/weights.hdf5"))
        else:
            files = model_files(args.model, Path(tmp))
        command = [sys.executable, __file__, "measure", args.what, "--options", files[0], "--weights", files[1],
                   "--precision", args.precision, "--sentences", str(args.sentences), "--passes", str(args.passes)]
        print(f"{args.what}, model {args.model}, precision {args.precision}; {args.rounds} rounds, one child process "
              f"per tree and round, the order flipping each round\n")
        for round_ in range(args.rounds):
            for name in (("old", "new") if round_ % 2 == 0 else ("new", "old")):
                env = {**os.environ, "PYTHONPATH": str(trees[name])}
                done = subprocess.run(command, env=env, capture_output=True, text=True)
                if done.returncode:
                    sys.exit(f"{name} tree failed:\n{done.stderr[-3000:]}")
                results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            old, new = (results[n][-1]["value"] for n in ("old", "new"))
            print(f"round {round_ + 1}: old {old:,.1f}, new {new:,.1f} {results['new'][-1]['unit']}; new / old "
                  f"{new / old:.3f}", flush=True)
    ratios = [n["value"] / o["value"] for o, n in zip(results["old"], results["new"])]
    for name in trees:
        print(f"{name}: {results[name][0]['spacy_elmo']}, median "
              f"{statistics.median(r['value'] for r in results[name]):,.1f} {results[name][0]['unit']}")
    better = "lower is better" if args.what.startswith(("memory", "kept")) else "higher is better"
    print(f"new / old: median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}; {better}); "
          f"load average after: {load()}")


# --- command line ----------------------------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    main.add_argument("--pause-pretraining", action="store_true", help="SIGSTOP spacy_elmo pretrain runs meanwhile")
    add_allow_load(main)
    sub = main.add_subparsers(dest="command", required=True)

    def command(name: str, function: Callable, model: Optional[str] = None, **flags) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=function.__doc__.split("\n")[0], description=function.__doc__)
        p.set_defaults(function=function)
        if model:
            p.add_argument("--model", default=model, help="small, medium, original, embedded or a model folder")
        for flag, default in flags.items():
            p.add_argument(f"--{flag.replace('_', '-')}", type=type(default), default=default)
        return p

    command("embed", embed, preset="small", precision="fp32", cache_sizes="0", batch_sizes="32", sentences=200,
            rounds=5, threads=1).add_argument(
        "--int8-kernels", help="int8 once per kernel: fbgemm, onednn, dequantized (default: the package's choice)")
    command("pipeline", pipeline, model="small", precision="fp32,int8", cache_sizes="0,20000", sentences=500,
            earlier_sentences=1500, passes=3)
    command("training", training, model="embedded", sentences=1000, epochs=3)
    serving_parser = command("serving", serving, model="small", sentences=500, rounds=3, threads=8)
    serving_parser.add_argument("--extras", action="store_true", help="also 2 torch threads, bf16, the threads at int8")
    command("threads", threads, passes=2, texts=1000)
    memory_parser = command("memory", memory, model="tiny", docs=100_000, every=10_000, zone_docs=1000)
    memory_parser.add_argument("--no-new-strings", dest="new_strings", action="store_false")
    memory_parser.add_argument("--child", choices=["plain", "zone"], help=argparse.SUPPRESS)
    memory_parser.add_argument("--options", help=argparse.SUPPRESS)
    memory_parser.add_argument("--weights", help=argparse.SUPPRESS)
    finetune_parser = command("finetune", finetune, model="original", tokens=2000, budgets="1000000,500", rounds=2)
    finetune_parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    finetune_parser.add_argument("--options", help=argparse.SUPPRESS)
    finetune_parser.add_argument("--weights", help=argparse.SUPPRESS)
    command("profile", profile, model="embedded", precision="fp32", sentences=200, batch_size=32, top=18)
    command("products", products, preset="small", precision="fp32,int8,int8-onednn", rows="1,8,22,64")
    command("floor", floor, preset="original", sentences=12, rounds=3)
    command("schedule", schedule, model="embedded", rows="1,8,32,128", steps=22, rounds=5)
    measure_parser = command("measure", measure, model="small", precision="fp32", sentences=300, passes=2)
    measure_parser.add_argument("what", choices=MEASURES)
    measure_parser.add_argument("--options", help="options.json (instead of --model)")
    measure_parser.add_argument("--weights", help="weights .hdf5 (with --options)")
    ab_parser = command("ab", ab, model="small", precision="fp32", sentences=300, passes=2, rounds=5)
    ab_parser.add_argument("--old", required=True, help="root of the other checkout (e.g. a git worktree)")
    ab_parser.add_argument("--new", default=".", help="root of the checkout measured against it (default: .)")
    ab_parser.add_argument("--what", required=True, choices=MEASURES)
    return main


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parser().parse_args(argv)
    with pretraining_paused(args.pause_pretraining), quiet_machine(args.allow_load):
        args.function(args)


if __name__ == "__main__":
    main()
