"""What the tests of the AllenNLP-compatible API share: the reference fixture's sentences and expected top layers."""
import json
from pathlib import Path
from typing import List, Tuple

import h5py
import numpy as np



def reference_batches(folder: Path, sentences_file: str) -> List[Tuple[List[List[str]], List[np.ndarray]]]:
    """The reference tests' 10 batches in order: batch ``i`` is sentence ``i`` of each of the 3 files, with the top
    layer expected for each, ``(n_tokens, 2 * projection_dim)`` as ``[forward, backward]``."""
    sentences = json.loads((folder / sentences_file).read_text())
    files = [h5py.File(folder / f"lm_embeddings_{k}.hdf5", "r") for k in range(3)]
    batches = []
    for i in range(10):
        expected = [np.concatenate(tuple(files[k][str(i)][()]), axis=-1) for k in range(3)]
        batches.append(([sentences[k][i].split() for k in range(3)], expected))
    return batches
