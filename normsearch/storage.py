"""Where studies live: an Optuna storage from a URL, with clear errors and patient retries.

- nothing given: SQLite at ``results/<name>/study.db``
- ``sqlite:///path``, ``postgresql://...``, ``mysql://...``: Optuna's RDB storage
- ``journal:PATH`` or a path ending in ``.journal``: Optuna's journal file (no database needed;
  several processes on one machine or a shared file system)

Studies are plain Optuna studies: the ``optuna`` command line and optuna-dashboard read them.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from pathlib import Path
from typing import Callable, TypeVar

from .errors import NormsearchError

log = logging.getLogger("normsearch")
T = TypeVar("T")


def mask(url: str) -> str:
    """The URL with its password hidden."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def mask_recipe(raw: dict) -> dict:
    """A resolved recipe (plain data) with the password of its storage URL hidden: for files people
    commit."""
    out = dict(raw)
    if isinstance(out.get("storage"), str):
        out["storage"] = mask(out["storage"])
    return out


def is_journal(url: str) -> bool:
    return url.startswith("journal:") or url.endswith((".journal", ".jsonl"))


def _journal_path(url: str) -> Path:
    return Path(url[len("journal:"):] if url.startswith("journal:") else url)


def open_storage(url: str):
    """An Optuna storage for ``url``; a storage that cannot be opened is a NormsearchError that says
    why (unreachable, refused password, missing driver)."""
    import optuna

    if is_journal(url):
        from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

        path = _journal_path(url)
        if not path.parent.is_dir():
            raise NormsearchError(f"journal storage {path}: the folder {path.parent} does not exist")
        backend = JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path)))
        return optuna.storages.JournalStorage(backend)
    if "://" not in url:
        raise NormsearchError(
            f"storage {url!r} is neither a database URL (sqlite:///..., postgresql://...) nor a journal "
            f"file (journal:PATH or *.journal)"
        )
    engine_kwargs: dict = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        path = url.split(":///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine_kwargs = {"connect_args": {"timeout": 60}}
    elif url.startswith("postgresql"):
        engine_kwargs["connect_args"] = {"connect_timeout": 10}
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
        except ImportError as e:
            raise NormsearchError(f"storage {mask(url)}: the database driver is missing ({e}); "
                                  f"for PostgreSQL: pip install 'normsearch[postgres]'") from None
        except Exception as e:  # sqlalchemy errors: unreachable, refused, bad URL
            if attempt < 4 and _creation_race(e):  # workers that start together on an empty database
                time.sleep(0.5 + random.random())
                continue
            raise NormsearchError(f"cannot open storage {mask(url)}: {_reason(e)}") from None
    raise AssertionError("unreachable")  # pragma: no cover


def _creation_race(e: BaseException) -> bool:
    """Two processes created Optuna's tables at once (SQLite: 'table studies already exists' or a
    second row for alembic_version; PostgreSQL: a duplicate key in pg_type); the loser only has to
    open the storage again."""
    try:
        from sqlalchemy import exc as sa
    except ImportError:  # pragma: no cover
        return False
    text = str(e)
    races = ("already exists", "duplicate key", "UNIQUE constraint failed: alembic_version")
    return isinstance(e, sa.SQLAlchemyError) and any(r in text for r in races)


def _reason(e: BaseException) -> str:
    cause = e.__cause__
    if cause is not None and type(e).__name__ == "StorageInternalError":  # Optuna's wrapper: say why
        e = cause
    text = str(getattr(e, "orig", None) or e).strip().splitlines()
    text = [t.strip() for t in text if t.strip()]
    first = text[0] if text else type(e).__name__
    for line in text:
        if "password authentication failed" in line or "does not exist" in line:
            return line
    if "Connection refused" in " ".join(text):
        return "connection refused; is the database server running and is the address right?"
    return first[:300]


def transient(e: BaseException) -> bool:
    """A storage error worth retrying: the database restarted, the connection dropped, SQLite was
    busy."""
    try:
        from sqlalchemy import exc as sa
    except ImportError:  # pragma: no cover - optuna depends on sqlalchemy
        return False
    import optuna

    if isinstance(e, (sa.OperationalError, sa.InterfaceError, sa.DisconnectionError)):
        return True
    if isinstance(e, sa.DBAPIError) and e.connection_invalidated:
        return True
    if isinstance(e, optuna.exceptions.StorageInternalError):
        # Optuna wraps every database error of a session in this; judge by what it wraps
        return True if e.__cause__ is None else transient(e.__cause__)
    return isinstance(e, (ConnectionError, TimeoutError))


_last_trouble = 0.0  # time.monotonic() of this process's last transient storage error


def note_trouble() -> None:
    """Record that the storage just failed in a way worth retrying (see :func:`last_trouble`)."""
    global _last_trouble
    _last_trouble = time.monotonic()


def last_trouble() -> float:
    """When (``time.monotonic()``) this process last met a transient storage error; 0.0 if never.
    Another worker's heartbeat that stood still across that time may have been held back by the
    same outage."""
    return _last_trouble


def default_patience() -> float:
    """How long a storage operation is retried: ``$NORMSEARCH_STORAGE_PATIENCE`` seconds, else 300."""
    try:
        return float(os.environ.get("NORMSEARCH_STORAGE_PATIENCE") or 300.0)
    except ValueError:
        raise NormsearchError("NORMSEARCH_STORAGE_PATIENCE must be a number of seconds") from None


def retry(fn: Callable[[], T], what: str, patience: float | None = None) -> T:
    """Run a storage operation; on a transient error wait (exponential backoff with jitter, up to
    ``patience`` seconds in all, default :func:`default_patience`) and try again. Anything else, or
    running out of patience, raises: a storage that stays unreachable is a NormsearchError."""
    patience = default_patience() if patience is None else patience
    delay, waited = 0.5, 0.0
    while True:
        try:
            return fn()
        except Exception as e:
            if transient(e):
                note_trouble()
            if not transient(e) or waited >= patience:
                if transient(e):
                    raise NormsearchError(f"storage unreachable for {waited:.0f} s while trying to {what}: "
                                          f"{_reason(e)}") from None
                raise
            log.warning("storage error while trying to %s (%s); retrying in %.1f s", what, _reason(e), delay)
            time.sleep(delay)
            waited += delay
            delay = min(delay * 2, 15.0) * (0.8 + 0.4 * random.random())
