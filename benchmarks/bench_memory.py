"""Memory of a long-running ``nlp.pipe`` stream with the ``elmo`` component: RSS over 100,000 short Docs.

    nice python benchmarks/bench_memory.py                       # tiny AllenNLP fixture weights, both modes
    nice python benchmarks/bench_memory.py --preset tiny         # random weights, this project's tiny architecture
    nice python benchmarks/bench_memory.py --options O.json --weights W.hdf5 --docs 20000

Each mode runs in a fresh process: ``plain`` streams the Docs through ``nlp.pipe``; ``zone`` does the same
inside ``nlp.memory_zone()``, one zone per ``--zone-docs`` Docs, as a service would per request. Every Doc
has one token never seen before (an id), as user text does, so spaCy's string store grows without zones
(``--no-new-strings`` leaves it out).
The RSS (``VmRSS`` of /proc/self/status) is sampled every ``--every`` Docs; growth is counted from the
first sample, after the allocator has warmed up. Output: a Markdown table per mode.
"""
import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "data" / "elmo_fixture" / "allennlp"
WORDS = (
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
    raise RuntimeError("no VmRSS in /proc/self/status (this benchmark needs Linux)")


def texts(n: int, new_strings: bool, seed: int = 0) -> Iterator[str]:
    rng = random.Random(seed)
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 20))]
        if new_strings:
            words.insert(rng.randrange(len(words) + 1), f"id{i:07d}")
        yield " ".join(words) + " ."


def run_mode(args: argparse.Namespace) -> List[dict]:
    import spacy
    import torch

    torch.set_num_threads(args.threads)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"@architectures": "spacy_elmo.ElmoBiLm.v2", "options_file": args.options,
                                            "weight_file": args.weights}, "threads": None})
    nlp.initialize()
    stream = texts(args.docs, args.new_strings)
    samples: List[dict] = []
    done, start = 0, time.perf_counter()
    while done < args.docs:
        chunk = min(args.zone_docs, args.docs - done)
        with nlp.memory_zone() if args.mode == "zone" else nullcontext():
            for doc in nlp.pipe((next(stream) for _ in range(chunk)), batch_size=args.batch_size):
                assert doc._.elmo.shape[0] == len(doc)
                done += 1
                if done % args.every == 0:
                    samples.append({"docs": done, "rss_mb": round(rss_mb(), 1), "s": round(time.perf_counter() - start, 1)})
    return samples


def table(mode: str, samples: List[dict]) -> str:
    base = samples[0]["rss_mb"]
    rows = [f"| {s['docs']:,} | {s['rss_mb']:.0f} | {s['rss_mb'] - base:+.1f} | {s['s']:.0f} |" for s in samples]
    growth = samples[-1]["rss_mb"] - base
    peak = max(s["rss_mb"] for s in samples) - base
    head = f"**{mode}**: growth after the first sample {growth:+.1f} MB (peak {peak:+.1f} MB)\n\n"
    return head + "| docs | RSS MB | vs first | s |\n| ---: | ---: | ---: | ---: |\n" + "\n".join(rows)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--options", help="options.json (default: the tiny AllenNLP fixture)")
    parser.add_argument("--weights", help="weights .hdf5 (default: the tiny AllenNLP fixture)")
    parser.add_argument("--preset", help="instead of files: random weights of a preset architecture (tiny, small, ...)")
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=10_000, help="RSS sample interval, in Docs")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--zone-docs", type=int, default=1_000, help="Docs per memory zone (zone mode)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--mode", choices=["plain", "zone", "both"], default="both")
    parser.add_argument("--no-new-strings", dest="new_strings", action="store_false", help="no id token per Doc")
    args = parser.parse_args(argv)
    if args.mode != "both":
        print(json.dumps(run_mode(args)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        if args.preset:
            args.options, args.weights = random_model(args.preset, Path(tmp))
        elif args.options is None:
            args.options, args.weights = str(FIXTURE / "options.json"), str(FIXTURE / "lm_weights.hdf5")
        keys = ("options", "weights", "docs", "every", "batch_size", "zone_docs", "threads")
        common = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in keys] + ([] if args.new_strings else ["--no-new-strings"])
        for mode in ("plain", "zone"):
            out = subprocess.run([sys.executable, __file__, *common, f"--mode={mode}"], check=True, capture_output=True, text=True)
            print(table(mode, json.loads(out.stdout.strip().splitlines()[-1])) + "\n", flush=True)


def random_model(name: str, directory: Path) -> List[str]:
    """options.json + weights.hdf5 of a preset architecture with random weights (memory does not depend on them)."""
    import torch

    from spacy_elmo.model.bilm import BiLm
    from spacy_elmo.model.options import preset
    from spacy_elmo.formats.weights import save_files

    torch.manual_seed(0)
    paths = [directory / "options.json", directory / "weights.hdf5"]
    save_files(BiLm(preset(name)), *paths)
    return [str(p) for p in paths]


if __name__ == "__main__":
    main()
