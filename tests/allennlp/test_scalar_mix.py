"""ScalarMix and Elmo's mixes against a direct numpy computation of AllenNLP's formula and its gradients."""
import numpy as np
import pytest
import torch

from spacy_elmo import ElmoSettingsError
from spacy_elmo.allennlp import Elmo, ElmoBiLm, ScalarMix, batch_to_ids
from tests.conftest import ROUNDING

EPS = 1e-13  # AllenNLP's float32 epsilon under the square root


def softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max())
    return e / e.sum()


def normed(layer: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """One mean and variance over every unmasked (position, dim) of the batch, applied everywhere."""
    values = layer[mask]
    return (layer - values.mean()) / np.sqrt(values.var() + EPS)


def layers_and_mask(seed: int = 0):
    rng = np.random.default_rng(seed)
    layers = rng.normal(1.0, 2.0, size=(3, 2, 5, 4))
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
    return layers, mask


@pytest.mark.parametrize("layer_norm", [False, True])
def test_mix_and_its_gradients_match_the_formula(layer_norm):
    layers, mask = layers_and_mask()
    scalars, gamma = np.array([0.3, -0.2, 0.5]), 1.7
    upstream = np.random.default_rng(1).normal(size=layers.shape[1:])
    mix = ScalarMix(3, do_layer_norm=layer_norm)
    with torch.no_grad():
        for parameter, value in zip(mix.scalar_parameters, scalars):
            parameter.fill_(value)
        mix.gamma.fill_(gamma)
    inputs = [torch.tensor(layer, dtype=torch.float32, requires_grad=True) for layer in layers]
    out = mix(inputs, torch.from_numpy(mask))
    (out * torch.tensor(upstream, dtype=torch.float32)).sum().backward()

    x = np.stack([normed(layer, mask) for layer in layers]) if layer_norm else layers
    w = softmax(scalars)
    unscaled = np.tensordot(w, x, axes=1)
    np.testing.assert_allclose(out.detach().numpy(), gamma * unscaled, rtol=1e-5, atol=1e-5)
    per_layer = (x * upstream).sum(axis=(1, 2, 3))  # d loss / d (weight_k * gamma) before the softmax
    d_scalars = gamma * w * (per_layer - (w * per_layer).sum())
    got_scalars = np.array([p.grad.item() for p in mix.scalar_parameters])
    np.testing.assert_allclose(got_scalars, d_scalars, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mix.gamma.grad.item(), (unscaled * upstream).sum(), rtol=1e-4)
    if not layer_norm:
        np.testing.assert_allclose(inputs[1].grad.numpy(), gamma * w[1] * upstream, rtol=1e-5, atol=1e-6)


def test_fixed_parameters_do_not_learn_and_gamma_stays_one():
    mix = ScalarMix(3, initial_scalar_parameters=[1.0, 2.0, 3.0], trainable=False)
    assert not any(p.requires_grad for p in mix.parameters()) and mix.gamma.item() == 1.0
    np.testing.assert_allclose(mix.weights().numpy(), softmax(np.array([1.0, 2.0, 3.0])), rtol=1e-6)


def test_elmos_layer_norm_runs_over_the_sentence_markers_too(allennlp_files):
    """AllenNLP normalises over the mask with <S> and </S>, then strips them."""
    sentences = [["A", "short", "one"], ["and", "a", "longer", "one", "here"]]
    ids = batch_to_ids(sentences)
    bilm = ElmoBiLm(*allennlp_files, stateful=False)
    output = bilm(ids)
    layers = np.stack([layer.detach().numpy() for layer in output["activations"]])
    mask = output["mask"].numpy()
    expected = np.mean([normed(layer, mask) for layer in layers], axis=0)
    elmo = Elmo(None, None, 1, do_layer_norm=True, dropout=0.0, module=bilm)
    got = elmo(ids)["elmo_representations"][0].detach().numpy()
    for row, sentence in enumerate(sentences):
        np.testing.assert_allclose(got[row, : len(sentence)], expected[row, 1 : len(sentence) + 1], **ROUNDING)
        assert not got[row, len(sentence) :].any()


@pytest.mark.parametrize("call, message", [
    (lambda: ScalarMix(3, initial_scalar_parameters=[0.0, 0.0]),
     "^initial_scalar_parameters gives 2 weights, but mixture_size is 3"),
    (lambda: ScalarMix(3)([torch.ones(1, 2, 4)] * 2), "^tensors holds 2 tensors, but this ScalarMix has mixture_size 3"),
    (lambda: ScalarMix(2, do_layer_norm=True)([torch.ones(1, 2, 4)] * 2), "^mask is None, but this ScalarMix has "
                                                                           "do_layer_norm=True"),
], ids=["weights", "tensors", "mask"])
def test_a_mistake_is_one_line_naming_the_argument_given(call, message):
    """ScalarMix's own arguments, not Elmo's (scalar_mix_parameters) nor a biLM's layers: none is involved."""
    with pytest.raises(ElmoSettingsError, match=message) as error:
        call()
    assert "\n" not in str(error.value)
