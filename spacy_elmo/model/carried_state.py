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
        if self.state is None:
            return start
        carried = min(rows, self.state.rows)
        h, c = start.h.clone(), start.c.clone()
        h[:, :, :carried] = self.state.h[:, :, :carried]
        c[:, :, :carried] = self.state.c[:, :, :carried]
        return BiLmState(h, c)

    def update(self, final: BiLmState) -> None:
        """Keep the final state of a call's rows, and of older rows beyond them."""
        final = final.detach()
        if self.state is None or self.state.rows <= final.rows:
            self.state = final
            return
        h, c = self.state.h.clone(), self.state.c.clone()
        h[:, :, : final.rows] = final.h
        c[:, :, : final.rows] = final.c
        self.state = BiLmState(h, c)
