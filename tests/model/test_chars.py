import numpy as np

from spacy_elmo.model.chars import TokenBatch, first_truncated, token_to_ids, tokens_to_ids

PAD = 261


def test_ascii_token_is_bytes_plus_one_framed_by_word_markers():
    ids = token_to_ids("ab")
    assert ids[:4].tolist() == [259, ord("a") + 1, ord("b") + 1, 260]
    assert (ids[4:] == PAD).all() and ids.shape == (50,)


def test_sentence_boundaries_have_fixed_patterns_and_literal_text_maps_to_them():
    assert token_to_ids("<S>").tolist() == [259, 257, 260] + [PAD] * 47
    assert token_to_ids("</S>").tolist() == [259, 258, 260] + [PAD] * 47


def test_long_token_keeps_first_48_bytes_even_inside_a_multibyte_char():
    token = "é" * 30  # 60 bytes in UTF-8
    ids = token_to_ids(token)
    expected = np.frombuffer("é".encode() * 24, dtype=np.uint8).astype(int) + 1
    assert ids[1:49].tolist() == expected.tolist()
    assert ids[49] == 260


def test_lone_surrogate_encodes_instead_of_raising():
    ids = token_to_ids("a\ud800")
    assert ids[0] == 259 and ids[2:5].tolist() == [0xED + 1, 0xA0 + 1, 0x80 + 1]


def test_shorter_max_chars():
    ids = tokens_to_ids(["abcdef"], max_chars=5)
    assert ids.tolist() == [[259, 98, 99, 100, 260]]


def test_token_batch_indexes_distinct_types_with_boundaries():
    batch = TokenBatch([["a", "b", "a"], ["b"]])
    assert batch.types == ["<S>", "</S>", "a", "b"]
    assert batch.lengths.tolist() == [5, 3]
    assert batch.index.tolist() == [[0, 2, 3, 2, 1], [0, 3, 1, 4, 4]]


def test_empty_batch_and_empty_sentence():
    assert TokenBatch([[]]).index.tolist() == [[0, 1]]
    assert TokenBatch([]).batch_size == 0


def test_first_truncated_counts_bytes_not_characters():
    # 48 bytes fit a 50-position token: 16 Chinese characters (3 bytes each) do, 17 do not.
    assert first_truncated(["a" * 48, "中" * 16, "<S>"], max_chars=50) is None
    assert first_truncated(["ok", "中" * 17, "a" * 49], max_chars=50) == "中" * 17
    assert first_truncated(["abc"], max_chars=4) == "abc"
