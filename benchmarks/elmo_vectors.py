"""What the ``elmo`` component stores for a user, read back for the probes: the default ``Token._.elmo`` and the layers.

Both come from one run of the component with its default settings (its default ``mix``, ``initial_state = "auto"``)
plus ``store_layers``, so the probes score exactly the vectors ``nlp.add_pipe("elmo")`` gives, and the other mixes
of the very same layers.
"""
from typing import Iterable, List, Optional, Tuple

import numpy as np
import spacy
from spacy.language import Language
from spacy.tokens import Doc


def elmo_pipeline(options_file: Optional[str] = None, weight_file: Optional[str] = None) -> Language:
    """A blank English pipeline (spaCy's tokenizer) with the ``elmo`` component: default mix, layers kept too."""
    nlp = spacy.blank("en")
    model = {"@architectures": "spacy_elmo.ElmoBiLm.v2", "options_file": options_file, "weight_file": weight_file}
    nlp.add_pipe("elmo", config={"model": model, "store_layers": True})
    return nlp


def elmo_docs(nlp: Language, texts: Iterable[str]) -> List[Doc]:
    """The texts tokenised by spaCy and run through the pipeline."""
    return list(nlp.pipe(texts))


def elmo_docs_from_words(nlp: Language, sentences: Iterable[List[str]]) -> List[Doc]:
    """Pre-tokenised sentences (e.g. a treebank's words) run through the pipeline."""
    return list(nlp.pipe(Doc(nlp.vocab, words=words) for words in sentences))


def stacked_vectors(docs: Iterable[Doc]) -> Tuple[np.ndarray, np.ndarray]:
    """All tokens of ``docs`` in order: ``Token._.elmo`` ``(n_tokens, dim)``, layers ``(n_layers, n_tokens, dim)``."""
    docs = list(docs)
    return np.concatenate([doc._.elmo for doc in docs]), np.concatenate([doc._.elmo_layers for doc in docs], axis=1)
