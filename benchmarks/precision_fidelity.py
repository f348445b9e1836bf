"""How close each reduced precision stays to fp32, per layer: mean and 1st-percentile cosine per token, max abs diff.

Models: AllenNLP's test fixture, the embedded English model, and seeded random weights of the published ``small`` and
``original`` architectures (as ``bench_embed.py`` makes them). Text: UD English-EWT dev sentences of 5-40 tokens.
Each precision runs all the parts its setting runs (``PRECISION_PARTS``); ``--parts`` instead reports each part
alone, which is how the parts were chosen. bf16 is measured through the model-level switch, which skips the check
that refuses it on CPUs without native bf16 (there it is emulated and slow, but its numbers are the same).

    python benchmarks/precision_fidelity.py --sentences 200
    python benchmarks/precision_fidelity.py --models embedded --parts
"""
import argparse
import sys
import tempfile
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_embed import UD, _cpu_model, make_model, read_conllu  # noqa: E402

from spacy_elmo import ElmoEmbedder  # noqa: E402
from spacy_elmo.model.bilm import PARTS, PRECISION_PARTS  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "elmo" / "allennlp"


def layer_fidelity(reference: Sequence[np.ndarray], result: Sequence[np.ndarray]) -> List[Tuple[float, float, float]]:
    """Per layer: mean and 1st-percentile cosine per token to ``reference``, and the max abs difference."""
    out = []
    for layer in range(reference[0].shape[0]):
        x = np.concatenate([r[layer] for r in reference])
        y = np.concatenate([r[layer] for r in result])
        cos = (x * y).sum(1) / np.maximum(np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1), 1e-30)
        out.append((float(cos.mean()), float(np.percentile(cos, 1)), float(np.abs(x - y).max())))
    return out


def model_files(name: str, directory: Path) -> Tuple[Optional[Path], Optional[Path]]:
    if name == "allennlp":
        return FIXTURE / "options.json", FIXTURE / "lm_weights.hdf5"
    if name == "embedded":
        return None, None
    return make_model(directory, 0, name)


def settings(parts_alone: bool, precisions: Sequence[str]) -> Iterator[Tuple[str, Tuple[str, ...], str]]:
    """(precision, parts, label) to measure."""
    for precision in precisions:
        if parts_alone:
            for part in PARTS:
                yield precision, (part,), part
        else:
            yield precision, PRECISION_PARTS[precision], "as set"


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="allennlp,embedded,small,original")
    parser.add_argument("--precision", default="int8,bf16")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--parts", action="store_true", help="each part alone at each precision")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    text = read_conllu(UD / "en_ewt-ud-dev.conllu", 5, 40, args.sentences)
    print(f"command: python {' '.join(sys.argv)}\nmachine: {_cpu_model()}")
    print(f"text: {len(text)} UD-EWT dev sentences, {sum(map(len, text))} words\n")
    print("| model | precision | parts | layer | cosine mean | cosine 1st pct | max abs diff |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            embedder = ElmoEmbedder(*model_files(name, Path(tmp)), initial_state="zeros")
            reference = embedder.embed_batch(text)
            for precision, parts, label in settings(args.parts, args.precision.split(",")):
                embedder.encoder.bilm.set_precision(precision, parts)
                embedder.encoder.weights_changed()
                for layer, (mean, p1, diff) in enumerate(layer_fidelity(reference, embedder.embed_batch(text))):
                    print(f"| {name} | {precision} | {label} | {layer} | {mean:.5f} | {p1:.4f} | {diff:.3f} |", flush=True)
            embedder.encoder.bilm.set_precision("fp32")


if __name__ == "__main__":
    main()
