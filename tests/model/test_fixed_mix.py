"""A fixed mix's weights: "average" and "top" as their names say, and a list only with one weight per layer of the
biLM (the token layer and each LSTM layer)."""
import numpy as np
import pytest

from spacy_elmo.errors import ElmoSettingsError
from spacy_elmo.model.fixed_mix import check_mix_fits, fixed_mix_weights, mix_layers


@pytest.mark.parametrize("mix, n_layers", [([0.5, 0.5], 3), ([0.25] * 4, 3), ([1.0, 0.0, 0.0], 2)])
def test_a_list_of_another_length_than_the_layers_is_refused_naming_both_counts(mix, n_layers):
    with pytest.raises(ElmoSettingsError, match=rf"mix gives {len(mix)} weights, but this biLM has {n_layers} layers"):
        check_mix_fits(mix, n_layers)


@pytest.mark.parametrize("mix, n_layers", [([0.2, 0.3, 0.5], 3), ((1.0, 0.0), 2), ("top", 3), ("average", 7)])
def test_one_weight_per_layer_or_a_name_fits(mix, n_layers):
    check_mix_fits(mix, n_layers)


def test_average_and_top_are_the_weights_their_names_say():
    np.testing.assert_allclose(fixed_mix_weights("average", 4), [0.25] * 4)
    np.testing.assert_array_equal(fixed_mix_weights("top", 3), [0, 0, 1])
    with pytest.raises(ValueError, match="give 3 weights"):
        fixed_mix_weights([1.0], 3)


def test_a_mix_of_whole_layers_is_each_tokens_weighted_sum_in_float32():
    layers = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    by_hand = np.array([[0.25 * layers[0, t, d] + 0.75 * layers[1, t, d] for d in range(4)] for t in range(3)])
    mixed = mix_layers((0.25, 0.75), layers)
    assert mixed.dtype == np.float32
    np.testing.assert_allclose(mixed, by_hand, rtol=1e-6)
