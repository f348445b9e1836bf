"""Prepare what travels to a lent GPU machine beside the tracked tree: a packed corpus sample and wheels.

    python scripts/gpu_bundle.py [--train-mib 30] [--dev-lines 1000] [--wheels] [--source DIR] [--out gpu_bundle]

``OUT/corpus/``: the first lines of each Gutenberg training shard (``--train-mib`` MiB gzipped in all) and of
the held-out text, tokenized here by spaCy's English tokenizer and written as tokens joined by spaces, so that
the lent machine (no spaCy) trains on the same tokens (``[corpus] pretokenized``). ``OUT/wheels/``
(``--wheels``, needs pip and the network): the packages the pretraining path imports that the lent machine
lacks (WHEELS, the versions installed here). Prints the MiB that would travel from a clean clone (the files git
tracks, plus OUT) and fails over the 64 MiB a lent machine accepts; untracked files that git does not ignore
travel too, so their MiB are named apart, as a warning (commit, ignore or remove them). OUT is git-ignored;
name it in the device call's ``carry``.
"""
import argparse
import gzip
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "data" / "lm_gutenberg_en"
LIMIT_MIB = 64
# What spacy_elmo.pretrain imports beyond torch, numpy, h5py and tqdm (tests/test_gpu_dry_run.py checks it).
WHEELS = ("confection", "pydantic", "pydantic_core", "annotated_types", "typing_inspection")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def pack(source: Path, target: Path, max_bytes: int, max_lines: Optional[int] = None) -> int:
    """Tokenize the first lines of ``source`` into gzipped ``target`` until ``max_bytes`` (compressed) or ``max_lines``."""
    from spacy_elmo.util.text import make_tokenizer, open_text

    tokenize = make_tokenizer("en")
    lines = 0
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "wb") as raw, gzip.open(raw, "wt", encoding="utf-8") as out, open_text(source) as text:
        for line in text:
            tokens = tokenize(line.strip())
            if tokens:
                out.write(" ".join(tokens) + "\n")
                lines += 1
            if lines == max_lines or (lines % 1000 == 0 and raw.tell() >= max_bytes):
                break
    tmp.replace(target)
    return lines


def download_wheels(target: Path) -> List[Path]:
    """Wheels of WHEELS (the versions installed here) for the lent machine's CPython 3.12 on x86-64 Linux."""
    target.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={version(name)}" for name in WHEELS]
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
               "3.12", "--implementation", "cp", *platforms, "-d", str(target), *pins]
    if subprocess.run(command).returncode != 0:
        raise SystemExit(f"✘ pip could not download {' '.join(pins)}; check the network, or copy the wheels into {target}")
    return sorted(target.glob("*.whl"))


def listed_bytes(root: Path, *options: str) -> int:
    """Bytes of the files ``git ls-files OPTIONS`` lists in the checkout ``root`` (a listed file deleted from the
    working tree counts nothing)."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", *options],
                            capture_output=True, check=True).stdout.decode().split("\0")
    return sum((root / name).stat().st_size for name in listed if name and (root / name).is_file())


def travel_bytes(root: Path, extra: Path) -> int:
    """Bytes a device call sends from a clean clone at ``root``: the files git tracks, plus the folder ``extra``.
    Untracked and ignored files are left out, so the figure does not grow with what earlier runs left in the tree."""
    return listed_bytes(root) + sum(p.stat().st_size for p in extra.rglob("*") if p.is_file())


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-mib", type=float, default=30.0, help="gzipped training text, all shards together")
    parser.add_argument("--dev-lines", type=int, default=1000, help="held-out sentences")
    parser.add_argument("--wheels", action="store_true", help="also download the wheels the lent machine lacks")
    parser.add_argument("--source", type=Path, default=SOURCE, help="folder of train-*.txt.gz and heldout.txt.gz")
    parser.add_argument("--out", type=Path, default=ROOT / "gpu_bundle")
    args = parser.parse_args(argv)
    shards = sorted(args.source.glob("train-*.txt.gz"))
    if not shards or not (args.source / "heldout.txt.gz").exists():
        raise SystemExit(f"✘ {args.source} holds no train-*.txt.gz and heldout.txt.gz: give --source")
    corpus = args.out / "corpus"
    shutil.rmtree(corpus, ignore_errors=True)
    corpus.mkdir(parents=True)
    per_shard = int(args.train_mib * 2**20 / len(shards))
    lines = sum(pack(shard, corpus / shard.name, per_shard) for shard in shards)
    dev = pack(args.source / "heldout.txt.gz", corpus / "heldout.txt.gz", 2**40, args.dev_lines)
    print(f"corpus: {lines:,} training lines in {len(shards)} files, {dev:,} held-out lines -> {corpus}")
    if args.wheels:
        print(f"wheels: {', '.join(p.name for p in download_wheels(args.out / 'wheels'))}")
    mib = travel_bytes(ROOT, args.out) / 2**20
    print(f"would travel: {mib:.1f} MiB (limit {LIMIT_MIB})")
    untracked = listed_bytes(ROOT, "-o", "--exclude-standard") / 2**20
    if untracked >= 0.1:
        print(f"⚠ {untracked:.1f} MiB of untracked files that git does not ignore would travel too: commit, ignore or remove them")
    if mib > LIMIT_MIB:
        raise SystemExit(f"✘ {mib:.1f} MiB would travel, over the {LIMIT_MIB} MiB limit: lower --train-mib")


if __name__ == "__main__":
    main()
