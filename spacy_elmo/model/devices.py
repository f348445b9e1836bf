"""Torch devices named by the user, checked before anything runs on them: a device this machine lacks is a one-line
error, not torch's traceback from deep inside the first tensor moved there."""
import torch

from ..errors import ElmoSettingsError


def check_device(name: str) -> torch.device:
    """The torch device ``name`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``...) if this machine has it; else an
    :class:`ElmoSettingsError` saying what it has."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ElmoSettingsError(f"{name!r} is not a torch device; give cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "torch sees no CUDA device"
            raise ElmoSettingsError(f"device {name!r} is not available here: {why}; use cpu")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ElmoSettingsError(
                f"device {name!r} is not available here: this machine has {count} CUDA device(s), "
                f"cuda:0 to cuda:{count - 1}"
            )
    elif device.type == "meta":
        raise ElmoSettingsError(f"device {name!r} holds no data, so nothing can run there; give cpu, cuda or cuda:N")
    elif device.type != "cpu":
        try:
            torch.empty(0, device=device)
        except (AssertionError, NotImplementedError, RuntimeError):  # torch's way of saying it has no such backend
            raise ElmoSettingsError(f"device {name!r} is not available here: this torch cannot use it; use cpu") from None
    return device

