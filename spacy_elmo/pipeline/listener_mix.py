"""The trainable scalar mix of each listener (the fixed mixes are in ``spacy_elmo.model.fixed_mix``).

It is Peters et al. (2018), eq. 1: ``gamma * sum_j softmax(s)_j * h_j``, per Doc,
with optional layer normalisation of each layer over the Doc's tokens, dropout on the result
and an L2 penalty ``l2 * ||s||^2`` that pulls the weights towards the plain average.
It is written with xp operations (numpy or cupy) and explicit gradients.
"""
from typing import Callable, List, Optional, Tuple

from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats2d, Floats3d

from ..errors import ElmoPipelineError
from .architectures import frozen_backprop
from .config_types import check_dropout, check_l2

LAYER_NORM_EPS = 1e-12


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
    source.initialize(X=X)
    if not (source.has_dim("nL") and source.has_dim("nO")):
        raise ElmoPipelineError(
            "The ELMo listener does not know the biLM's size: put an 'elmo' component before this component in "
            "the pipeline (its name must match the listener's 'upstream', or use '*') and call nlp.initialize()"
        )
    n_layers = source.get_dim("nL")
    model.set_dim("nL", n_layers)
    model.set_dim("nO", source.get_dim("nO"))
    model.set_param("scalars", model.ops.alloc1f(n_layers))
    model.set_param("gamma", model.ops.asarray1f([1.0]))


def _forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    xp = model.ops.xp
    layers, backprop_layers = model.layers[0](docs, is_train)
    scalars = model.get_param("scalars")
    gamma = model.get_param("gamma")[0]
    weights = model.ops.softmax(scalars)
    rate = model.attrs["mix_dropout"] if is_train else 0.0
    outputs, saved = [], []
    for X in layers:
        X_norm, inv_std = _layer_norm(xp, X) if model.attrs["layer_norm"] else (X, None)
        mixed = xp.tensordot(weights, X_norm, axes=1)
        mask = model.ops.get_dropout_mask(mixed.shape, rate) if rate > 0 else None
        outputs.append(gamma * mixed if mask is None else gamma * mixed * mask)
        saved.append((X_norm, inv_std, mixed, mask))
    wants_input_grad = backprop_layers is not frozen_backprop

    def backprop(d_outputs: List[Floats2d]) -> List[Doc]:
        d_weights = xp.zeros_like(weights)
        d_gamma = 0.0
        d_layers = []
        for dY, (X_norm, inv_std, mixed, mask) in zip(d_outputs, saved):
            if mask is not None:
                dY = dY * mask
            d_gamma += float((dY * mixed).sum())
            d_mixed = gamma * dY
            d_weights += xp.tensordot(X_norm, d_mixed, axes=([1, 2], [0, 1]))
            if wants_input_grad:
                d_norm = weights[:, None, None] * d_mixed[None]
                d_layers.append(d_norm if inv_std is None else _layer_norm_backprop(xp, d_norm, X_norm, inv_std))
        d_scalars = weights * (d_weights - (weights * d_weights).sum())
        model.inc_grad("scalars", d_scalars + 2.0 * model.attrs["l2"] * scalars)
        model.inc_grad("gamma", model.ops.asarray1f([d_gamma]))
        return backprop_layers(d_layers) if wants_input_grad else []

    return outputs, backprop


def _layer_norm(xp, X: Floats3d) -> Tuple[Floats3d, Optional[Floats3d]]:
    """Each layer normalised by its mean and variance over the Doc's tokens and dims (no affine)."""
    if X.shape[1] == 0:
        return X, None
    mean = X.mean(axis=(1, 2), keepdims=True)
    inv_std = 1.0 / xp.sqrt(X.var(axis=(1, 2), keepdims=True) + LAYER_NORM_EPS)
    return (X - mean) * inv_std, inv_std


def _layer_norm_backprop(xp, d_norm: Floats3d, X_norm: Floats3d, inv_std: Floats3d) -> Floats3d:
    mean_d = d_norm.mean(axis=(1, 2), keepdims=True)
    mean_dx = (d_norm * X_norm).mean(axis=(1, 2), keepdims=True)
    return inv_std * (d_norm - mean_d - X_norm * mean_dx)
