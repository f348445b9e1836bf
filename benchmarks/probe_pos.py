"""Linear POS probe on frozen ELMo layers (the paper's Table 6 method), on UD English-EWT.

A softmax regression (no hidden layer) is trained on each layer's vectors of the first
``--train-sentences`` training sentences and scored on the test set's UPOS tags: layer 0
(char CNN only), layer 1, layer 2 and the mean of all layers; and the same for an untrained
biLM of the same architecture (seeded random weights), which shows what pretraining adds.

    python benchmarks/probe_pos.py [--options O --weights W] [--train-sentences 3000]
"""
import argparse
import tempfile
import time
from pathlib import Path
from typing import List

import numpy as np
import torch

from bench_embed import UD, read_conllu_tagged
from untrained_bilm import write_untrained
from spacy_elmo import ElmoEmbedder
from spacy_elmo.default_model import default_model_files

def layer_features(embedder: ElmoEmbedder, sentences) -> np.ndarray:
    """``(n_layers + 1, n_tokens, dim)`` for all tokens of all sentences, in order."""
    return np.concatenate(embedder.embed_batch([w for w, _ in sentences]), axis=1)


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


def evaluate(embedder: ElmoEmbedder, train, test, tagset) -> List[float]:
    train_layers, test_layers = layer_features(embedder, train), layer_features(embedder, test)
    train_y = np.array([tagset.index(t) for _, tags in train for t in tags])
    test_y = np.array([tagset.index(t) if t in tagset else -1 for _, tags in test for t in tags])
    views = [(train_layers[k], test_layers[k]) for k in range(train_layers.shape[0])]
    views.append((train_layers.mean(0), test_layers.mean(0)))
    return [probe(a, train_y, b, test_y, len(tagset)) for a, b in views]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--options")
    parser.add_argument("--weights")
    parser.add_argument("--train-sentences", type=int, default=3000)
    parser.add_argument("--test-sentences", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    options_file, weight_file = (args.options, args.weights) if args.options else default_model_files()
    train = read_conllu_tagged(UD / "en_ewt-ud-train.conllu", limit=args.train_sentences)
    test = read_conllu_tagged(UD / "en_ewt-ud-test.conllu", limit=args.test_sentences)
    tagset = sorted({t for _, tags in train for t in tags})
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        untrained = write_untrained(Path(options_file), Path(tmp))
        rows = {
            "pretrained": evaluate(ElmoEmbedder(options_file, weight_file, initial_state="zeros"), train, test, tagset),
            "untrained (same architecture, random weights)": evaluate(
                ElmoEmbedder(*untrained, initial_state="zeros"), train, test, tagset
            ),
        }
    n_layers = len(next(iter(rows.values()))) - 1
    header = [f"layer {k}" for k in range(n_layers)] + ["mean of layers"]
    print(f"UD English-EWT UPOS linear probe: trained on {len(train)} train sentences "
          f"({sum(len(w) for w, _ in train)} tokens), tested on {len(test)} test sentences "
          f"({sum(len(w) for w, _ in test)} tokens); model {options_file}; {time.time() - start:.0f} s\n")
    print("| biLM | " + " | ".join(header) + " |")
    print("|---" * (len(header) + 1) + "|")
    for name, scores in rows.items():
        print(f"| {name} | " + " | ".join(f"{100 * s:.1f}" for s in scores) + " |")


if __name__ == "__main__":
    main()
