"""Continue the embedded English biLM's pretraining on a packed corpus sample, without spaCy (a lent GPU).

    python scripts/gpu_pretrain.py CONFIG OUTPUT_DIR [--section.key VALUE ...]

What ``python -m spacy_elmo pretrain`` does, for a machine without spaCy: the corpus must be pre-tokenized
(``--corpus.pretokenized true``; scripts/gpu_bundle.py writes it). VALUEs are JSON, else strings.
Exit status 130 after SIGTERM or Ctrl-C (checkpoint written), 1 on a config or data error.
"""
import json
import sys
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's spacy_elmo, spaCy or not


def parse_overrides(args: List[str]) -> Dict[str, Any]:
    """``["--a.b", "1", ...]`` to ``{"a.b": 1}``; a value that is not JSON stays a string."""
    if len(args) % 2 or not all(a.startswith("--") for a in args[::2]):
        raise SystemExit(f"✘ overrides come as --section.key VALUE pairs; got {' '.join(args)}")
    overrides = {}
    for key, value in zip(args[::2], args[1::2]):
        try:
            overrides[key[2:]] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key[2:]] = value
    return overrides


def main(argv: List[str]) -> int:
    """Train as the config and overrides say; returns the exit status."""
    if len(argv) < 2:
        raise SystemExit("usage: python scripts/gpu_pretrain.py CONFIG OUTPUT_DIR [--section.key VALUE ...]")
    from spacy_elmo.errors import ElmoError
    from spacy_elmo.pretrain.config import load_config
    from spacy_elmo.pretrain.trainer import Trainer

    try:
        config, raw = load_config(argv[0], parse_overrides(argv[2:]))
        result = Trainer(config, raw, Path(argv[1])).run(progress=False)
    except ElmoError as err:
        print(f"✘ {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"stopped: checkpoint saved in {argv[1]}", file=sys.stderr)
        return 130
    print(f"done: {result['step']} steps, {result['tokens_seen']:,} tokens; held-out {result['eval']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
