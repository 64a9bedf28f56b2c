"""Where studies live: an Optuna storage from a URL, with clear errors and patient retries.

- nothing given: SQLite at ``results/<name>/study.db``
- ``sqlite:///path``, ``postgresql://...``, ``mysql://...``: Optuna's RDB storage
- ``journal:PATH`` or a path ending in ``.journal``: Optuna's journal file (no database needed;
  several processes on one machine or a shared file system)
- ``env:VAR``: the URL is in the environment variable ``VAR`` (keeps passwords out of recipes);
  ``$NORMSEARCH_STORAGE`` is used when neither the recipe nor ``--storage`` names a storage

Passwords are masked (:mod:`normsearch._secrets`) in every message and file.

Studies are plain Optuna studies: the ``optuna`` command line and optuna-dashboard read them.
"""

from __future__ import annotations

import logging
import os
import random
import time
import weakref
from pathlib import Path
from typing import Callable, TypeVar

from ._secrets import is_masked, mask_text, mask_url, remember
from .errors import NormsearchError

log = logging.getLogger("normsearch")
T = TypeVar("T")

ENV_DEFAULT = "NORMSEARCH_STORAGE"  # the storage URL when neither the recipe nor --storage names one
ENV_PREFIX = "env:"

mask = mask_url  # the one masking function, under its older name


def from_env(value: str | None, what: str = "storage") -> str | None:
    """``env:VAR`` -> the URL in ``$VAR`` (a NormsearchError naming VAR if it is unset or empty);
    anything else unchanged."""
    if not value or not value.startswith(ENV_PREFIX):
        return value
    var = value[len(ENV_PREFIX):]
    if not var.isidentifier():
        raise NormsearchError(f"{what} {value!r}: env: names an environment variable, e.g. env:NORMSEARCH_DB")
    url = os.environ.get(var, "").strip()
    if not url:
        raise NormsearchError(f"{what} {value}: the environment variable {var} is not set")
    remember(url)
    return url


def default_storage() -> str | None:
    """``env:NORMSEARCH_STORAGE`` when that variable is set, else None (SQLite in the results folder)."""
    return ENV_PREFIX + ENV_DEFAULT if os.environ.get(ENV_DEFAULT, "").strip() else None


def check_storage(url: str) -> str | None:
    """What is wrong with a storage URL that can be told without opening it (and without creating
    anything), or None: not a URL, a masked password, a SQLite or journal folder that cannot be made."""
    if is_masked(url):
        return (f"storage {url}: its password is not kept in results files; give --storage URL, or keep the URL "
                f"in an environment variable (storage: env:VAR, or ${ENV_DEFAULT})")
    if is_journal(url):
        return folder_problem(_journal_path(url).parent, f"journal storage {_journal_path(url)}", create=False)
    if "://" not in url:
        return (f"storage {mask_url(url)!r} is neither a database URL (sqlite:///..., postgresql://...) nor a "
                f"journal file (journal:PATH or *.journal)")
    try:
        from sqlalchemy.engine import make_url

        make_url(url)
    except Exception as e:  # sqlalchemy.exc.ArgumentError and friends
        return f"storage {mask_url(url)}: not a valid database URL ({mask_text(str(e).splitlines()[0])})"
    path = _sqlite_path(url)
    if path is not None:
        return folder_problem(path.parent, f"storage {mask_url(url)}", create=True, file=path)
    return None


def _sqlite_path(url: str) -> Path | None:
    if not url.startswith("sqlite"):
        return None
    path = url.split(":///", 1)[-1].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" and "://" not in path else None


def folder_problem(folder: Path, what: str, create: bool, file: Path | None = None) -> str | None:
    """Why ``folder`` cannot hold a new file (or be made, with ``create``), or None; touches nothing."""
    if file is not None and file.exists() and not file.is_file():
        return f"{what}: {file} is not a file"
    probe = folder
    while not probe.exists():
        if not create:
            return f"{what}: the folder {folder} does not exist"
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{what}: {probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{what}: the folder {probe} is not writable"
    return None


def require_existing(url: str) -> None:
    """For commands that only read: a SQLite or journal file that is not there is an error (opening
    it would create an empty one); other URLs are checked by :func:`check_storage` only."""
    problem = check_storage(url)
    if problem:
        raise NormsearchError(problem)
    local = _journal_path(url) if is_journal(url) else _sqlite_path(url)
    if local is not None and not local.is_file():
        raise NormsearchError(f"storage {mask_url(url)}: no such file {local}; is the URL right, and has the "
                              f"study run?")


def is_journal(url: str) -> bool:
    return url.startswith("journal:") or url.endswith((".journal", ".jsonl"))


def _journal_path(url: str) -> Path:
    return Path(url[len("journal:"):] if url.startswith("journal:") else url)


def open_storage(url: str, create: bool = True):
    """An Optuna storage for ``url``; a storage that cannot be opened is a NormsearchError that says
    why (unreachable, refused password, missing driver). ``create=False`` (read-only commands): a
    SQLite or journal file that does not exist is an error, not a new empty file."""
    import optuna

    remember(url)
    problem = check_storage(url)
    if problem:
        raise NormsearchError(problem)
    if not create:
        require_existing(url)
    local = _journal_path(url) if is_journal(url) else _sqlite_path(url)
    if is_journal(url):
        from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

        path = _journal_path(url)
        backend = JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path)))
        return optuna.storages.JournalStorage(backend)
    engine_kwargs: dict = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        if local is not None:
            try:
                local.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise NormsearchError(f"storage {mask_url(url)}: cannot make the folder {local.parent} "
                                      f"({e.strerror})") from None
        engine_kwargs = {"connect_args": {"timeout": 60}}
    elif url.startswith("postgresql"):
        engine_kwargs["connect_args"] = {"connect_timeout": 10}
    for attempt in range(5):
        try:
            storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
            _opened.add(storage)
            return storage
        except ImportError as e:
            raise NormsearchError(f"storage {mask_url(url)}: the database driver is missing ({mask_text(str(e))}); "
                                  f"for PostgreSQL: pip install 'normsearch[postgres]'") from None
        except Exception as e:  # sqlalchemy errors: unreachable, refused, bad URL
            if attempt < 4 and _creation_race(e):  # workers that start together on an empty database
                time.sleep(0.5 + random.random())
                continue
            raise NormsearchError(f"cannot open storage {mask_url(url)}: {_reason(e)}") from None
    raise AssertionError("unreachable")  # pragma: no cover


_opened: weakref.WeakSet = weakref.WeakSet()  # the RDB storages this process opened


def _discard_sessions() -> None:
    """Drop this thread's database session of every open storage, so that a retry starts on a fresh
    one instead of a session left mid-transaction by a lost connection (SQLAlchemy refuses those)."""
    for storage in list(_opened):
        try:
            storage.scoped_session.remove()
        except Exception as e:  # closing a dead connection may itself fail; the pool replaces it
            log.debug("discarding a storage session: %s", e)


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


def describe_error(e: BaseException) -> str:
    """An error's message, with what Optuna's StorageInternalError wraps (its class and first line)
    and every known password masked."""
    cause = e.__cause__
    if cause is not None and type(e).__name__ == "StorageInternalError":
        return mask_text(f"{e} (caused by {type(cause).__name__}: {_why(cause)})")
    return mask_text(str(e))


def _reason(e: BaseException) -> str:
    """One line that says why a storage operation failed, with every known password masked."""
    return mask_text(_why(e))


def _why(e: BaseException) -> str:
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
    # A session whose connection died mid-transaction: the next use of it is refused until it is rolled
    # back ("Can't reconnect until invalid transaction is rolled back", "current transaction is
    # aborted"); :func:`retry` discards the session, and the operation goes through on a fresh one.
    if isinstance(e, (sa.PendingRollbackError, sa.ResourceClosedError)):
        return True
    if isinstance(e, sa.DBAPIError) and "current transaction is aborted" in str(e):
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
            _discard_sessions()
            time.sleep(delay)
            waited += delay
            delay = min(delay * 2, 15.0) * (0.8 + 0.4 * random.random())
