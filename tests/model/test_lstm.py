import numpy as np
import pytest
import torch

import spacy_elmo.model.lstm as lstm_module
from spacy_elmo.model.lstm import LstmWithProjection


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _numpy_lstm(lstm: LstmWithProjection, x: np.ndarray, h: np.ndarray, c: np.ndarray):
    """TensorFlow LSTMCell semantics written out step by step for one sequence."""
    w = np.concatenate([lstm.w_input.detach().numpy(), lstm.w_hidden.detach().numpy()])
    b, wp, n = lstm.bias.detach().numpy(), lstm.w_proj.detach().numpy(), lstm.cell_dim
    outs = []
    for t in range(x.shape[0]):
        z = np.concatenate([x[t], h]) @ w + b
        i, j, f, o = z[:n], z[n : 2 * n], z[2 * n : 3 * n], z[3 * n :]
        c = np.clip(_sigmoid(f + 1.0) * c + _sigmoid(i) * np.tanh(j), -lstm.cell_clip, lstm.cell_clip)
        h = np.clip((_sigmoid(o) * np.tanh(c)) @ wp, -lstm.proj_clip, lstm.proj_clip)
        outs.append(h)
    return np.stack(outs), h, c


def _lstm(seed: int = 0) -> LstmWithProjection:
    torch.manual_seed(seed)
    lstm = LstmWithProjection(5, 7, 3, cell_clip=0.5, proj_clip=0.2)
    with torch.no_grad():
        lstm.bias.uniform_(-1, 1)
        lstm.w_input.mul_(3.0)  # large enough that both clips are hit
    return lstm


def test_rows_of_different_lengths_match_step_by_step_reference():
    lstm = _lstm()
    lengths = [6, 4, 1]
    x = torch.randn(3, 6, 5)
    h0, c0 = torch.randn(3, 3) * 0.1, torch.randn(3, 7) * 0.1
    with torch.no_grad():
        out, h_n, c_n = lstm(x, lengths, h0, c0)
    for r, n in enumerate(lengths):
        ref_out, ref_h, ref_c = _numpy_lstm(lstm, x[r, :n].numpy(), h0[r].numpy(), c0[r].numpy())
        np.testing.assert_allclose(out[r, :n].numpy(), ref_out, atol=1e-6)
        assert (out[r, n:] == 0).all()
        np.testing.assert_allclose(h_n[r].numpy(), ref_h, atol=1e-6)
        np.testing.assert_allclose(c_n[r].numpy(), ref_c, atol=1e-6)
    assert np.abs(c_n.numpy()).max() <= 0.5 + 1e-7 and np.abs(out.numpy()).max() <= 0.2 + 1e-7


def test_zero_clip_means_no_clip():
    lstm = _lstm()
    lstm.cell_clip = lstm.proj_clip = 0.0
    x = torch.randn(1, 4, 5) * 5
    with torch.no_grad():
        out, _, _ = lstm(x, [4], torch.zeros(1, 3), torch.zeros(1, 7))
    lstm.cell_clip = lstm.proj_clip = np.inf
    ref, _, _ = _numpy_lstm(lstm, x[0].numpy(), np.zeros(3), np.zeros(7))
    np.testing.assert_allclose(out[0].numpy(), ref, atol=1e-5)


@pytest.mark.parametrize("gradient_rows", [512, 2])
def test_every_gradient_matches_the_numerical_derivative_with_rows_of_different_lengths(monkeypatch, gradient_rows):
    """Training runs each step's recurrent and projection products with their weight gradients left to a few products
    over many steps (all steps at once, or every 2 rows): the backward pass against finite differences (float64),
    for the weights, inputs and start."""
    monkeypatch.setattr(lstm_module, "GRADIENT_ROWS", gradient_rows)
    lstm = _lstm().double()
    lstm.cell_clip = lstm.proj_clip = 0.0  # the clips' corners are not differentiable
    names = [name for name, _ in lstm.named_parameters()]
    x = torch.randn(3, 5, 5, dtype=torch.float64, requires_grad=True)
    h0 = (torch.randn(3, 3, dtype=torch.float64) * 0.1).requires_grad_()
    c0 = (torch.randn(3, 7, dtype=torch.float64) * 0.1).requires_grad_()

    def outputs(x, h0, c0, *params):
        out, h_n, c_n = torch.func.functional_call(lstm, dict(zip(names, params)), (x, [5, 3, 1], h0, c0))
        return out, h_n, c_n

    params = [p.detach().clone().requires_grad_() for p in lstm.parameters()]
    assert torch.autograd.gradcheck(outputs, (x, h0, c0, *params), eps=1e-6, atol=1e-6)
