"""requires_grad=True fine-tunes the biLM: gradients reach every parameter, and are those of a plain LSTM.

The reference here is written out step by step with torch's own tanh (the biLM computes tanh through sigmoid and
packs rows, and while its weights learn it builds its stacked products on every call instead of keeping them).
"""
import pytest
import torch

from spacy_elmo.allennlp import Elmo, batch_to_ids
from tests.conftest import ROUNDING

SENTENCE = ["Fine", "tuning", "moves", "the", "weights", "."]


def reference_stack(lstms, x: torch.Tensor, skip: bool) -> list:
    """One direction's layers over ``x`` ``(steps, dim)`` from zero state, in TF LSTMCell semantics (i, j, f, o)."""
    layers, inputs = [], x
    for k, lstm in enumerate(lstms):
        h = x.new_zeros(lstm.projection_dim)
        c = x.new_zeros(lstm.cell_dim)
        outputs = []
        for step in inputs:
            i, j, f, o = (step @ lstm.w_input + h @ lstm.w_hidden + lstm.bias).chunk(4)
            c = torch.sigmoid(f + 1.0) * c + torch.sigmoid(i) * torch.tanh(j)
            if lstm.cell_clip:
                c = c.clamp(-lstm.cell_clip, lstm.cell_clip)
            h = (torch.sigmoid(o) * torch.tanh(c)) @ lstm.w_proj
            if lstm.proj_clip:
                h = h.clamp(-lstm.proj_clip, lstm.proj_clip)
            outputs.append(h)
        layer = torch.stack(outputs)
        if k > 0 and skip:
            layer = layer + inputs
        layers.append(layer)
        inputs = layer
    return layers


def reference_average(bilm, char_ids: torch.Tensor) -> torch.Tensor:
    """The plain average of the three layers, markers stripped, for one sentence."""
    tokens = bilm.token_layer(char_ids)
    skip = bilm.options.use_skip_connections
    forward = reference_stack(bilm.forward_lstms, tokens, skip)
    backward = [layer.flip(0) for layer in reference_stack(bilm.backward_lstms, tokens.flip(0), skip)]
    layers = [torch.cat((tokens, tokens), dim=1)] + [torch.cat(pair, dim=1) for pair in zip(forward, backward)]
    return torch.stack(layers).mean(dim=0)[1:-1]


def fine_tunable(allennlp_files) -> Elmo:
    return Elmo(*allennlp_files, 1, requires_grad=True, dropout=0.0, stateful=False, initial_state="zeros")


def test_gradients_reach_every_biLM_parameter_and_match_a_plain_lstm(allennlp_files):
    elmo = fine_tunable(allennlp_files)
    bilm = elmo._elmo_lstm.encoder.bilm
    upstream = torch.randn(len(SENTENCE), 32, generator=torch.Generator().manual_seed(0))
    (elmo(batch_to_ids([SENTENCE]))["elmo_representations"][0][0] * upstream).sum().backward()
    got = {name: p.grad.clone() for name, p in bilm.named_parameters()}
    bilm.zero_grad()
    with_markers = batch_to_ids([["<S>", *SENTENCE, "</S>"]])[0]
    (reference_average(bilm, with_markers) * upstream).sum().backward()
    for name, parameter in bilm.named_parameters():
        assert got[name].abs().sum() > 0, name
        torch.testing.assert_close(got[name], parameter.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_the_training_path_computes_what_inference_computes(allennlp_files):
    ids = batch_to_ids([SENTENCE, SENTENCE[:3]])
    frozen = Elmo(*allennlp_files, 1, dropout=0.0, stateful=False, initial_state="zeros")
    training = fine_tunable(allennlp_files)
    want = frozen(ids)["elmo_representations"][0]
    torch.testing.assert_close(training(ids)["elmo_representations"][0], want, **ROUNDING)
    with torch.no_grad():
        torch.testing.assert_close(training(ids)["elmo_representations"][0], want, **ROUNDING)


@pytest.mark.parametrize("stateful", [True, False])
def test_a_training_step_moves_every_biLM_weight(allennlp_files, stateful):
    elmo = Elmo(*allennlp_files, 1, requires_grad=True, dropout=0.0, stateful=stateful)
    before = {name: p.detach().clone() for name, p in elmo.named_parameters()}
    optimizer = torch.optim.SGD(elmo.parameters(), lr=0.1)
    ids = batch_to_ids([SENTENCE])
    first = elmo(ids)["elmo_representations"][0].detach()
    elmo.reset_states()
    elmo(ids)["elmo_representations"][0].pow(2).sum().backward()
    optimizer.step()
    moved = [name for name, p in elmo.named_parameters() if not torch.equal(p, before[name])]
    assert sorted(moved) == sorted(before)
    elmo.reset_states()
    with torch.no_grad():  # the kept products and the warm start follow the new weights
        assert not torch.allclose(elmo(ids)["elmo_representations"][0], first)


def test_without_requires_grad_nothing_of_the_biLM_learns(allennlp_files):
    elmo = Elmo(*allennlp_files, 2)
    learning = sorted(name for name, p in elmo.named_parameters() if p.requires_grad)
    assert learning == sorted(f"scalar_mix_{k}.{p}" for k in range(2) for p in ("gamma", *(f"scalar_parameters.{i}" for i in range(3))))


@pytest.mark.parametrize("stateful", [False, True])
def test_within_a_batch_budget_the_biLM_runs_in_pieces_with_the_gradients_of_one_batch(allennlp_files, monkeypatch, stateful):
    """``max_batch_tokens=20``: five sentences run in pieces of at most 20 padded tokens, each run again in the
    backward pass; the vectors (in the rows' order), the carried state and the gradients are those of one batch."""
    from tests.runtime.test_runtime import record_bilm_runs

    sentences = [SENTENCE, SENTENCE[:2], SENTENCE[1:], ["One"], SENTENCE[::-1]]
    steps = []
    for budget in (10_000, 20):
        elmo = Elmo(*allennlp_files, 1, requires_grad=True, dropout=0.0, stateful=stateful, initial_state="zeros",
                    max_batch_tokens=budget)
        runs = record_bilm_runs(monkeypatch)
        outputs = [elmo(batch_to_ids(sentences))["elmo_representations"][0] for _ in range(2)]
        upstream = torch.randn(outputs[0].shape, generator=torch.Generator().manual_seed(0))
        sum((x * upstream).sum() for x in outputs).backward()
        grads = {name: p.grad for name, p in elmo._elmo_lstm.encoder.bilm.named_parameters()}
        steps.append((outputs, grads, elmo._elmo_lstm.runtime.carried.state, runs))
    (whole, whole_grads, whole_state, _), (pieces, piece_grads, piece_state, runs) = steps
    for x, y in zip(pieces, whole):
        torch.testing.assert_close(x, y, **ROUNDING)
    for name, grad in whole_grads.items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(piece_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)
    if stateful:
        torch.testing.assert_close(piece_state.h, whole_state.h, **ROUNDING)
        torch.testing.assert_close(piece_state.c, whole_state.c, **ROUNDING)
    # rows of 8, 4, 7, 3 and 8 tokens with their marks, longest first: (8, 8), (7, 4), (3), each run twice, in two calls
    assert all(padded <= 20 for _, padded, _ in runs) and len(runs) == 2 * 2 * 3
