"""Write a biLM with a model's architecture but seeded random weights: the control for "does pretraining help?".

    python benchmarks/untrained_bilm.py OUT_DIR                    # architecture of the embedded English model
    python benchmarks/untrained_bilm.py OUT_DIR --lang zh          # ... of the embedded Chinese model
    python benchmarks/untrained_bilm.py OUT_DIR --options options.json --seed 1

OUT_DIR gets ``options.json`` + ``weights.hdf5`` in the AllenNLP layout, usable wherever the trained files are
(``--paths.elmo_options/--paths.elmo_weights`` of a training config, ``ElmoEmbedder``). A downstream score that
the untrained files match was not earned by language-model pretraining.
"""
import argparse
from pathlib import Path
from typing import Optional, Tuple

import torch

from spacy_elmo.sources.resolve import default_model_files
from spacy_elmo.model.bilm import BiLm
from spacy_elmo.model.options import ElmoOptions
from spacy_elmo.formats.weights import save_files


def write_untrained(options_file: Path, out_dir: Path, seed: int = 0) -> Tuple[Path, Path]:
    """Save a freshly initialised biLM (``torch.manual_seed(seed)``) with the options of ``options_file``."""
    torch.manual_seed(seed)
    files = out_dir / "options.json", out_dir / "weights.hdf5"
    save_files(BiLm(ElmoOptions.from_file(options_file)), *files)
    return files


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--options", type=Path, help="options.json of the architecture (default: an embedded model's)")
    parser.add_argument("--lang", default="en", help="embedded model whose architecture to copy (en, zh)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    options_file = args.options or default_model_files(args.lang)[0]
    for path in write_untrained(options_file, args.out_dir, args.seed):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
