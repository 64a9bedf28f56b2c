"""Where studies live: an Optuna storage from a URL, with clear errors and patient retries.

- nothing given: SQLite at ``results/<name>/study.db``
- ``sqlite:///path``, ``postgresql://...``, ``mysql://...``: Optuna's RDB storage
- ``journal:PATH`` or a path ending in ``.journal``: Optuna's journal file (no database needed;
  several processes on one machine or a shared file system)

Studies are plain Optuna studies: the ``optuna`` command line and optuna-dashboard read them.
"""

from __future__ import annotations

import logging
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
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
    except ImportError as e:
        raise NormsearchError(f"storage {mask(url)}: the database driver is missing ({e}); "
                              f"for PostgreSQL: pip install 'normsearch[postgres]'") from None
    except Exception as e:  # sqlalchemy errors: unreachable, refused, bad URL
        raise NormsearchError(f"cannot open storage {mask(url)}: {_reason(e)}") from None


def _reason(e: BaseException) -> str:
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
    return isinstance(e, optuna.exceptions.StorageInternalError) or isinstance(e, (ConnectionError, TimeoutError))


def retry(fn: Callable[[], T], what: str, patience: float = 300.0) -> T:
    """Run a storage operation; on a transient error wait (exponential backoff with jitter, up to
    ``patience`` seconds in all) and try again. Anything else, or running out of patience, raises."""
    delay, waited = 0.5, 0.0
    while True:
        try:
            return fn()
        except Exception as e:
            if not transient(e) or waited >= patience:
                if transient(e):
                    raise NormsearchError(f"storage unreachable for {waited:.0f} s while trying to {what}: "
                                          f"{_reason(e)}") from None
                raise
            log.warning("storage error while trying to %s (%s); retrying in %.1f s", what, _reason(e), delay)
            time.sleep(delay)
            waited += delay
            delay = min(delay * 2, 15.0) * (0.8 + 0.4 * random.random())
