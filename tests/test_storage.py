"""Storage URLs: the kinds normsearch opens, masked passwords, and workers that create one at once."""

import subprocess
import sys

import pytest

from normsearch.errors import NormsearchError
from normsearch.storage import is_journal, mask, open_storage


def test_masked_passwords_and_journal_urls():
    assert mask("postgresql://user:secret@host:5432/db") == "postgresql://user:***@host:5432/db"
    assert mask("sqlite:///x.db") == "sqlite:///x.db"
    assert is_journal("journal:/tmp/a") and is_journal("study.journal") and not is_journal("sqlite:///a.db")


def test_bad_storage_urls(tmp_path):
    with pytest.raises(NormsearchError, match="neither a database URL"):
        open_storage("results/study.db")
    with pytest.raises(NormsearchError, match="the folder .* does not exist"):
        open_storage(f"journal:{tmp_path / 'nope' / 'x.journal'}")


def test_workers_creating_one_sqlite_storage_at_once(tmp_path):
    """Six processes open a storage that does not exist yet at the same moment: all of them get it."""
    url = f"sqlite:///{tmp_path / 'new.db'}"
    code = f"from normsearch.storage import open_storage; open_storage({url!r}); print('ok')"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(6)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 and out.strip() == "ok" for p, (out, _) in zip(procs, outs)), outs


def test_a_session_left_mid_transaction_by_a_lost_connection_is_discarded_and_the_operation_retried(tmp_path):
    """A database restart can leave a thread's session mid-transaction; SQLAlchemy then refuses it
    (PendingRollbackError, wrapped by Optuna in a StorageInternalError). That is an outage, not bad
    data: retry drops the session and the operation goes through on a fresh one; a real data error
    is still raised at once, and the failure text names what Optuna's wrapper hides."""
    import optuna
    from sqlalchemy import exc as sa

    from normsearch.storage import describe_error, retry

    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    before = storage.scoped_session()
    calls = []

    def flaky():
        calls.append(storage.scoped_session())
        if len(calls) == 1:
            try:
                raise sa.PendingRollbackError("Can't reconnect until invalid transaction is rolled back")
            except sa.PendingRollbackError as cause:
                raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from cause
        return "stored"

    assert retry(flaky, "store x", patience=5) == "stored"
    assert len(calls) == 2 and calls[0] is before and calls[1] is not before  # the retry ran on a new session

    def bad_data():
        try:
            raise sa.DataError("value too long for type character varying(512)", None, Exception("too long"))
        except sa.DataError as cause:
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from cause

    with pytest.raises(optuna.exceptions.StorageInternalError) as e:
        retry(bad_data, "store y", patience=5)
    assert "caused by DataError" in describe_error(e.value) and "too long" in describe_error(e.value)
