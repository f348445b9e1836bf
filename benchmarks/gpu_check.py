"""GPU check of the ``elmo`` component (a few minutes on a machine with CUDA, torch-CUDA and cupy).

    python benchmarks/gpu_check.py [--options options.json --weights weights.hdf5]

Checks, failing with a message on the first problem:
0. torch alone (no spaCy needed): the biLM on CUDA gives the CPU's vectors, and a bf16 step of its language
   model trains there (loss finite, weights move);
1. after ``spacy.require_gpu()`` the biLM runs on CUDA, ``Doc._.elmo`` is CPU numpy, equal to the CPU run;
2. a listener NER trains a few steps on GPU (its mix weights are cupy arrays and move), and at prediction reads
   the layers as cupy arrays, on the device the biLM made them on;
3. a pipeline saved on GPU loads in a CPU-only process with the same vectors, and loads back on GPU.
Checks 1-3 need spaCy (and cupy); where spaCy is not installed (a lent machine) they are reported as not run.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's spacy_elmo, spaCy or not
FIXTURE = ROOT.parent / "shared" / "data" / "elmo_fixture" / "allennlp"
EMBEDDED = ROOT / "spacy_elmo" / "data" / "en_gutenberg_tiny"
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


def check_torch(options: str, weights: str, device: str) -> None:
    """Check 0: the biLM's vectors on ``device`` equal the CPU's; one bf16 language-model step trains there."""
    import torch

    from spacy_elmo.pretrain.language_model import BiLanguageModel
    from spacy_elmo.pretrain.vocab import SPECIALS, Vocab
    from spacy_elmo.formats.weights import load_files
    from spacy_elmo.runtime import BiLmSettings, ElmoRuntime

    sentences = [text.split() for text in TEXTS]
    settings = BiLmSettings(options, weights, initial_state="zeros")
    cpu = ElmoRuntime.load(settings, "cpu").layers(sentences)
    moved = ElmoRuntime.load(settings, device).layers(sentences)
    gap = max(float(np.abs(a - b).max()) for a, b in zip(cpu, moved))
    assert gap < 1e-4, f"biLM vectors on {device} differ from the CPU's by {gap:.2e}"
    bilm = load_files(options, weights)
    vocab = Vocab([*SPECIALS, *sorted({w for s in sentences for w in s})])
    model = BiLanguageModel(bilm.options, vocab, [2], 4.0, 0.0)
    model.bilm.load_state_dict(bilm.state_dict())
    model.to(device)
    before = model.bilm.w_proj.detach().clone()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(sentences).mean
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss), f"bf16 loss on {device} is {loss.item()}"
    assert not torch.equal(before, model.bilm.w_proj.detach()), "the bf16 step changed no weight"
    print(f"0. torch on {device}: ok (max |{device} - cpu| = {gap:.2e}; bf16 LM step, loss {loss.item():.3f})")


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--options")
    parser.add_argument("--weights")
    parser.add_argument("--cpu", action="store_true", help="run without a GPU (checks the script only)")
    args = parser.parse_args(argv)
    if args.options is None:
        folder, name = (FIXTURE, "lm_weights.hdf5") if (FIXTURE / "options.json").exists() else (EMBEDDED, "weights.hdf5")
        args.options, args.weights = str(folder / "options.json"), str(folder / name)
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("torch sees no CUDA device: run on a GPU machine, or give --cpu to check the script")
    check_torch(args.options, args.weights, device)
    try:
        import spacy
    except ImportError:
        print("checks 1-3 not run: spaCy is not installed here (torch-level check 0 passed)")
        return
    from spacy.tokens import Doc
    from spacy.training import Example

    config = {"model": {"@architectures": "spacy_elmo.ElmoBiLm.v2", "options_file": args.options,
                        "weight_file": args.weights, "initial_state": "zeros"}}
    cpu_nlp = spacy.blank("en")
    cpu_nlp.add_pipe("elmo", config=config)
    cpu_vectors = np.stack([d._.elmo.mean(axis=0) for d in cpu_nlp.pipe(TEXTS)])

    if not args.cpu:
        try:
            spacy.require_gpu()
        except Exception as err:  # cupy or CUDA missing: say so, nothing else can be checked
            raise SystemExit(f"spacy.require_gpu() failed ({err}); install cupy for this CUDA and torch with CUDA")

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
    doc = nlp.get_pipe("elmo")(nlp.make_doc(TEXTS[0]))
    (listener,) = [n for n in nlp.get_pipe("ner").model.walk() if n.name == "elmo-listener"]
    (read,) = listener.predict([doc])
    assert type(read).__module__.startswith("cupy" if not args.cpu else "numpy"), type(read)
    print(f"2b. the listener reads the layers where the biLM made them ({type(read).__module__})")

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
