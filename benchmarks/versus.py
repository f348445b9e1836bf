"""The ``elmo`` component against spacy-curated-transformers' transformer component, where a spaCy user feels it.

    pip install -e .[bench]                                                 # spacy-curated-transformers
    python benchmarks/versus.py run --sentences 300 --rounds 3              # the table in BENCHMARKS.md
    python benchmarks/versus.py run --old ../wt-oldbench                    # and ELMo of an older checkout
    python benchmarks/versus.py profile --precision int8                    # where one int8 call's time goes
    python benchmarks/versus.py bpe                                         # the byte-BPE vocabulary, again

Pipelines, each ``spacy.blank("en")`` with one component, one torch thread:

- ``elmo-fp32``, ``elmo-int8``: the ``elmo`` component on seeded weights of ``original``'s architecture (2x4096_512,
  2 highways; speed does not depend on the weights), the component's defaults otherwise (token cache on).
  ``old-elmo-*``: the same from the checkout given by ``--old`` (its own ``spacy_elmo`` on ``PYTHONPATH``).
- ``trf-12``, ``trf-6``: ``curated_transformer`` with a RoBERTa encoder of roberta-base's shape (vocabulary 50,265,
  width 768, 12 heads, 3072 FFN; 12 or 6 layers), random weights (the cost is that of trained ones), strided spans
  (window 128, stride 96, as spacy-curated-transformers' RoBERTa configs), and a byte-BPE piece encoder whose
  vocabulary (12,000 pieces: ``benchmarks/data/bbpe_ud_12k``) was trained with HF ``tokenizers`` on UD-EWT train and
  a Gutenberg slice, so that it works offline; about 1.3 pieces per word on the text measured (reported).

Two measures on the first ``--sentences`` UD-EWT dev sentences (as text; spaCy's tokenizer splits them), each after
an untimed warm-up pass (which also fills ELMo's token cache): ``pipe``, ``nlp.pipe(texts, batch_size)`` (the
transformer's texts sorted by length, since it pads a batch to its longest text; ELMo's in file order, since it
groups by length itself), and ``call``, ``[nlp(t) for t in texts]``. Each pipeline runs in its own child process
per round, the order rotating each round; the report gives words/s (wall and process CPU) per round and the
per-round ratios ELMo / transformer, with their medians.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from common import ROOT, add_allow_load, header, load, load_sentences, quiet_machine, seeded_model

BPE = Path(__file__).resolve().parent / "data" / "bbpe_ud_12k"
ELMO = ("elmo-fp32", "elmo-int8")
TRANSFORMERS = {"trf-12": 12, "trf-6": 6}


def texts_of(n: int) -> List[str]:
    return [" ".join(words) for words in load_sentences("ud", "dev", limit=n)]


def transformer_nlp(layers: int):
    """``spacy.blank("en")`` with ``curated_transformer``: a roberta-base-shaped encoder of ``layers`` layers."""
    import spacy
    from spacy.training import Example
    from spacy_curated_transformers.tokenization.bbpe_encoder import build_byte_bpe_encoder_loader_v1

    nlp = spacy.blank("en")
    model = {"@architectures": "spacy-curated-transformers.RobertaTransformer.v1", "vocab_size": 50265,
             "num_hidden_layers": layers, "hidden_width": 768, "num_attention_heads": 12, "intermediate_width": 3072,
             "piece_encoder": {"@architectures": "spacy-curated-transformers.ByteBpeEncoder.v1"},
             "with_spans": {"@architectures": "spacy-curated-transformers.WithStridedSpans.v1", "stride": 96,
                            "window": 128}}
    pipe = nlp.add_pipe("curated_transformer", config={"model": model})
    sample = [Example(nlp.make_doc(t), nlp.make_doc(t)) for t in ("A first text .", "And a second one .")]
    loader = build_byte_bpe_encoder_loader_v1(vocab_path=BPE / "vocab.json", merges_path=BPE / "merges.txt")
    pipe.initialize(lambda: sample, nlp=nlp, piecer_loader=loader)
    return nlp


def pieces_per_word(nlp, texts: Sequence[str]) -> float:
    encoder = nlp.get_pipe("curated_transformer").model.get_ref("piece_encoder")
    docs = [nlp.make_doc(t) for t in texts]
    pieces = encoder.predict(docs)
    return sum(len(p.dataXd) - 2 for p in pieces) / sum(len(d) for d in docs)  # less <s> and </s>


def child(args: argparse.Namespace) -> None:
    """One pipeline, both measures (after a warm-up pass), as JSON: run by ``run`` once per pipeline and round."""
    import torch

    torch.set_num_threads(1)
    texts = texts_of(args.sentences)
    extra = {}
    if args.config in TRANSFORMERS:
        nlp = transformer_nlp(TRANSFORMERS[args.config])
        extra["pieces_per_word"] = pieces_per_word(nlp, texts)
        pipe_texts = sorted(texts, key=len)
    else:
        import warnings

        import spacy_elmo
        from speed import elmo_nlp

        warnings.simplefilter("ignore", spacy_elmo.TokenTruncationWarning)
        nlp = elmo_nlp((args.options, args.weights), args.config.split("-")[-1])
        if nlp is None:
            sys.exit(f"{spacy_elmo.__file__}: no 'elmo' component with a precision setting")
        extra["spacy_elmo"] = str(Path(spacy_elmo.__file__).parent)
        pipe_texts = texts
    words = sum(len(doc) for doc in nlp.pipe(pipe_texts, batch_size=args.batch_size))  # warm-up
    runs = {"pipe": lambda: list(nlp.pipe(pipe_texts, batch_size=args.batch_size)),
            "call": lambda: [nlp(t) for t in texts]}
    result: Dict[str, object] = {"config": args.config, "words": words, **extra}
    for name, run in runs.items():
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        run()
        result[name] = {"wall": words / (time.perf_counter() - start_wall),
                        "cpu": words / (time.process_time() - start_cpu)}
    print(json.dumps(result))


def run(args: argparse.Namespace) -> None:
    """Every pipeline in its own child process per round, the order rotating; words/s and ELMo / transformer."""
    header(sys.argv)
    configs = list(ELMO) + ([f"old-{c}" for c in ELMO] if args.old else []) + list(TRANSFORMERS)
    trees = {"new": Path(args.new).resolve(), "old": Path(args.old).resolve() if args.old else None}
    results: Dict[str, List[dict]] = {c: [] for c in configs}
    print(f"{args.sentences} UD-EWT dev sentences, batch size {args.batch_size}, {args.rounds} rounds; one child "
          f"process per pipeline and round, the order rotating each round\n", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        files = seeded_model(Path(tmp), "original")
        for round_ in range(args.rounds):
            shift = round_ % len(configs)
            for config in configs[shift:] + configs[:shift]:
                tree = trees["old" if config.startswith("old-") else "new"]
                env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{Path(__file__).resolve().parent}"}
                command = [sys.executable, __file__, "child", config.replace("old-", ""), "--options", str(files[0]),
                           "--weights", str(files[1]), "--sentences", str(args.sentences),
                           "--batch-size", str(args.batch_size)]
                done = subprocess.run(command, env=env, capture_output=True, text=True)
                if done.returncode:
                    sys.exit(f"{config} failed:\n{done.stderr[-3000:]}")
                r = json.loads(done.stdout.strip().splitlines()[-1])
                results[config].append(r)
                print(f"round {round_ + 1} {config:14} pipe {r['pipe']['wall']:8,.0f} words/s ({r['pipe']['cpu']:,.0f}"
                      f" per CPU-s), call {r['call']['wall']:8,.0f} ({r['call']['cpu']:,.0f}); load {load()}",
                      flush=True)
    first = results[configs[0]][0]
    print(f"\nwords: {first['words']}; pieces per word (byte-BPE, no <s> </s>): "
          f"{results['trf-12'][0]['pieces_per_word']:.3f}")
    for config in configs:
        for measure in ("pipe", "call"):
            for clock in ("wall", "cpu"):
                values = [r[measure][clock] for r in results[config]]
                print(f"{config:14} {measure} {clock:4}: median {statistics.median(values):8,.1f} words/s "
                      f"({', '.join(f'{v:,.0f}' for v in values)})")
    print("\nELMo / transformer, median of per-round ratios (range):")
    for elmo in [c for c in configs if "elmo" in c]:
        for trf in TRANSFORMERS:
            for measure in ("pipe", "call"):
                for clock in ("wall", "cpu"):
                    ratios = [e[measure][clock] / t[measure][clock] for e, t in zip(results[elmo], results[trf])]
                    print(f"{elmo:14} / {trf:6} {measure} {clock:4}: {statistics.median(ratios):.3f} "
                          f"({min(ratios):.3f}-{max(ratios):.3f})")
    print(f"\nload average after: {load()}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def profile(args: argparse.Namespace) -> None:
    """cProfile of ``[nlp(t) for t in texts]`` for ``elmo`` at ``--precision`` (after a warm-up pass): the top
    functions by own time."""
    import cProfile
    import pstats
    import warnings

    import torch

    import spacy_elmo
    from speed import elmo_nlp

    torch.set_num_threads(1)
    warnings.simplefilter("ignore", spacy_elmo.TokenTruncationWarning)
    header(sys.argv)
    texts = texts_of(args.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        nlp = elmo_nlp(tuple(map(str, seeded_model(Path(tmp), "original"))), args.precision)
        list(nlp.pipe(texts))
        profiler = cProfile.Profile()
        profiler.enable()
        for t in texts:
            nlp(t)
        profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)


def bpe(args: argparse.Namespace) -> None:
    """Train the byte-BPE vocabulary in ``benchmarks/data/bbpe_ud_12k`` again (needs HF ``tokenizers``, e.g.
    ``pip install --no-deps --target DIR tokenizers`` and ``PYTHONPATH=DIR``): UD-EWT train and the first 200,000
    lines of the Gutenberg sample's first shard, ``--vocab-size`` pieces with RoBERTa's special pieces."""
    import gzip
    import itertools

    from tokenizers import ByteLevelBPETokenizer

    from common import SHARED

    texts = [" ".join(words) for words in load_sentences("ud", "train")]
    with gzip.open(SHARED / "lm_gutenberg_en" / "train-00-of-08.txt.gz", "rt", encoding="utf-8") as f:
        texts += list(itertools.islice(f, 200_000))
    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(texts, vocab_size=args.vocab_size, min_frequency=2,
                                  special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
    Path(args.out).mkdir(parents=True, exist_ok=True)
    tokenizer.save_model(args.out)


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_allow_load(p)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help=run.__doc__)
    r.add_argument("--sentences", type=int, default=300)
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--batch-size", type=int, default=64)
    r.add_argument("--old", help="root of an older checkout (a git worktree) whose ELMo is measured too")
    r.add_argument("--new", default=str(ROOT), help="root of the checkout measured (default: this one)")
    r.add_argument("--json", help="write every round's figures here")
    r.set_defaults(function=run)
    c = sub.add_parser("child", help=argparse.SUPPRESS)
    c.add_argument("config", choices=list(ELMO) + list(TRANSFORMERS))
    c.add_argument("--options")
    c.add_argument("--weights")
    c.add_argument("--sentences", type=int, default=300)
    c.add_argument("--batch-size", type=int, default=64)
    c.set_defaults(function=child)
    f = sub.add_parser("profile", help=profile.__doc__)
    f.add_argument("--precision", default="int8")
    f.add_argument("--sentences", type=int, default=50)
    f.add_argument("--top", type=int, default=15)
    f.set_defaults(function=profile)
    b = sub.add_parser("bpe", help=bpe.__doc__)
    b.add_argument("--vocab-size", type=int, default=12000)
    b.add_argument("--out", default=str(BPE))
    b.set_defaults(function=bpe)
    args = p.parse_args(argv)
    with quiet_machine(args.allow_load) if args.function in (run, profile) else nullcontext():
        args.function(args)


if __name__ == "__main__":
    main()
