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
