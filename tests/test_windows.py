"""Windows: sequences cut under a token cap (``cut_windows``) and their layers put back (``join_windows``)."""
import numpy as np

from spacy_elmo.util.windows import Window, cut_windows, join_windows, window_tokens


def test_windows_tile_each_span_under_the_cap_sequence_after_sequence():
    spans = [[(0, 7)], [], [(0, 2), (2, 7)], [(0, 0)]]
    assert cut_windows(spans, 3) == [
        Window(0, 0, 3), Window(0, 3, 6), Window(0, 6, 7),
        Window(2, 0, 2), Window(2, 2, 5), Window(2, 5, 7),
    ]  # fmt: skip


def test_layers_laid_end_to_end_come_back_as_each_sequences_tokens():
    """Each token's "layers" are its own (sequence, position) code, so the join must give every sequence its tokens
    in order; a sequence without tokens gets an empty slice."""
    sequences = [[f"{s}:{t}" for t in range(n)] for s, n in enumerate([7, 0, 5, 1])]
    windows = cut_windows([[(0, len(seq))] for seq in sequences], 2)
    per_window = [np.array([[[100 * w.seq + t] for t in range(w.start, w.end)]], dtype=np.float32) for w in windows]
    assert window_tokens(sequences, windows)[:5] == [["0:0", "0:1"], ["0:2", "0:3"], ["0:4", "0:5"], ["0:6"], ["2:0", "2:1"]]
    joined = join_windows(windows, np.concatenate(per_window, axis=1), len(sequences))
    for s, (seq, layers) in enumerate(zip(sequences, joined)):
        assert layers.shape == (1, len(seq), 1)
        assert layers[0, :, 0].tolist() == [100 * s + t for t in range(len(seq))]
