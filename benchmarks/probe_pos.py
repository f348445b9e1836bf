"""Linear POS probe on frozen ELMo layers (the paper's Table 6 method), on UD English-EWT.

A softmax regression (no hidden layer) is trained on the vectors of the first ``--train-sentences``
training sentences and scored on the test set's UPOS tags, for: the default ``Token._.elmo`` (what
``nlp.add_pipe("elmo")`` stores: the ``"average"`` mix, i.e. the mean of the layers), layer 0 (char CNN
only), each LSTM layer, and the other mixes of ``benchmarks/layer_mixes.py`` (the weights that scale the layers
come from the training tokens; the centred mixes are left out, since the probe standardises every feature, which
undoes a constant shift); and the same for an untrained biLM of the same architecture (seeded
random weights), which shows what pretraining adds. The treebank's words go through the ``elmo``
component as pre-tokenised Docs, one Doc per sentence.

    python benchmarks/probe_pos.py [--options O --weights W] [--train-sentences 3000] [--seed 0]
"""
import argparse
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from bench_embed import UD, read_conllu_tagged
from elmo_vectors import elmo_docs_from_words, elmo_pipeline, stacked_vectors
from layer_mixes import DEFAULT_VIEW, layer_mixes, mean_layer_norms
from untrained_bilm import write_untrained
from spacy_elmo.sources.resolve import default_model_files

def token_views(nlp, train, test) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """Train and test vectors of every token, in order, by representation."""
    train_default, train_layers = stacked_vectors(elmo_docs_from_words(nlp, [w for w, _ in train]))
    test_default, test_layers = stacked_vectors(elmo_docs_from_words(nlp, [w for w, _ in test]))
    norms = mean_layer_norms(train_layers)
    test_mixes = layer_mixes(test_layers, norms)
    views = {DEFAULT_VIEW: (train_default, test_default)}
    views.update((name, (x, test_mixes[name])) for name, x in layer_mixes(train_layers, norms).items())
    return views


def probe(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray, n_classes: int) -> float:
    """Test accuracy of an L2-regularised softmax regression fitted with L-BFGS."""
    mean, std = train_x.mean(0), train_x.std(0) + 1e-6
    x = torch.from_numpy((train_x - mean) / std)
    y = torch.from_numpy(train_y)
    linear = torch.nn.Linear(x.shape[1], n_classes)
    optimizer = torch.optim.LBFGS(linear.parameters(), max_iter=300, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(linear(x), y) + 1e-4 * linear.weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        predicted = linear(torch.from_numpy((test_x - mean) / std)).argmax(1).numpy()
    return float((predicted == test_y).mean())


def evaluate(options_file: Optional[str], weight_file: Optional[str], train, test, tagset) -> Dict[str, float]:
    """Probe accuracy of each representation of the biLM's vectors."""
    train_y = np.array([tagset.index(t) for _, tags in train for t in tags])
    test_y = np.array([tagset.index(t) if t in tagset else -1 for _, tags in test for t in tags])
    views = token_views(elmo_pipeline(options_file, weight_file), train, test)
    return {name: probe(a, train_y, b, test_y, len(tagset)) for name, (a, b) in views.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--options")
    parser.add_argument("--weights")
    parser.add_argument("--train-sentences", type=int, default=3000)
    parser.add_argument("--test-sentences", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0, help="seed of the untrained control's weights")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if (args.options is None) != (args.weights is None):
        parser.error("give both --options and --weights, or neither (the embedded English model)")
    train = read_conllu_tagged(UD / "en_ewt-ud-train.conllu", limit=args.train_sentences)
    test = read_conllu_tagged(UD / "en_ewt-ud-test.conllu", limit=args.test_sentences)
    tagset = sorted({t for _, tags in train for t in tags})
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        untrained = write_untrained(Path(args.options or default_model_files()[0]), Path(tmp), seed=args.seed)
        rows = {
            "pretrained": evaluate(args.options, args.weights, train, test, tagset),
            f"untrained (same architecture, random weights, seed {args.seed})": evaluate(*map(str, untrained), train, test, tagset),
        }
    print(f"UD English-EWT UPOS linear probe: trained on {len(train)} train sentences "
          f"({sum(len(w) for w, _ in train)} tokens), tested on {len(test)} test sentences "
          f"({sum(len(w) for w, _ in test)} tokens); model {args.options or 'the embedded English model'}; "
          f"{time.time() - start:.0f} s, {args.threads} thread(s)\n")
    print("| representation | " + " | ".join(rows) + " |")
    print("| --- |" + " ---: |" * len(rows))
    for view in next(iter(rows.values())):
        print(f"| {view} | " + " | ".join(f"{100 * scores[view]:.1f}" for scores in rows.values()) + " |")


if __name__ == "__main__":
    main()
