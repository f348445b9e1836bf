import numpy as np
import torch

from spacy_elmo.model.lstm import LstmWithProjection, Packing, _run_steps, run_packed


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


def _packed_inputs(seed: int, lengths):
    """Two LSTMs side by side (as the biLM runs them) over rows of the given lengths, clipping active."""
    torch.manual_seed(seed)
    lstms = [_lstm(seed), _lstm(seed + 1)]
    packing = Packing(lengths, max(lengths), torch.device("cpu"))
    x = torch.randn(len(lengths), max(lengths), 5, requires_grad=True)
    h0 = (torch.randn(2, len(lengths), 3) * 0.1).requires_grad_()
    c0 = (torch.randn(2, len(lengths), 7) * 0.1).requires_grad_()
    return lstms, packing, x, h0, c0


def _gradients(lengths, through_time: bool):
    """Gradients of a loss on the outputs and final states; autograd through each step, or the hand-written backward."""
    lstms, packing, x, h0, c0 = _packed_inputs(0, lengths)
    first = lstms[0]
    inputs = (
        packing.pack(x, 2),
        torch.stack([m.w_input for m in lstms]),
        (torch.stack([m.bias for m in lstms]) + first._forget_offset).unsqueeze(1),
        torch.stack([m.w_hidden for m in lstms]),
        torch.stack([m.w_proj for m in lstms]),
        h0,
        c0,
    )
    clips = (first.cell_clip, first.proj_clip)
    if through_time:
        out, h_n, c_n = run_packed(lstms, inputs[0], packing.active, h0, c0)
    else:
        out, h_n, c_n = _run_steps(packing.active, clips, *inputs)
    torch.manual_seed(99)
    loss = (out * torch.randn_like(out)).sum() + (h_n * torch.randn_like(h_n)).sum() + (c_n ** 2).sum()
    params = [p for m in lstms for p in (m.w_input, m.w_hidden, m.bias, m.w_proj)]
    return out.detach(), torch.autograd.grad(loss, params + [x, h0, c0])


def test_backward_through_time_equals_autograd_through_each_step():
    for lengths in ([6, 4, 1], [3, 3], [5, 2, 2, 1]):
        out_ref, grads_ref = _gradients(lengths, through_time=False)
        out, grads = _gradients(lengths, through_time=True)
        assert torch.equal(out, out_ref)
        for g, g_ref in zip(grads, grads_ref):
            assert g_ref.abs().max() > 0
            torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-6)
