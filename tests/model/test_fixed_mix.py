"""A fixed mix's weights must fit the biLM: one per layer (the token layer and each LSTM layer)."""
import pytest

from spacy_elmo.errors import ElmoSettingsError
from spacy_elmo.model.fixed_mix import check_mix_fits


@pytest.mark.parametrize("mix, n_layers", [([0.5, 0.5], 3), ([0.25] * 4, 3), ([1.0, 0.0, 0.0], 2)])
def test_a_list_of_another_length_than_the_layers_is_refused_naming_both_counts(mix, n_layers):
    with pytest.raises(ElmoSettingsError, match=rf"mix gives {len(mix)} weights, but this biLM has {n_layers} layers"):
        check_mix_fits(mix, n_layers)


@pytest.mark.parametrize("mix, n_layers", [([0.2, 0.3, 0.5], 3), ((1.0, 0.0), 2), ("top", 3), ("average", 7)])
def test_one_weight_per_layer_or_a_name_fits(mix, n_layers):
    check_mix_fits(mix, n_layers)
