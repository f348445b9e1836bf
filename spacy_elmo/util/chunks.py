"""A stream cut into lists of a fixed size (``itertools.batched`` from Python 3.12, as lists)."""
from typing import Iterable, Iterator, List, TypeVar

T = TypeVar("T")


def chunked(items: Iterable[T], size: int) -> Iterator[List[T]]:
    """Consecutive lists of ``size`` items of ``items`` (the last one shorter), read lazily."""
    batch: List[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
