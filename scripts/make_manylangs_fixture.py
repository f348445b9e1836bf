"""Make tests/data/manylangs_tiny: an ELMoForManyLangs model with random weights, built and run by that package.

Writes the model folder (config.json, the architecture JSON, char.dic, word.dic, token_embedder.pkl,
encoder.pkl, saved as their ``Model.load_model`` reads them) and ``expected.npz``: the vectors their
``Embedder.sents2elmo(..., output_layer=-2)`` computes for :data:`SENTENCES`, one batch, on a fresh
Embedder (their encoder is stateful, so only the first batch starts from zero states).

Needs the ``elmoformanylangs`` package, which does not import with the newest ``overrides``:

    python -m venv --system-site-packages /tmp/emfl
    /tmp/emfl/bin/pip install -c constraints.txt torch==2.13.0 elmoformanylangs==0.0.4.post2 overrides==3.1.0
    OMP_NUM_THREADS=1 /tmp/emfl/bin/python scripts/make_manylangs_fixture.py tests/data/manylangs_tiny
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch

# Tiny dimensions; a short max_characters_per_token so that truncation is exercised.
ARCHITECTURE = {
    "encoder": {"name": "elmo", "projection_dim": 8, "cell_clip": 3, "proj_clip": 3, "dim": 12, "n_layers": 2},
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 4], [2, 4], [3, 8]],
        "n_highway": 2,
        "word_dim": 6,
        "char_dim": 5,
        "max_characters_per_token": 9,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 8},
    "dropout": 0.1,
}
SPECIALS = ["<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"]
# U+3000 is written as a line whose entry strip() removes, as in the published Chinese lexicons.
CHARACTERS = list("abcdeilmnorstuvw.,") + ["é", "中", "文", "\u3000"]
WORDS = ["the", "cat", "sat", "on", "mat", ".", "中文", "naïve"]
SENTENCES = [
    ["the", "cat", "sat", "on", "the", "mat", "."],
    ["a", "dog", "!"],  # unknown words; "g", "!" unknown characters
    ["中文", "naïve", "é\u3000", "extraordinarily"],  # an unknown char in a known word; a token cut to 7 chars
    ["cat"],
    ["<bos>", "mat"],  # their sentence marker written as text
]


def write_lexicon(path: Path, entries) -> None:
    path.write_text("".join(f"{e}\t{i}\n" for i, e in enumerate(entries)), encoding="utf-8")


def main(out: Path) -> None:
    from elmoformanylangs import Embedder
    from elmoformanylangs.frontend import Model
    from elmoformanylangs.modules.embedding_layer import EmbeddingLayer

    torch.manual_seed(13)
    out.mkdir(parents=True, exist_ok=True)
    (out / "arch.json").write_text(json.dumps(ARCHITECTURE, indent=1), encoding="utf-8")
    (out / "config.json").write_text(json.dumps({"config_path": "arch.json"}), encoding="utf-8")
    chars = SPECIALS + CHARACTERS
    words = SPECIALS[:4] + WORDS
    write_lexicon(out / "char.dic", chars)
    write_lexicon(out / "word.dic", words)
    te = ARCHITECTURE["token_embedder"]
    char_layer = EmbeddingLayer(te["char_dim"], {c: i for i, c in enumerate(chars)}, fix_emb=False)
    word_layer = EmbeddingLayer(te["word_dim"], {w: i for i, w in enumerate(words)}, fix_emb=False)
    model = Model(ARCHITECTURE, word_layer, char_layer, use_cuda=False)
    with torch.no_grad():  # their initialisation leaves many biases at 0 or 1: randomise every weight
        for param in model.parameters():
            param.copy_(torch.randn_like(param) * 0.5)
    torch.save(model.token_embedder.state_dict(), out / "token_embedder.pkl")
    torch.save(model.encoder.state_dict(), out / "encoder.pkl")

    embedder = Embedder(str(out), batch_size=len(SENTENCES))
    layers = embedder.sents2elmo(SENTENCES, output_layer=-2)
    np.savez(out / "expected.npz", **{f"s{i}": x.astype(np.float32) for i, x in enumerate(layers)})
    (out / "sentences.json").write_text(json.dumps(SENTENCES, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {out}: {[x.shape for x in layers]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
