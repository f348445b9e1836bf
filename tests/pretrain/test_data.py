import gzip

import pytest

from spacy_elmo.pretrain.data import CorpusError, SentenceStream, StreamStateError, read_sentences, resolve_files
from spacy_elmo.pretrain.vocab import Vocab


def _corpus(tmp_path, n_lines=40):
    plain = tmp_path / "a.txt"
    plain.write_text("".join(f"line {i} has words w{i % 7}\n" for i in range(n_lines // 2)))
    with gzip.open(tmp_path / "b.gz", "wt", encoding="utf-8") as f:
        f.write("".join(f"line {i} has words w{i % 7}\n" for i in range(n_lines // 2, n_lines)))
    return resolve_files(str(tmp_path))


def _first_token_ids(stream, n_batches):
    return [int(s[1]) for _ in range(n_batches) for s in stream.next_batch()]


def test_ranks_split_an_epoch_into_disjoint_halves(tmp_path):
    files = _corpus(tmp_path)
    seen = []
    for rank in (0, 1):
        stream = SentenceStream(files, str.split, batch_tokens=25, seed=0, rank=rank, world_size=2, pool_batches=1)
        seen.append(set(_first_token_ids(stream, 4)))  # 4 batches x 5 sentences = 20 lines = one epoch per rank
    assert seen[0].isdisjoint(seen[1]) and seen[0] | seen[1] == set(range(40))


def test_stream_state_resumes_exactly(tmp_path):
    files = _corpus(tmp_path)
    a = SentenceStream(files, str.split, batch_tokens=12, seed=5, pool_batches=3)
    for _ in range(7):
        a.next_batch()
    b = SentenceStream(files, str.split, batch_tokens=12, seed=5, pool_batches=3)
    b.load_state_dict(a.state_dict())
    assert [a.next_batch() for _ in range(25)] == [b.next_batch() for _ in range(25)]


def test_batches_group_similar_lengths(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("".join(("x " * (1 + i % 9)).strip() + "\n" for i in range(90)))
    stream = SentenceStream(resolve_files(str(path)), str.split, batch_tokens=20, seed=0, pool_batches=10)
    spreads = [max(map(len, b)) - min(map(len, b)) for b in (stream.next_batch() for _ in range(8))]
    assert sum(spreads) / len(spreads) <= 2


def test_long_lines_are_split_and_read_sentences_limits(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text(" ".join(str(i) for i in range(25)) + "\n")
    assert [len(s) for s in read_sentences(str(path), str.split, max_tokens=10)] == [10, 10, 5]
    assert len(read_sentences(str(path), str.split, max_tokens=10, limit=2)) == 2


def test_vocab_is_specials_then_by_frequency(tmp_path):
    vocab = Vocab.build([["b", "a", "b"], ["c", "b", "a"]], size=5)
    assert vocab.words == ["<S>", "</S>", "<UNK>", "b", "a"]
    assert vocab.encode(["a", "zzz"]) == [4, 2]
    vocab.to_file(tmp_path / "v.txt")
    assert Vocab.from_file(tmp_path / "v.txt").words == vocab.words


def test_every_batch_mixes_the_files(tmp_path):
    # Two "books" of 200 lines each: a stream that reads files one after another serves batches of one book.
    for name in ("a", "b"):
        (tmp_path / f"{name}.txt").write_text("".join(f"{name} {i}\n" for i in range(200)))
    stream = SentenceStream(resolve_files(str(tmp_path)), str.split, batch_tokens=40, seed=1, pool_batches=2)
    for _ in range(10):
        books = [s[0] for s in stream.next_batch()]
        assert 4 <= books.count("a") <= 16, books


def test_an_epoch_reads_every_line_once(tmp_path):
    files = _corpus(tmp_path)
    stream = SentenceStream(files, str.split, batch_tokens=5, seed=2, pool_batches=1)
    assert sorted(int(s[1]) for _ in range(40) for s in stream.next_batch()) == list(range(40))


def test_text_without_lines_is_refused_before_any_batch(tmp_path):
    (tmp_path / "blank.txt").write_text("\n   \n\t\n")
    with pytest.raises(CorpusError, match="hold no text"):
        SentenceStream(resolve_files(str(tmp_path)), str.split, batch_tokens=5)
    (tmp_path / "blank.txt").write_text("one line\n")
    with pytest.raises(CorpusError, match="fewer than the 2 training processes"):
        SentenceStream(resolve_files(str(tmp_path)), str.split, batch_tokens=5, rank=1, world_size=2)
    with pytest.raises(CorpusError, match="No text files found"):
        resolve_files(str(tmp_path / "missing*.txt"))


def test_a_moved_corpus_resumes_but_other_text_does_not(tmp_path):
    (tmp_path / "here").mkdir()
    files = _corpus(tmp_path / "here")
    a = SentenceStream(files, str.split, batch_tokens=12, seed=5, pool_batches=3)
    a.next_batch()
    moved = tmp_path / "there"
    moved.mkdir()
    for path in files:
        (moved / path.name).write_bytes(path.read_bytes())
    b = SentenceStream(resolve_files(str(moved)), str.split, batch_tokens=12, seed=5, pool_batches=3)
    b.load_state_dict(a.state_dict())
    assert a.next_batch() == b.next_batch()
    (moved / "a.txt").write_text("just one line\n")
    c = SentenceStream(resolve_files(str(moved)), str.split, batch_tokens=12, seed=5, pool_batches=3)
    with pytest.raises(StreamStateError):
        c.load_state_dict(a.state_dict())


def test_another_number_of_processes_continues_at_the_same_share_of_the_epoch(tmp_path):
    files = _corpus(tmp_path)  # 40 lines
    ranks = [SentenceStream(files, str.split, batch_tokens=5, seed=3, rank=r, world_size=2, pool_batches=1) for r in (0, 1)]
    for stream in ranks:
        for _ in range(3):
            stream.next_batch()  # a batch is one 5-token line: 3 of each rank's 20 lines
    alone = SentenceStream(files, str.split, batch_tokens=5, seed=3, pool_batches=1)
    alone.continue_epoch([s.state_dict() for s in ranks])
    assert (alone.epoch, alone.position) == (0, 6)
    with pytest.raises(StreamStateError, match="rank 0 of 2"):
        alone.load_state_dict(ranks[0].state_dict())
