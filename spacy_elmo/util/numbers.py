"""What the settings checks count as a number: an int or a float, not a bool (which Python counts as an int)."""
from typing import Any


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
