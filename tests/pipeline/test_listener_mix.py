"""The listener's scalar mix against the tests' torch ``ScalarMix`` (autograd)."""
from typing import List

import numpy as np
import pytest
import torch
from spacy.tokens import Doc
from spacy.vocab import Vocab
from thinc.api import Model

from spacy_elmo.pipeline.architectures import frozen_backprop
from spacy_elmo.pipeline.listener_mix import build_listener_mix

from tests.pipeline.listener_mix_reference import ScalarMix

N_LAYERS, DIM = 3, 5


def layer_source(layers: List[np.ndarray], frozen: bool, received: list) -> Model:
    """A stand-in for the listener node: returns fixed layers and records the gradient it gets."""

    def forward(model, docs, is_train):
        if frozen:
            return layers, frozen_backprop
        return layers, lambda d_layers: received.extend(d_layers) or []

    return Model("source", forward, dims={"nO": DIM, "nL": N_LAYERS})


def run_mix(layers, d_outputs, *, layer_norm, l2=0.0, scalars=None, gamma=1.0, frozen=False):
    received: list = []
    mix = build_listener_mix(layer_source(layers, frozen, received), layer_norm=layer_norm, l2=l2)
    mix.initialize()
    if scalars is not None:
        mix.set_param("scalars", np.asarray(scalars, dtype=np.float32))
    mix.set_param("gamma", np.asarray([gamma], dtype=np.float32))
    outputs, backprop = mix.begin_update([Doc(Vocab()) for _ in layers])  # the stand-in source ignores its docs
    backprop(d_outputs)
    return outputs, mix.get_grad("scalars"), mix.get_grad("gamma"), received


@pytest.mark.parametrize("layer_norm", [False, True])
def test_values_and_gradients_match_torch_scalar_mix(layer_norm):
    rng = np.random.default_rng(0)
    layers = [rng.normal(size=(N_LAYERS, n, DIM)).astype(np.float32) for n in (4, 1, 7)]
    d_outputs = [rng.normal(size=(n, DIM)).astype(np.float32) for n in (4, 1, 7)]
    scalars, gamma = [0.3, -0.2, 0.5], 1.7
    outputs, d_scalars, d_gamma, d_layers = run_mix(
        layers, d_outputs, layer_norm=layer_norm, scalars=scalars, gamma=gamma
    )
    reference = ScalarMix(N_LAYERS, initial_weights=scalars, gamma=gamma, layer_norm=layer_norm)
    for i, (X, dY) in enumerate(zip(layers, d_outputs)):  # the core mix normalises per call: one Doc per call
        X_t = torch.tensor(X, requires_grad=True)
        Y = reference(X_t)
        (Y * torch.tensor(dY)).sum().backward()
        np.testing.assert_allclose(outputs[i], Y.detach().numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(d_layers[i], X_t.grad.numpy(), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(d_scalars, reference.scalars.grad.numpy(), rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(d_gamma, [reference.gamma.grad.item()], rtol=1e-4)


def test_l2_adds_its_gradient_and_a_frozen_source_gets_none():
    rng = np.random.default_rng(1)
    layers = [rng.normal(size=(N_LAYERS, 3, DIM)).astype(np.float32)]
    d_outputs = [rng.normal(size=(3, DIM)).astype(np.float32)]
    scalars = np.array([0.4, 0.1, -0.3], dtype=np.float32)
    _, plain, _, _ = run_mix(layers, d_outputs, layer_norm=False, scalars=scalars, frozen=True)
    _, with_l2, _, received = run_mix(layers, d_outputs, layer_norm=False, scalars=scalars, l2=0.01, frozen=True)
    np.testing.assert_allclose(with_l2 - plain, 2 * 0.01 * scalars, rtol=1e-5, atol=1e-7)
    assert received == []


def test_dropout_zeroes_or_rescales_during_training_only():
    layers = [np.ones((N_LAYERS, 50, DIM), dtype=np.float32)]
    source = layer_source(layers, frozen=True, received=[])
    mix = build_listener_mix(source, dropout=0.5)
    mix.initialize()
    doc = [Doc(Vocab())]
    (trained,), _ = mix.begin_update(doc)
    assert set(np.unique(trained)) == {0.0, 2.0}
    np.testing.assert_array_equal(mix.predict(doc)[0], np.ones((50, DIM)))
