"""Ways to make one vector of a token's biLM layers, to compare with the component's default mix.

The default ``"average"`` is the plain mean of the layers. A layer with larger vectors then sets most of the mean's
direction: in ``en_gutenberg_tiny`` the context-free token layer (layer 0) has about twice the norm of the LSTM layers,
so two uses of a word can look alike by cosine whatever their contexts. The alternatives here take out that imbalance
(per token, or with fixed per-layer weights that the component's ``mix`` setting could hold), drop layer 0, or keep
every layer side by side.
"""
from typing import Dict

import numpy as np

EPS = 1e-12


def mean_layer_norms(layers: np.ndarray) -> np.ndarray:
    """Mean Euclidean norm of the token vectors of each layer: ``(n_layers,)`` from ``(n_layers, n_tokens, dim)``."""
    return np.linalg.norm(layers, axis=2).mean(axis=1)


def norm_balancing_weights(layer_norms: np.ndarray) -> np.ndarray:
    """Fixed layer weights in proportion to ``1 / mean norm``, summing to 1: each layer adds as much length."""
    inverse = 1.0 / np.maximum(layer_norms, EPS)
    return inverse / inverse.sum()


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Each vector (along the last axis) scaled to length 1 (zero vectors stay zero)."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), EPS)


def layer_mixes(layers: np.ndarray, balancing_weights: np.ndarray) -> Dict[str, np.ndarray]:
    """Token vectors ``(n_tokens, dim')`` by name, from layers ``(n_layers, n_tokens, dim)``.

    ``balancing_weights``: see :func:`norm_balancing_weights`; compute them on data the scores are not taken from
    when a probe is fitted, so that test tokens do not set their own weights.
    """
    n_layers = layers.shape[0]
    mixes = {f"layer {k}" + (" (= mix 'top')" if k == n_layers - 1 else ""): layers[k] for k in range(n_layers)}
    mixes[f"mean of LSTM layers 1-{n_layers - 1}"] = layers[1:].mean(axis=0)
    mixes["mean of L2-normalised layers"] = unit_rows(layers).mean(axis=0)
    mixes["norm-balanced fixed weights"] = np.tensordot(balancing_weights, layers, axes=1)
    mixes["concatenation of layers"] = np.concatenate(list(layers), axis=1)
    return mixes
