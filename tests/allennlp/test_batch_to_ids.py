"""batch_to_ids against AllenNLP's documented character layout, written out by hand for each token."""
import pytest
import torch

from spacy_elmo.allennlp import batch_to_ids
from spacy_elmo.errors import ElmoSettingsError

# AllenNLP's character ids before the +1 shift: 256 <S>-char, 257 </S>-char, 258 begin of word, 259 end of word,
# 260 padding; each id is then shifted by one so that 0 marks a padding token.
BOS_CHAR, EOS_CHAR, BOW, EOW, PAD = 257, 258, 259, 260, 261


def by_hand(data: bytes) -> list:
    """A token's 50 ids from its (already cut) bytes."""
    ids = [BOW] + [b + 1 for b in data] + [EOW]
    return ids + [PAD] * (50 - len(ids))


@pytest.mark.parametrize(
    "token, expected",
    [
        ("a", by_hand(b"a")),
        ("", by_hand(b"")),
        ("é", by_hand(bytes([0xC3, 0xA9]))),
        ("中文", by_hand(bytes([0xE4, 0xB8, 0xAD, 0xE6, 0x96, 0x87]))),
        ("x" * 60, by_hand(b"x" * 48)),
        # 17 three-byte characters are 51 bytes: the 48 kept end inside the 17th character.
        ("中" * 17, by_hand((b"\xe4\xb8\xad" * 17)[:48])),
        ("<S>", [BOW, BOS_CHAR, EOW] + [PAD] * 47),
        ("</S>", [BOW, EOS_CHAR, EOW] + [PAD] * 47),
        ("\x00", by_hand(b"\x00")),
    ],
    ids=["ascii", "empty", "latin", "cjk", "long", "cut-inside-a-character", "bos", "eos", "nul"],
)
def test_token_ids_follow_allennlps_layout(token, expected):
    ids = batch_to_ids([[token]])
    assert ids.dtype == torch.int64
    assert ids.shape == (1, 1, 50)
    assert ids[0, 0].tolist() == expected


def test_shorter_sentences_are_padded_with_zero_tokens():
    ids = batch_to_ids([["a", "b", "c"], ["d"], []])
    assert ids.shape == (3, 3, 50)
    assert ids[1, 0].tolist() == by_hand(b"d")
    assert not ids[1, 1:].any() and not ids[2].any()


def test_a_string_instead_of_a_list_of_sentences_is_refused():
    with pytest.raises(ElmoSettingsError, match="^batch must be a list of tokenised sentences"):
        batch_to_ids(["a sentence"])


def test_sentences_may_come_as_any_iterables():
    expected = batch_to_ids([["a", "b"], ["c"]])
    assert torch.equal(batch_to_ids(iter([("a", "b"), iter(["c"])])), expected)
