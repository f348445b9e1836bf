"""The AllenNLP machinery that AllenNLP's ported ELMo tests use and spacy-elmo does not offer, as small shims.

Each shim does what the tests need of its AllenNLP namesake, through spacy-elmo's public API (``batch_to_ids`` for
the character ids, ``Elmo`` under the token embedder). ``ElmoTestCase09`` is AllenNLP 0.9's ``ElmoTestCase`` (from
its ``allennlp/tests/modules/elmo_test.py``, Apache-2.0, © the AllenNLP authors), which 0.9's command tests import.
README.md lists every shim and every change to AllenNLP's test code.
"""
import argparse
import json
import os
import sys
import tempfile
import unittest
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Dict, Iterator, List

import numpy
import pytest
import torch
from torch import nn

from spacy_elmo.allennlp import Elmo, batch_to_ids
from spacy_elmo.allennlp.commands.elmo import DEFAULT_BATCH_SIZE, DEFAULT_OPTIONS_FILE, DEFAULT_WEIGHT_FILE, ElmoEmbedder
from tests.conftest import ALLENNLP

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=FutureWarning)
    import h5py

PADDING, OOV = "@@PADDING@@", "@@UNKNOWN@@"


@pytest.fixture(autouse=True)
def _contained(tmp_path, monkeypatch):
    """What AllenNLP's tests change outside themselves is put back: 0.9's command tests set ``sys.argv`` and make
    folders with ``tempfile.mkdtemp()`` (here under pytest's own temporary folder)."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


class _FixturesRoot:
    """AllenNLP's ``FIXTURES_ROOT``: its ``elmo`` folder is tests/fixtures/elmo/allennlp here."""

    def __truediv__(self, name: str):
        return {"elmo": ALLENNLP}[name]


class AllenNlpTestCase:
    """``allennlp.common.testing.AllenNlpTestCase`` (1.0 and later): a pytest class with ``FIXTURES_ROOT``.

    Unlike AllenNLP's, it seeds torch and numpy before each test, so that the random inputs are the same on every
    run: AllenNLP's scalar mix test compares float32 with float64 at 1.5e-7 and fails on about 1 in 2,000 draws.
    """

    FIXTURES_ROOT = _FixturesRoot()

    def setup_method(self):
        torch.manual_seed(0)
        numpy.random.seed(0)

    def teardown_method(self):
        pass


class AllenNlpTestCase09(unittest.TestCase):
    """AllenNLP 0.9's ``AllenNlpTestCase``: a unittest case with ``FIXTURES_ROOT``."""

    FIXTURES_ROOT = _FixturesRoot()


@dataclass
class Token:
    text: str


class Vocabulary:
    """Token ids per namespace: padding 0, unknown 1, then the counted tokens, most frequent first."""

    def __init__(self):
        self._index: Dict[str, Dict[str, int]] = {}

    @classmethod
    def from_instances(cls, instances: List["Instance"]) -> "Vocabulary":
        counts: Dict[str, Counter] = defaultdict(Counter)
        for instance in instances:
            instance.count_vocab_items(counts)
        vocab = cls()
        for namespace, counter in counts.items():
            ranked = sorted(counter, key=lambda token: -counter[token])
            vocab._index[namespace] = {token: i for i, token in enumerate([PADDING, OOV, *ranked])}
        return vocab

    def get_token_to_index_vocabulary(self, namespace: str = "tokens") -> Dict[str, int]:
        return dict(self._index.get(namespace, {PADDING: 0, OOV: 1}))

    def get_token_index(self, token: str, namespace: str = "tokens") -> int:
        return self._index.get(namespace, {}).get(token, 1)


def _padded(rows: list, length: int, shape: tuple) -> torch.Tensor:
    out = torch.zeros((length, *shape), dtype=torch.long)
    if rows:
        out[: len(rows)] = torch.tensor(rows, dtype=torch.long)
    return out


class ELMoTokenCharactersIndexer:
    """Each token as its 50 character ids (``batch_to_ids``'s), under the key ``elmo_tokens``."""

    def count_vocab_items(self, token: Token, counter: Dict[str, Counter]) -> None:
        pass

    def tokens_to_indices(self, tokens: List[Token], vocabulary: Vocabulary) -> Dict[str, list]:
        return {"elmo_tokens": batch_to_ids([[token.text for token in tokens]])[0].tolist()}

    def as_padded_tensor_dict(self, tokens: Dict[str, list], padding_lengths: Dict[str, int]) -> Dict[str, torch.Tensor]:
        return {"elmo_tokens": _padded(tokens["elmo_tokens"], padding_lengths["elmo_tokens"], (50,))}


class SingleIdTokenIndexer:
    """Each token as its id in the ``tokens`` namespace, under the key ``tokens``."""

    def count_vocab_items(self, token: Token, counter: Dict[str, Counter]) -> None:
        counter["tokens"][token.text] += 1

    def tokens_to_indices(self, tokens: List[Token], vocabulary: Vocabulary) -> Dict[str, list]:
        return {"tokens": [vocabulary.get_token_index(token.text, "tokens") for token in tokens]}

    def as_padded_tensor_dict(self, tokens: Dict[str, list], padding_lengths: Dict[str, int]) -> Dict[str, torch.Tensor]:
        return {"tokens": _padded(tokens["tokens"], padding_lengths["tokens"], ())}


class TextField:
    def __init__(self, tokens: List[Token], token_indexers: Dict[str, object]):
        self.tokens = tokens
        self.token_indexers = token_indexers
        self._indexed: Dict[str, Dict[str, list]] = {}

    def count_vocab_items(self, counter: Dict[str, Counter]) -> None:
        for indexer in self.token_indexers.values():
            for token in self.tokens:
                indexer.count_vocab_items(token, counter)

    def index(self, vocab: Vocabulary) -> None:
        self._indexed = {name: indexer.tokens_to_indices(self.tokens, vocab) for name, indexer in self.token_indexers.items()}

    def as_tensor(self, num_tokens: int) -> Dict[str, Dict[str, torch.Tensor]]:
        return {
            name: self.token_indexers[name].as_padded_tensor_dict(indexed, {key: num_tokens for key in indexed})
            for name, indexed in self._indexed.items()
        }


class Instance:
    def __init__(self, fields: Dict[str, TextField]):
        self.fields = fields

    def count_vocab_items(self, counter: Dict[str, Counter]) -> None:
        for field in self.fields.values():
            field.count_vocab_items(counter)

    def index_fields(self, vocab: Vocabulary) -> None:
        for field in self.fields.values():
            field.index(vocab)


class Batch:
    """Instances padded to their longest field and stacked: ``{field: {indexer: {key: tensor}}}``."""

    def __init__(self, instances: List[Instance]):
        self.instances = instances

    def index_instances(self, vocab: Vocabulary) -> None:
        for instance in self.instances:
            instance.index_fields(vocab)

    def as_tensor_dict(self) -> Dict[str, Dict[str, Dict[str, torch.Tensor]]]:
        out = {}
        for name in self.instances[0].fields:
            length = max(len(instance.fields[name].tokens) for instance in self.instances)
            tensors = [instance.fields[name].as_tensor(length) for instance in self.instances]
            out[name] = {
                indexer: {key: torch.stack([t[indexer][key] for t in tensors]) for key in tensors[0][indexer]}
                for indexer in tensors[0]
            }
        return out


class SimpleDataLoader:
    """Consecutive batches of ``batch_size`` instances, in order, as tensor dicts."""

    def __init__(self, instances: List[Instance], batch_size: int):
        self.instances = instances
        self.batch_size = batch_size

    def index_with(self, vocab: Vocabulary) -> None:
        Batch(self.instances).index_instances(vocab)

    def __iter__(self) -> Iterator[dict]:
        for start in range(0, len(self.instances), self.batch_size):
            yield Batch(self.instances[start : start + self.batch_size]).as_tensor_dict()


def remove_sentence_boundaries(tensor: torch.Tensor, mask: torch.Tensor):
    """``allennlp.nn.util.remove_sentence_boundaries``: each row without its first and last unmasked position."""
    lengths = mask.sum(dim=1).tolist()
    out = tensor.new_zeros(tensor.shape[0], tensor.shape[1] - 2, *tensor.shape[2:])
    new_mask = torch.zeros(out.shape[:2], dtype=torch.bool, device=tensor.device)
    for row, length in enumerate(lengths):
        if length > 2:
            out[row, : length - 2] = tensor[row, 1 : length - 1]
            new_mask[row, : length - 2] = True
    return out, new_mask


def _tiny_value_of_dtype(dtype: torch.dtype) -> float:
    """``allennlp.nn.util.tiny_value_of_dtype``: added to divisors; 1e-13 in float32 and float64, 1e-4 in half."""
    return 1e-4 if dtype == torch.half else 1e-13


util = SimpleNamespace(tiny_value_of_dtype=_tiny_value_of_dtype)


class ElmoTokenEmbedder(nn.Module):
    """``allennlp.modules.token_embedders.ElmoTokenEmbedder`` as its tests use it: the one representation of an
    ``Elmo`` (kept as ``_elmo``, so its biLM's parameters are named ``_elmo._elmo_lstm.*``)."""

    def __init__(self, options_file: str, weight_file: str, do_layer_norm: bool = False, dropout: float = 0.5,
                 requires_grad: bool = False):
        super().__init__()
        self._elmo = Elmo(options_file, weight_file, 1, do_layer_norm=do_layer_norm, dropout=dropout,
                          requires_grad=requires_grad)

    def get_output_dim(self) -> int:
        return self._elmo.get_output_dim()

    def forward(self, elmo_tokens: torch.Tensor, word_inputs: torch.Tensor = None) -> torch.Tensor:
        return self._elmo(elmo_tokens, word_inputs)["elmo_representations"][0]


def main() -> None:
    """AllenNLP 0.9's command line as its ``elmo`` command tests run it (``sys.argv``), on what 0.9's ``elmo``
    command called: ``ElmoEmbedder(options_file, weight_file, cuda_device).embed_file(...)``."""
    parser = argparse.ArgumentParser(prog=sys.argv[0])
    commands = parser.add_subparsers(dest="command", required=True)
    elmo = commands.add_parser("elmo")
    elmo.add_argument("input_file", type=argparse.FileType("r", encoding="utf-8"))
    elmo.add_argument("output_file")
    formats = elmo.add_mutually_exclusive_group(required=True)
    for output_format in ("all", "top", "average"):
        formats.add_argument(f"--{output_format}", action="store_const", const=output_format, dest="output_format")
    elmo.add_argument("--options-file", default=DEFAULT_OPTIONS_FILE)
    elmo.add_argument("--weight-file", default=DEFAULT_WEIGHT_FILE)
    elmo.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    elmo.add_argument("--cuda-device", type=int, default=-1)
    elmo.add_argument("--forget-sentences", action="store_true")
    elmo.add_argument("--use-sentence-keys", action="store_true")
    args = parser.parse_args(sys.argv[1:])
    embedder = ElmoEmbedder(args.options_file, args.weight_file, args.cuda_device)
    with args.input_file as input_file:
        embedder.embed_file(input_file, args.output_file, args.output_format, args.batch_size,
                            args.forget_sentences, args.use_sentence_keys)


# AllenNLP 0.9's ElmoTestCase, from its allennlp/tests/modules/elmo_test.py (Apache-2.0, © the AllenNLP authors);
# its setUp and _load_sentences_embeddings (what the command tests use); only its base class is this file's shim.
class ElmoTestCase09(AllenNlpTestCase09):
    def setUp(self):
        super(ElmoTestCase09, self).setUp()
        self.elmo_fixtures_path = self.FIXTURES_ROOT / 'elmo'
        self.options_file = str(self.elmo_fixtures_path / 'options.json')
        self.weight_file = str(self.elmo_fixtures_path / 'lm_weights.hdf5')
        self.sentences_json_file = str(self.elmo_fixtures_path / 'sentences.json')
        self.sentences_txt_file = str(self.elmo_fixtures_path / 'sentences.txt')

    def _load_sentences_embeddings(self):
        """
        Load the test sentences and the expected LM embeddings.

        These files loaded in this method were created with a batch-size of 3.
        Due to idiosyncrasies with TensorFlow, the 30 sentences in sentences.json are split into 3 files in which
        the k-th sentence in each is from batch k.

        This method returns a (sentences, embeddings) pair where each is a list of length batch_size.
        Each list contains a sublist with total_sentence_count / batch_size elements.  As with the original files,
        the k-th element in the sublist is in batch k.
        """
        with open(self.sentences_json_file) as fin:
            sentences = json.load(fin)

        # the expected embeddings
        expected_lm_embeddings = []
        for k in range(len(sentences)):
            embed_fname = os.path.join(
                    self.elmo_fixtures_path, 'lm_embeddings_{}.hdf5'.format(k)
            )
            expected_lm_embeddings.append([])
            with h5py.File(embed_fname, 'r') as fin:
                for i in range(10):
                    sent_embeds = fin['%s' % i][...]
                    sent_embeds_concat = numpy.concatenate(
                            (sent_embeds[0, :, :], sent_embeds[1, :, :]),
                            axis=-1
                    )
                    expected_lm_embeddings[-1].append(sent_embeds_concat)

        return sentences, expected_lm_embeddings
