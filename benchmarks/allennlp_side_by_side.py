"""AllenNLP 2.10.1's ``Elmo`` and ``spacy_elmo.allennlp.Elmo`` side by side: the same vectors and gradients, and
the time of inference (eval, no grad) and of a fine-tuning pass (``requires_grad=True``, forward + backward).

``allennlp`` is not a dependency (it pins torch < 1.13 and transformers < 4.21). Its ``Elmo`` runs on this checkout's
torch in a venv that sees it, with AllenNLP's imports met and torchvision, which only AllenNLP's vision modules use,
an empty stand-in:

    python -m venv --system-site-packages /tmp/allennlp-venv
    /tmp/allennlp-venv/bin/pip install --no-deps allennlp==2.10.1
    /tmp/allennlp-venv/bin/pip install transformers==4.40.2 huggingface-hub==0.23.5 cached-path lmdb dill base58 \
        more-itertools fairscale
    site=$(/tmp/allennlp-venv/bin/python -c "import sysconfig; print(sysconfig.get_path('purelib'))")
    mkdir -p $site/torchvision/ops && touch $site/torchvision/__init__.py $site/torchvision/ops/{__init__,boxes}.py

The model is a published architecture (``--preset``, small by default) with seeded random weights
(``common.seeded_model``); the text is the UD English EWT dev sentences of 5-40 tokens, in batches of ``--batch``.
Both modules carry state from batch to batch (the default of both) and see the same batches in the same order, so
their vectors must agree to float32 rounding all along. Each timing is the best of ``--passes`` passes over all
batches, each pass from a reset state.

    /tmp/allennlp-venv/bin/python benchmarks/allennlp_side_by_side.py --sentences 200 --batch 32 --threads 1
"""
import argparse
import functools
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from allennlp.modules.elmo import Elmo as AllenNlpElmo, batch_to_ids as allennlp_batch_to_ids  # noqa: E402
from common import add_allow_load, best_time, load, load_sentences, machine, quiet_machine, seeded_model  # noqa: E402

from spacy_elmo.allennlp import Elmo, batch_to_ids  # noqa: E402

ODD_TOKENS = [["", "é", "中文" * 9, "x" * 60, "<S>", "</S>", "\x00", "🙂🙂"]]


def run(elmo: torch.nn.Module, batches: Sequence[torch.Tensor], train: bool) -> List[torch.Tensor]:
    """All batches through ``elmo`` from a reset state: the representations, and with ``train`` a backward pass of
    each batch's squared sum (no optimizer step: the weights stay as loaded)."""
    if isinstance(elmo, Elmo):
        elmo.reset_states()
    else:  # AllenNLP's Elmo keeps the state in its biLM's LSTM
        elmo._elmo_lstm._elmo_lstm.reset_states()
    elmo.zero_grad()
    outputs = []
    for ids in batches:
        with torch.set_grad_enabled(train):
            output = elmo(ids)["elmo_representations"]
        if train:
            sum(r.pow(2).sum() for r in output).backward()
        outputs.extend(r.detach() for r in output)
    return outputs


def grads(elmo: torch.nn.Module) -> List[torch.Tensor]:
    """Gradients of the scalar mixes, of the char embeddings and of the token projection (the last two reached
    through both LSTM stacks), laid out alike for both modules."""
    params = dict(elmo.named_parameters())
    mixes = torch.cat([p.grad.flatten() for name, p in sorted(params.items()) if name.startswith("scalar_mix")])
    if "_elmo_lstm.encoder.bilm.w_proj" in params:
        bilm = elmo._elmo_lstm.encoder.bilm
        return [mixes, bilm.char_cnn.embedding.weight.grad, bilm.w_proj.grad]
    embedder = elmo._elmo_lstm._token_embedder
    return [mixes, embedder._char_embedding_weights.grad, embedder._projection.weight.grad.T]


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--preset", default="small", choices=["small", "medium", "original"])
    add_allow_load(parser)
    args = parser.parse_args(argv)
    with quiet_machine(args.allow_load):
        report(args)


def report(args: argparse.Namespace) -> None:
    """Time both modules' passes and print the table."""
    torch.set_num_threads(args.threads)
    load_before = load()
    sentences = load_sentences("ud", "dev", 5, 40, limit=args.sentences)
    words = sum(len(s) for s in sentences)
    for batch in (sentences[:50], ODD_TOKENS):
        assert torch.equal(batch_to_ids(batch), allennlp_batch_to_ids(batch)), "batch_to_ids differs"
    batches = [batch_to_ids(sentences[i : i + args.batch]) for i in range(0, len(sentences), args.batch)]
    with tempfile.TemporaryDirectory() as folder:
        files = seeded_model(Path(folder), args.preset, seed=0)
        rows = []
        results = {}
        for train in (False, True):
            for name, cls in (("allennlp 2.10.1", AllenNlpElmo), ("spacy_elmo.allennlp", Elmo)):
                elmo = cls(*map(str, files), 2, requires_grad=train, do_layer_norm=True, dropout=0.0)
                elmo.train(train)
                seconds, _, outputs = best_time(functools.partial(run, elmo, batches, train), args.passes)
                results[name, train] = outputs, grads(elmo) if train else None
                rows.append((name, "fine-tuning pass" if train else "inference", words / seconds))
    print(f"{machine()}; {args.threads} thread(s); load before {load_before}, after {load()}")
    print(f"{len(sentences)} sentences, {words} words, batches of {args.batch}, preset {args.preset}, layer norm on")
    for train in (False, True):
        ours, theirs = results["spacy_elmo.allennlp", train], results["allennlp 2.10.1", train]
        diff = max(float((a - b).abs().max()) for a, b in zip(ours[0], theirs[0]))
        scale = max(float(b.abs().max()) for b in theirs[0])
        line = f"{'fine-tuning' if train else 'inference'}: max abs diff of the vectors {diff:.2e} (largest {scale:.2f})"
        if train:
            relative = [float((a - b).abs().max() / b.abs().max()) for a, b in zip(ours[1], theirs[1])]
            line += "; gradients' max abs diff / max abs: scalar mixes {:.1e}, char embeddings {:.1e}, token projection {:.1e}".format(*relative)
        print(line)
    print("\n| module | pass | words/s | vs allennlp |\n| --- | --- | --- | --- |")
    for name, kind, rate in rows:
        reference = next(r for n, k, r in rows if k == kind and n.startswith("allennlp"))
        print(f"| {name} | {kind} | {rate:,.0f} | {rate / reference:.2f}x |")


if __name__ == "__main__":
    main()
