"""Import spacy-elmo's torch-level modules where spaCy is not installed (a lent GPU machine).

``spacy_elmo/__init__.py`` imports the spaCy pipeline; :func:`load_package` registers the package without
running it, so that ``spacy_elmo.pretrain`` and ``spacy_elmo.model`` import with torch, numpy, h5py and tqdm
(plus confection and pydantic for configs, carried as wheels by scripts/gpu_bundle.py).
"""
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_package() -> None:
    """Make ``import spacy_elmo.<module>`` work without running the package's ``__init__`` (which needs spaCy)."""
    try:
        import spacy  # noqa: F401  (installed: the package imports as usual)
    except ImportError:
        package = types.ModuleType("spacy_elmo")
        package.__path__ = [str(ROOT / "spacy_elmo")]
        sys.modules.setdefault("spacy_elmo", package)
