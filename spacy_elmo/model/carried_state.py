"""The references' stateful mode: each batch row starts where the same row of the previous call ended."""
from typing import Optional

from .bilm import BiLmState
from .encoder import ElmoEncoder


class CarriedState:
    """LSTM state carried row by row across calls, exactly as AllenNLP and bilm-tf do.

    Row ``r`` of a call starts from the final state of row ``r`` of the most recent call that had
    such a row; new rows start from the encoder's initial state (zeros for ``"auto"``). A call with fewer rows leaves
    the state of the rows beyond it untouched.
    """

    def __init__(self) -> None:
        self.state: Optional[BiLmState] = None

    def reset(self) -> None:
        self.state = None

    def start(self, encoder: ElmoEncoder, rows: int) -> BiLmState:
        """The starting state of a call with ``rows`` rows."""
        start = encoder.start_state(rows, stateful=True)
        return start if self.state is None else _overlay(start, self.state)

    def update(self, final: BiLmState) -> None:
        """Keep the final state of a call's rows, and of older rows beyond them."""
        final = final.detach()
        self.state = final if self.state is None or self.state.rows <= final.rows else _overlay(self.state, final)


def _overlay(base: BiLmState, top: BiLmState) -> BiLmState:
    """``base`` with its first rows (as many as both have) taken from ``top``."""
    n = min(base.rows, top.rows)
    h, c = base.h.clone(), base.c.clone()
    h[:, :, :n], c[:, :, :n] = top.h[:, :, :n], top.c[:, :, :n]
    return BiLmState(h, c)
