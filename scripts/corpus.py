"""Convert the project's data sets to spaCy's binary format (.spacy), one Doc per sentence.

    python scripts/corpus.py convert FORMAT TRAIN DEV TEST OUTPUT_DIR [--percent P] [--seed S]
    python scripts/corpus.py sample assets/sample corpus/sample     # the bundled sample, every task

FORMAT:
  conll-ner   CoNLL-2003 style: ``WORD POS CHUNK NER`` per line, IOB2 tags in the last column, blank line between
              sentences, ``-DOCSTART-`` lines ignored                                  -> doc.ents
  char-bio    Character-level IOB2, ``CHAR<TAB>TAG`` per line, blank line between sentences, text written
              without spaces (Weibo NER ``*.char.bio``: Chinese, one token per character)  -> doc.ents
  uner        Universal NER IOB2: ``# text`` comments, tab-separated ``INDEX TOKEN TAG ...`` -> doc.ents
  conllu      Universal Dependencies CoNLL-U (spaCy's conllu converter)  -> tag (XPOS), pos (UPOS), morph, deps
  sst         SST TSV with header ``label<TAB>text`` (labels 0-4, or 0-1 for SST-2) -> doc.cats (exclusive)
  genre       CoNLL-U of UD English-EWT -> doc.cats: the genre named by each ``# sent_id`` prefix
              (answers, email, newsgroup, reviews, weblog), an openly licensed sentence classification task

``--percent`` keeps that share of the training sentences (a seeded random choice, in corpus order), for the
small-data runs (``--percent 10``). One Doc per sentence keeps the biLM's input the sentence, as in the
ELMo paper, for the ELMo runs and the baselines alike.
"""
import random
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

import typer
from spacy.lang.en import English
from spacy.tokens import Doc, DocBin
from spacy.vocab import Vocab

FORMATS = ("conll-ner", "char-bio", "uner", "conllu", "sst", "genre")
SST5_LABELS = ("very_negative", "negative", "neutral", "positive", "very_positive")
SST2_LABELS = ("negative", "positive")
EWT_GENRES = ("answers", "email", "newsgroup", "reviews", "weblog")

Sentence = Tuple[List[str], List[str], Optional[str]]  # words, tags, original text (if given)


def select(n: int, percent: float, seed: int = 0) -> List[int]:
    """Indices of ``percent`` % of ``n`` items (at least one), a seeded random choice kept in order."""
    if not 0 < percent <= 100:
        raise ValueError(f"percent must be in (0, 100], not {percent}")
    if percent >= 100 or n == 0:
        return list(range(n))
    k = max(1, round(n * percent / 100))
    return sorted(random.Random(seed).sample(range(n), k))


def read_columns(lines: Iterable[str], token_col: int, tag_col: int, comments: bool, sep: Optional[str]) -> List[Sentence]:
    """Blank-line separated token-per-line sentences. ``comments``: lines starting with ``#`` are comments
    (``# text = ...`` is kept); otherwise ``#`` is an ordinary token (CoNLL-2003)."""
    sentences: List[Sentence] = []
    words: List[str] = []
    tags: List[str] = []
    text: Optional[str] = None
    for raw in lines:
        line = raw.rstrip("\r\n")
        if comments and line.startswith("#") and not words:
            if line.startswith("# text = "):
                text = line[len("# text = "):]
            continue
        if not line.strip():
            if words:
                sentences.append((words, tags, text))
            words, tags, text = [], [], None
            continue
        cols = line.split(sep)
        if cols[0] == "-DOCSTART-":
            continue
        words.append(cols[token_col])
        tags.append(cols[tag_col])
    if words:
        sentences.append((words, tags, text))
    return sentences


def spaces_from_text(words: Sequence[str], text: Optional[str]) -> List[bool]:
    """``spaces`` for ``words`` by finding them in order in ``text``; a space after every word but the last
    when there is no text or the words don't match it."""
    default = [True] * (len(words) - 1) + [False] if words else []
    if not text:
        return default
    spaces, pos = [], 0
    for word in words:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if not text.startswith(word, pos):
            return default
        pos += len(word)
        spaces.append(pos < len(text) and text[pos].isspace())
    return spaces


def iob_docs(vocab: Vocab, sentences: Iterable[Sentence]) -> Iterable[Doc]:
    for words, tags, text in sentences:
        # IOB2 tags ("O" = annotated as outside); Doc() checks the sequence and makes the entity spans.
        yield Doc(vocab, words=words, spaces=spaces_from_text(words, text), ents=tags)


def conllu_docs(text: str) -> List[Doc]:
    from spacy.training.converters import conllu_to_docs

    return list(conllu_to_docs(text, n_sents=1, no_print=True))


def cats_doc(nlp: English, text: str, label: str, labels: Sequence[str]) -> Doc:
    doc = nlp.make_doc(text)
    doc.cats = {name: float(name == label) for name in labels}
    return doc


def sst_docs(nlp: English, lines: Sequence[str]) -> List[Doc]:
    rows = [line.rstrip("\n").split("\t", 1) for line in lines if line.strip()]
    if rows and rows[0] == ["label", "text"]:
        rows = rows[1:]
    values = sorted({int(label) for label, _ in rows})
    labels = SST2_LABELS if values and max(values) <= 1 else SST5_LABELS
    docs = []
    for label, text in rows:
        text = text.replace("\\/", "/").replace("\\*", "*")  # PTB escapes that spaCy's tokenizer would keep
        docs.append(cats_doc(nlp, text, labels[int(label)], labels))
    return docs


def genre_docs(nlp: English, lines: Sequence[str]) -> List[Doc]:
    docs, sent_id = [], None
    for line in lines:
        if line.startswith("# sent_id = "):
            sent_id = line[len("# sent_id = "):].strip()
        elif line.startswith("# text = ") and sent_id is not None:
            genre = sent_id.split("-", 1)[0]
            if genre not in EWT_GENRES:
                raise ValueError(f"unknown EWT genre {genre!r} in sent_id {sent_id!r}")
            docs.append(cats_doc(nlp, line[len("# text = "):].rstrip("\n"), genre, EWT_GENRES))
            sent_id = None
    return docs


def convert(fmt: str, input_path: Path, percent: float = 100.0, seed: int = 0) -> List[Doc]:
    """The Docs of ``input_path`` in format ``fmt``, subsampled to ``percent`` %."""
    nlp = English()
    with input_path.open(encoding="utf-8") as f:
        lines = f.readlines()
    if fmt == "conll-ner":
        docs = list(iob_docs(nlp.vocab, read_columns(lines, 0, -1, comments=False, sep=None)))
    elif fmt == "char-bio":
        sentences = read_columns(lines, 0, 1, comments=False, sep="\t")
        docs = list(iob_docs(nlp.vocab, [(words, tags, "".join(words)) for words, tags, _ in sentences]))
    elif fmt == "uner":
        docs = list(iob_docs(nlp.vocab, read_columns(lines, 1, 2, comments=True, sep="\t")))
    elif fmt == "conllu":
        docs = conllu_docs("".join(lines))
    elif fmt == "sst":
        docs = sst_docs(nlp, lines)
    elif fmt == "genre":
        docs = genre_docs(nlp, lines)
    else:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if not docs:
        raise ValueError(f"no sentences in {input_path} (format {fmt})")
    return [docs[i] for i in select(len(docs), percent, seed)]


app = typer.Typer(add_completion=False, no_args_is_help=True, help="Convert data sets to .spacy, one Doc per sentence.")

# The bundled sample (assets/sample): task -> (format, folder, file extension).
SAMPLE_TASKS = {
    "ner": ("uner", "uner_english_ewt", "iob2"),
    "tagger": ("conllu", "ud_english_ewt", "conllu"),
    "textcat": ("genre", "ud_english_ewt", "conllu"),
}


def write_splits(fmt: str, paths: Sequence[Path], output_dir: Path, percent: float, seed: int) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    for split, path in zip(("train", "dev", "test"), paths):
        pct = percent if split == "train" else 100.0
        try:
            docs = convert(fmt, path, pct, seed)
        except ValueError as err:
            typer.echo(f"✘ {err}", err=True)
            raise typer.Exit(1)
        out = output_dir / f"{split}.spacy"
        DocBin(docs=docs, store_user_data=False).to_disk(out)
        n_ents = f", {sum(len(doc.ents) for doc in docs)} entities" if fmt in ("conll-ner", "char-bio", "uner") else ""
        typer.echo(f"✔ {out}: {len(docs)} docs, {sum(len(d) for d in docs)} tokens{n_ents} (from {path}, {pct:g}%)")


@app.command("convert")
def convert_cli(
    fmt: str = typer.Argument(..., metavar="FORMAT", help=f"one of: {', '.join(FORMATS)}"),
    train: Path = typer.Argument(..., exists=True, dir_okay=False, help="training file"),
    dev: Path = typer.Argument(..., exists=True, dir_okay=False, help="development file"),
    test: Path = typer.Argument(..., exists=True, dir_okay=False, help="test file"),
    output_dir: Path = typer.Argument(..., file_okay=False, help="writes train.spacy, dev.spacy, test.spacy here"),
    percent: float = typer.Option(100.0, "--percent", "-p", help="share of the training sentences to keep (0-100]"),
    seed: int = typer.Option(0, "--seed", help="seed of the --percent choice"),
) -> None:
    """Convert a train/dev/test triple to .spacy DocBins (--percent: of train only)."""
    write_splits(fmt, (train, dev, test), output_dir, percent, seed)


def doc_lines(docs: Iterable[Doc]) -> List[str]:
    """One line of text per Doc, its tokens separated as in the Doc (pretraining's input format)."""
    return [" ".join(doc.text.split()) for doc in docs if doc.text.strip()]


@app.command("text")
def text_cli(
    corpus_file: Path = typer.Argument(..., exists=True, dir_okay=False, help="a .spacy file (use a training split only)"),
    output_file: Path = typer.Argument(..., dir_okay=False, help="text file to write, one sentence per line"),
) -> None:
    """Write the text of a .spacy corpus, one Doc per line: the input of biLM adaptation (`pretrain`)."""
    docs = DocBin().from_disk(corpus_file).get_docs(English().vocab)
    lines = doc_lines(docs)
    output_file.parent.mkdir(parents=True, exist_ok=True)
    output_file.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    typer.echo(f"✔ {output_file}: {len(lines)} lines (from {corpus_file})")


@app.command("sample")
def sample_cli(
    sample_dir: Path = typer.Argument(..., exists=True, file_okay=False, help="the bundled sample (assets/sample)"),
    output_dir: Path = typer.Argument(..., file_okay=False, help="writes TASK/{train,dev,test}.spacy here"),
) -> None:
    """Convert the bundled sample for every task: UNER -> ner, UD -> tagger, EWT genres -> textcat."""
    for task, (fmt, folder, ext) in SAMPLE_TASKS.items():
        paths = [sample_dir / folder / f"{split}.{ext}" for split in ("train", "dev", "test")]
        for path in paths:
            if not path.exists():
                typer.echo(f"✘ missing sample file {path}", err=True)
                raise typer.Exit(1)
        write_splits(fmt, paths, output_dir / task, 100.0, 0)


if __name__ == "__main__":
    app()
