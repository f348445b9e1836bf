"""Rebuild the bundled sample in assets/sample/ from the full, openly licensed (CC BY-SA 4.0) corpora.

    python scripts/make_sample.py [--shared ../shared/data] [--out assets/sample]

Only UD English-EWT and UNER English-EWT are used: both are CC BY-SA 4.0, so a sample may be redistributed with
attribution (assets/sample/README.md, LICENSE.txt). CoNLL-2003, SST and Weibo are research-only and are never
sampled here. Sentences are taken at a fixed stride (every genre of EWT is represented); they are copied
unchanged except that ``# newdoc`` / ``# newpar`` comment lines are dropped.
"""
import argparse
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[1]

# (source file, output file, number of sentences, offset); the stride is len(source) // n.
UD_PLAN = [
    ("en_ewt-ud-train.conllu", "train.conllu", 400, 0),
    ("en_ewt-ud-dev.conllu", "dev.conllu", 100, 0),
    ("en_ewt-ud-test.conllu", "test.conllu", 100, 0),
]
# UNER has no train file here: its dev sentences train the sample, its test sentences are split into dev/test.
UNER_PLAN = [
    ("en_ewt-ud-dev.iob2", "train.iob2", 400, 0),
    ("en_ewt-ud-test.iob2", "dev.iob2", 100, 0),
    ("en_ewt-ud-test.iob2", "test.iob2", 100, 10),
]


def blocks(path: Path) -> List[List[str]]:
    """Blank-line separated sentence blocks, without ``# newdoc`` / ``# newpar`` lines."""
    out, block = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            if block:
                out.append(block)
            block = []
        elif not line.startswith(("# newdoc", "# newpar")):
            block.append(line)
    if block:
        out.append(block)
    return out


def take(items: list, n: int, offset: int) -> list:
    stride = len(items) // n
    if stride < 1 or offset >= stride:
        raise ValueError(f"can't take {n} items at offset {offset} from {len(items)}")
    return [items[i * stride + offset] for i in range(n)]


def write(src_dir: Path, out_dir: Path, plan) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for src, dest, n, offset in plan:
        chosen = take(blocks(src_dir / src), n, offset)
        text = "".join("\n".join(block) + "\n\n" for block in chosen)
        (out_dir / dest).write_text(text, encoding="utf-8")
        print(f"{out_dir / dest}: {len(chosen)} sentences from {src}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=ROOT / "assets" / "sample")
    args = parser.parse_args()
    write(args.shared / "ud_english_ewt", args.out / "ud_english_ewt", UD_PLAN)
    write(args.shared / "uner_english_ewt", args.out / "uner_english_ewt", UNER_PLAN)


if __name__ == "__main__":
    main()
