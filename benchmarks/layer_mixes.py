"""Ways to make one vector of a token's biLM layers, to compare with the component's fixed mixes.

``"average"`` is the plain mean of the layers. A layer with larger vectors then sets most of the mean's direction:
in ``en_gutenberg_tiny`` the context-free token layer (layer 0, the same vector for every use of a word) has about
twice the norm of the LSTM layers, so two uses of a word look alike by cosine whatever their contexts. The
alternatives here drop layer 0 (``"top"``, the mean of the LSTM layers, the LSTM layers each scaled to unit mean
norm), take out the imbalance per token or with fixed per-layer weights, subtract each layer's mean vector over
reference text (``centre``), or keep every layer side by side.
"""
from typing import Dict, Optional

import numpy as np

from spacy_elmo.model.fixed_mix import DEFAULT_MIX

EPS = 1e-12
DEFAULT_VIEW = f"default Token._.elmo (mix {DEFAULT_MIX!r})"


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


def layer_mixes(layers: np.ndarray, layer_norms: np.ndarray, centre: Optional[np.ndarray] = None) -> Dict[str, np.ndarray]:
    """Token vectors ``(n_tokens, dim')`` by name, from layers ``(n_layers, n_tokens, dim)``.

    ``layer_norms``: each layer's mean token norm (:func:`mean_layer_norms`), for the fixed weights that scale the
    layers; ``centre``: each layer's mean vector ``(n_layers, dim)``, for the centred mixes (left out when None).
    Compute both on data the scores are not taken from, so that scored tokens do not set their own weights.
    """
    n_layers = layers.shape[0]
    mixes = {f"layer {k}" + (" (= mix 'top')" if k == n_layers - 1 else ""): layers[k] for k in range(n_layers)}
    mixes[f"mean of LSTM layers 1-{n_layers - 1}"] = layers[1:].mean(axis=0)
    lstm_weights = np.concatenate([[0.0], norm_balancing_weights(layer_norms[1:])]).astype(layers.dtype)
    mixes["LSTM layers at unit mean norm"] = np.tensordot(lstm_weights, layers, axes=1)
    mixes["norm-balanced fixed weights"] = np.tensordot(norm_balancing_weights(layer_norms), layers, axes=1)
    mixes["mean of L2-normalised layers"] = unit_rows(layers).mean(axis=0)
    if centre is not None:
        centred = layers - centre[:, None, :]
        mixes["centred average"] = centred.mean(axis=0)
        mixes["centred top"] = centred[-1]
    mixes["concatenation of layers"] = np.concatenate(list(layers), axis=1)
    return mixes
