"""The English biLM shipped inside the package, used when no weights are given."""
from pathlib import Path
from typing import Tuple

from .errors import ElmoWeightsError

DEFAULT_MODEL_DIR = Path(__file__).parent / "data" / "en_gutenberg_tiny"


def default_model_files() -> Tuple[Path, Path]:
    """Paths of the embedded model's ``options.json`` and ``weights.hdf5``."""
    options, weights = DEFAULT_MODEL_DIR / "options.json", DEFAULT_MODEL_DIR / "weights.hdf5"
    if not (options.exists() and weights.exists()):
        raise ElmoWeightsError(
            f"The embedded default ELMo model is missing from {DEFAULT_MODEL_DIR}; reinstall spacy-elmo, or pass "
            f"options_file and weight_file explicitly."
        )
    return options, weights
