"""The LSTMs' stacked weights: built once for inference, rebuilt when the biLM is told the weights changed (or a
state dict is loaded), per call while they learn."""
from typing import List

import numpy as np
import torch

from spacy_elmo.model.segment_encoder import SegmentEncoder
from spacy_elmo.model.encoder import ElmoEncoder
from spacy_elmo.formats.weights import load_files
from tests.conftest import ALLENNLP

SENTENCES = [["The", "cat", "sat", "."], ["A", "longer", "sentence", "than", "the", "first", "one"], ["Hi"]]


def _encoder() -> SegmentEncoder:
    bilm = load_files(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5")
    encoder = ElmoEncoder(bilm)
    encoder.initial_state = "zeros"
    return SegmentEncoder(encoder)


def _run(encoder: SegmentEncoder) -> torch.Tensor:
    with torch.inference_mode():
        return encoder(SENTENCES)[0]


def _stacked_pointers(encoder: SegmentEncoder) -> List[int]:
    """Where each layer's stacked weights are (the tensors the products read)."""
    kept = encoder.encoder.bilm._products
    return [kept[k].w[name].data_ptr() for k in sorted(kept) for name in ("input", "hidden", "projection")]


def test_stacked_weights_are_built_once_across_calls():
    encoder = _encoder()
    first = _run(encoder)
    pointers = _stacked_pointers(encoder)
    assert len(pointers) == 3 * encoder.options.n_layers
    again = _run(encoder)
    assert _stacked_pointers(encoder) == pointers
    assert torch.equal(first, again)


def test_a_weight_changed_in_place_is_restacked_once_announced_and_the_vectors_follow():
    encoder, fresh = _encoder(), _encoder()
    before = _run(encoder)
    with torch.no_grad():  # as an optimizer step does: in place
        for model in (encoder, fresh):
            model.encoder.bilm.backward_lstms[1].w_hidden.mul_(1.5)
            model.encoder.weights_changed()
    after = _run(encoder)
    assert (after - before).abs().max().item() > 1e-3
    assert torch.equal(after, _run(fresh))  # the same computation as a model that ran once (its load check) before


def test_a_weight_replaced_is_restacked_once_announced_and_the_vectors_follow():
    encoder, fresh = _encoder(), _encoder()
    before = _run(encoder)
    for model in (encoder, fresh):  # as thinc's finish_update does: a new tensor as .data
        lstm = model.encoder.bilm.forward_lstms[0]
        lstm.w_input.data = lstm.w_input.data * 0.5
        model.encoder.weights_changed()
    after = _run(encoder)
    assert (after - before).abs().max().item() > 1e-3
    assert torch.equal(after, _run(fresh))


def test_a_loaded_state_dict_is_restacked_and_the_vectors_follow():
    encoder, source = _encoder(), _encoder()
    before = _run(encoder)
    with torch.no_grad():
        source.encoder.bilm.forward_lstms[1].w_proj.mul_(0.5)
        source.encoder.weights_changed()
    encoder.encoder.bilm.load_state_dict(source.encoder.bilm.state_dict())
    after = _run(encoder)
    assert (after - before).abs().max().item() > 1e-3
    assert torch.equal(after, _run(source))


def test_gradients_reach_every_lstm_weight_after_inference_built_the_stacks():
    encoder = _encoder()
    _run(encoder)
    layers, _ = encoder(SENTENCES)  # autograd on, weights requiring grad: stacked per call
    layers[1:].sum().backward()
    bilm = encoder.encoder.bilm
    for lstm in (*bilm.forward_lstms, *bilm.backward_lstms):
        for weight in (lstm.w_input, lstm.w_hidden, lstm.w_proj, lstm.bias):
            assert weight.grad is not None and weight.grad.abs().sum().item() > 0


def test_gradients_match_finite_differences_through_the_stacked_products():
    """d(sum of the top layer)/d(one recurrent weight) against a central difference in float64."""
    encoder = _encoder().double()
    weight = encoder.encoder.bilm.backward_lstms[0].w_hidden
    index = (3, 5)
    encoder(SENTENCES)[0][2].sum().backward()
    eps = 1e-6
    with torch.no_grad():
        weight[index] += eps
        encoder.encoder.weights_changed()
        up = _run(encoder)[2].sum().item()
        weight[index] -= 2 * eps
        encoder.encoder.weights_changed()
        down = _run(encoder)[2].sum().item()
    np.testing.assert_allclose(weight.grad[index].item(), (up - down) / (2 * eps), rtol=1e-5, atol=1e-8)
