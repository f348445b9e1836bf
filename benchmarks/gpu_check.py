"""GPU check of the ``elmo`` component (a few minutes on a machine with CUDA, torch-CUDA and cupy).

    python benchmarks/gpu_check.py [--options options.json --weights weights.hdf5]

Checks, failing with a message on the first problem:
1. after ``spacy.require_gpu()`` the biLM runs on CUDA, ``Doc._.elmo`` is CPU numpy, equal to the CPU run;
2. a listener NER trains a few steps on GPU (its mix weights are cupy arrays and move);
3. a pipeline saved on GPU loads in a CPU-only process with the same vectors, and loads back on GPU.
``--cpu`` runs the same steps without a GPU (to check the script itself).
Defaults: the reference fixture weights under ../shared, else the embedded model.
"""
import argparse
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import List, Optional

import numpy as np

FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "data" / "elmo_fixture" / "allennlp"
TEXTS = ["The cat sat on the mat .", "EU rejects German call to boycott British lamb .", "Short"]


def load_in_subprocess(path: Path, gpu: bool) -> np.ndarray:
    """Vectors of TEXTS from ``spacy.load(path)`` in a fresh process, on GPU or CPU only."""
    script = textwrap.dedent(
        f"""
        import sys, numpy as np, spacy
        if {gpu}:
            spacy.require_gpu()
        nlp = spacy.load({str(path)!r})
        module = nlp.get_pipe("elmo").model.shims[0].module
        assert module.encoder.device.type == {"cuda" if gpu else "cpu"!r}, module.encoder.device
        np.save(sys.stdout.buffer, np.stack([np.mean(d._.elmo, axis=0) for d in nlp.pipe({TEXTS!r})]))
        """
    )
    env = None if gpu else {"CUDA_VISIBLE_DEVICES": "", **_plain_env()}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, env=env, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"loading on {'GPU' if gpu else 'CPU'} failed:\n{result.stderr.decode()[-3000:]}")
    import io

    return np.load(io.BytesIO(result.stdout))


def _plain_env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--options")
    parser.add_argument("--weights")
    parser.add_argument("--cpu", action="store_true", help="run without a GPU (checks the script only)")
    args = parser.parse_args(argv)
    if args.options is None and (FIXTURE / "options.json").exists():
        args.options, args.weights = str(FIXTURE / "options.json"), str(FIXTURE / "lm_weights.hdf5")

    import spacy
    from spacy.tokens import Doc
    from spacy.training import Example

    config = {"options_file": args.options, "weight_file": args.weights, "initial_state": "zeros"}
    cpu_nlp = spacy.blank("en")
    cpu_nlp.add_pipe("elmo", config=config)
    cpu_vectors = np.stack([d._.elmo.mean(axis=0) for d in cpu_nlp.pipe(TEXTS)])

    if not args.cpu:
        try:
            spacy.require_gpu()
        except Exception as err:  # cupy or CUDA missing: say so, nothing else can be checked
            raise SystemExit(f"spacy.require_gpu() failed ({err}); install cupy for this CUDA and torch with CUDA")
    device = "cpu" if args.cpu else "cuda"

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=config)
    docs = list(nlp.pipe(TEXTS))
    module = nlp.get_pipe("elmo").model.shims[0].module
    assert module.encoder.device.type == device, f"biLM on {module.encoder.device}, expected {device}"
    assert all(type(d._.elmo) is np.ndarray for d in docs), "Doc._.elmo must be CPU numpy"
    gpu_vectors = np.stack([d._.elmo.mean(axis=0) for d in docs])
    np.testing.assert_allclose(gpu_vectors, cpu_vectors, atol=1e-4)
    print(f"1. inference on {device}: ok (max |gpu - cpu| = {np.abs(gpu_vectors - cpu_vectors).max():.2e})")

    nlp.add_pipe(
        "ner",
        config={"model": {"@architectures": "spacy.TransitionBasedParser.v2", "state_type": "ner", "hidden_width": 32,
                          "maxout_pieces": 2, "use_upper": True, "extra_state_tokens": False, "nO": None,
                          "tok2vec": {"@architectures": "spacy_elmo.ElmoListener.v1"}}},
    )
    words = TEXTS[1].split()
    example = Example(Doc(nlp.vocab, words=words), Doc(nlp.vocab, words=words, ents=["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]))
    optimizer = nlp.initialize(lambda: [example])
    for _ in range(5):
        losses = nlp.update([example], sgd=optimizer)
    (mix,) = [n for n in nlp.get_pipe("ner").model.walk() if n.name == "elmo_scalar_mix"]
    scalars = mix.get_param("scalars")
    assert type(scalars).__module__.startswith("cupy" if not args.cpu else "numpy"), type(scalars)
    assert float(abs(scalars).max()) > 0, "the listener's mix did not move"
    print(f"2. listener NER training on {device}: ok (loss {losses['ner']:.3f}, mix {scalars})")

    with tempfile.TemporaryDirectory() as tmp:
        nlp.to_disk(tmp)
        expected = np.stack([d._.elmo.mean(axis=0) for d in nlp.pipe(TEXTS)])
        on_cpu = load_in_subprocess(Path(tmp), gpu=False)
        np.testing.assert_allclose(on_cpu, expected, atol=1e-4)
        print("3a. saved on", device, "-> loaded on CPU: ok")
        if not args.cpu:
            cpu_path = Path(tmp) / "resaved"
            subprocess.run([sys.executable, "-c", f"import spacy; spacy.load({tmp!r}).to_disk({str(cpu_path)!r})"],
                           check=True, env={"CUDA_VISIBLE_DEVICES": "", **_plain_env()}, timeout=600)
            np.testing.assert_allclose(load_in_subprocess(cpu_path, gpu=True), expected, atol=1e-4)
            print("3b. saved on CPU -> loaded back on GPU: ok")
    print("all GPU checks passed" if not args.cpu else "all checks passed (CPU mode)")


if __name__ == "__main__":
    main()
