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
