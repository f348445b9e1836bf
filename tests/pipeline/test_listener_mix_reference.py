import numpy as np
import pytest
import torch

from tests.pipeline.listener_mix_reference import ScalarMix


def test_default_mix_is_the_mean_of_the_layers():
    layers = torch.randn(3, 2, 4, 5)
    assert torch.allclose(ScalarMix(3)(layers), layers.mean(dim=0), atol=1e-6)


def test_hand_worked_weights_and_gamma():
    layers = torch.tensor([[1.0], [2.0], [4.0]])
    mix = ScalarMix(3, initial_weights=[0.0, np.log(2.0), np.log(5.0)], gamma=2.0)
    # softmax = [1, 2, 5] / 8 ; gamma * (1 + 4 + 20) / 8
    assert mix(layers).item() == pytest.approx(2.0 * 25.0 / 8.0, rel=1e-6)


def test_layer_norm_uses_only_unpadded_positions():
    layers = torch.randn(2, 2, 3, 4)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    padded = layers.clone()
    padded[:, ~mask] = 1000.0
    mix = ScalarMix(2, layer_norm=True)
    a, b = mix(layers, mask), mix(padded, mask)
    assert torch.allclose(a[mask], b[mask], atol=1e-5)
    values = layers[0][mask].numpy()
    normed = (values - values.mean()) / np.sqrt(values.var() + 1e-12)
    assert torch.allclose(mix.__class__(2, initial_weights=[50.0, -50.0], layer_norm=True)(layers, mask)[mask],
                          torch.from_numpy(normed).float(), atol=1e-4)


def test_weights_and_gamma_learn_unless_fixed():
    mix = ScalarMix(3)
    mix(torch.randn(3, 4, 2) * torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1)).pow(2).sum().backward()
    assert mix.scalars.grad.abs().sum() > 0 and mix.gamma.grad.abs() > 0
    fixed = ScalarMix(3, initial_weights=[1.0, 0.0, 0.0], trainable=False)
    assert not fixed.scalars.requires_grad and not fixed.gamma.requires_grad


def test_several_independent_mixes_of_one_pass():
    layers = torch.randn(3, 2, 5)
    top = ScalarMix(3, initial_weights=[-1e4, -1e4, 0.0])
    first = ScalarMix(3, initial_weights=[-1e4, 0.0, -1e4])
    assert torch.allclose(top(layers), layers[2], atol=1e-6)
    assert torch.allclose(first(layers), layers[1], atol=1e-6)
