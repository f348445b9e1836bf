"""The training layer cache: bounded by bytes, fills once, keeps its own copies."""
import copy

import numpy as np

from spacy_elmo.pipeline.layer_cache import LayerCache


def test_fills_until_the_budget_and_then_takes_nothing():
    block = np.ones((3, 4, 8), dtype=np.float32)  # 384 bytes
    cache = LayerCache(max_bytes=2 * block.nbytes)
    assert cache.add(("a",), block) and cache.add(("b",), block)
    assert not cache.add(("c",), block) and cache.get(("c",)) is None
    assert cache.nbytes == 2 * block.nbytes and len(cache) == 2
    np.testing.assert_array_equal(cache.get(("a",)), block)
    assert (cache.hits, cache.misses) == (1, 1)


def test_stores_a_copy_not_a_view_of_a_larger_buffer():
    packed = np.arange(24, dtype=np.float32).reshape(1, 6, 4)
    cache = LayerCache(max_bytes=10_000)
    cache.add(("x",), packed[:, 2:4])
    packed[:] = 0
    stored = cache.get(("x",))
    assert stored.base is None and stored[0, 0, 0] == 8.0
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0


def test_a_copy_has_the_same_budget_and_nothing_stored():
    cache = LayerCache(max_bytes=10_000)
    cache.add(("x",), np.ones((1, 2, 4), dtype=np.float32))
    copied = copy.deepcopy(cache)
    assert copied.max_bytes == 10_000 and len(copied) == 0 and len(cache) == 1
