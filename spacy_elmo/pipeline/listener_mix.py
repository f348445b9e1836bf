"""The trainable scalar mix of each listener (the fixed mixes are in ``spacy_elmo.model.fixed_mix``).

It is :func:`~spacy_elmo.model.learned_mix.learned_mix` (torch, autograd) per Doc, with optional layer
normalisation of each layer over the Doc's tokens, dropout on the result and an L2 penalty ``l2 * ||s||^2`` that
pulls the weights towards the plain average; its parameters are thinc's (numpy or cupy), seen by torch without a
copy.
"""
from typing import Callable, List, Optional, Tuple

import torch
from spacy.tokens import Doc
from thinc.api import Model, torch2xp, xp2torch
from thinc.types import Floats2d, Floats3d

from ..model.learned_mix import learned_mix
from .architectures import frozen_backprop
from .config_types import check_dropout, check_l2


def build_listener_mix(
    source: Model[List[Doc], List[Floats3d]], *, layer_norm: bool = False, dropout: float = 0.0, l2: float = 0.0
) -> Model[List[Doc], List[Floats2d]]:
    """A trainable mix of the layers ``source`` gives for each Doc; ``nO`` and ``nL`` come from ``source``.

    The mix skips the gradient of its input when ``source`` backpropagates with
    :func:`~spacy_elmo.pipeline.architectures.frozen_backprop` (a frozen biLM).
    """
    check_dropout(dropout)
    check_l2(l2)
    return Model(
        "elmo_scalar_mix",
        _forward,
        init=_init,
        layers=[source],
        params={"scalars": None, "gamma": None},
        dims={"nO": None, "nL": None},
        # Not named "dropout_rate": spaCy sets that on every layer to the training dropout.
        attrs={"layer_norm": layer_norm, "mix_dropout": dropout, "l2": l2},
    )


def _init(model: Model, X: Optional[List[Doc]] = None, Y: Optional[List[Floats2d]] = None) -> None:
    source = model.layers[0]
    source.initialize(X=X)  # a listener node's, or the biLM's, init sets nL and nO, or raises
    n_layers = source.get_dim("nL")
    model.set_dim("nL", n_layers)
    model.set_dim("nO", source.get_dim("nO"))
    model.set_param("scalars", model.ops.alloc1f(n_layers))
    model.set_param("gamma", model.ops.asarray1f([1.0]))


def _forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    layers, backprop_layers = model.layers[0](docs, is_train)
    wants_input_grad = is_train and backprop_layers is not frozen_backprop
    scalars, gamma = (xp2torch(model.get_param(name), requires_grad=is_train) for name in ("scalars", "gamma"))
    inputs = [xp2torch(X, requires_grad=wants_input_grad) for X in layers]
    rate = model.attrs["mix_dropout"] if is_train else 0.0
    with torch.set_grad_enabled(is_train):
        outputs = [
            torch.nn.functional.dropout(learned_mix(scalars, gamma, X, layer_norm=model.attrs["layer_norm"]), rate)
            for X in inputs
        ]

    def backprop(d_outputs: List[Floats2d]) -> List[Doc]:
        wrt = [scalars, gamma, *inputs] if wants_input_grad else [scalars, gamma]
        grads = torch.autograd.grad(outputs, wrt, [xp2torch(dY) for dY in d_outputs], materialize_grads=True)
        d_scalars, d_gamma, *d_layers = [torch2xp(grad) for grad in grads]
        model.inc_grad("scalars", d_scalars + 2.0 * model.attrs["l2"] * model.get_param("scalars"))
        model.inc_grad("gamma", d_gamma)
        return backprop_layers(d_layers) if wants_input_grad else []

    return [torch2xp(Y.detach()) for Y in outputs], backprop
