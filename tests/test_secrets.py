"""Passwords in storage URLs: masked in every line and file the tool writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from normsearch._secrets import is_masked, mask_recipe, mask_text, mask_url, secrets_of
from normsearch.cli import app
from normsearch.errors import NormsearchError
from normsearch.recipe import load_recipe
from normsearch.storage import from_env, open_storage

SECRET = "Hunter2-s3cret"


@pytest.mark.parametrize("url,masked", [
    ("postgresql://ann:secret@db:5432/x", "postgresql://ann:***@db:5432/x"),
    ("postgresql://ann:p@ss@db/x", "postgresql://ann:***@db/x"),  # an unencoded @: SQLAlchemy cuts it at the first
    ("postgresql://ann:pa/ss:w@db/x", "postgresql://ann:***@db/x"),
    ("postgresql://ann:p%40ss%2Fw@db/x", "postgresql://ann:***@db/x"),
    ("postgresql+psycopg://ann:a:b?c@db/x?sslmode=require", "postgresql+psycopg://ann:***@db/x?sslmode=require"),
    ("postgresql://db/x?user=ann&password=secret&sslmode=require", "postgresql://db/x?user=ann&password=***&sslmode=require"),
    ("mysql://ann@db/x?passwd=AAA1&pwd=BBB2&sslpassword=CCC3&api_token=DDD4&client_secret=EEE5",
     "mysql://ann@db/x?passwd=***&pwd=***&sslpassword=***&api_token=***&client_secret=***"),
    ("sqlite:///results/x/study.db", "sqlite:///results/x/study.db"),
    ("sqlite:///we@ird/study.db?password=abc", "sqlite:///we@ird/study.db?password=***"),
    ("journal:results/x.journal", "journal:results/x.journal"),
    ("postgresql://ann@db/x", "postgresql://ann@db/x"),
])
def test_mask_url(url, masked):
    assert mask_url(url) == masked
    assert is_masked(masked) == (masked != url)
    for secret in secrets_of(url):
        assert secret not in masked.replace("***", "")


def test_mask_text_scrubs_known_passwords_and_quoted_urls():
    mask_url("postgresql://ann:Pa%24%24word-42@db/x")
    text = ('FATAL: password authentication failed for user "ann" (password Pa$$word-42) connecting to '
            'postgresql://bob:other-secret@h/y')
    out = mask_text(text)
    assert "Pa$$word-42" not in out and "other-secret" not in out and "Pa%24%24word-42" not in out
    assert out.startswith("FATAL: password authentication failed") and "postgresql://bob:***@h/y" in out
    assert mask_text("a word", ["word"]) == "a ***"


def test_recipe_keeps_no_password(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(f"storage: postgresql://ann:{SECRET}@db/x?sslpassword={SECRET}\n")
    r = load_recipe(path)
    assert SECRET not in r.to_yaml() and SECRET not in str(r.raw)
    assert r.to_dict()["storage"] == "postgresql://ann:***@db/x?sslpassword=***"
    assert r.storage_url == f"postgresql://ann:{SECRET}@db/x?sslpassword={SECRET}"  # what is opened
    assert mask_recipe({"storage": r.storage})["storage"] == r.to_dict()["storage"]
    saved = load_recipe(path).to_dict()
    from normsearch.recipe import recipe_from_dict

    with pytest.raises(NormsearchError, match="password is not kept"):
        recipe_from_dict(saved).storage_url  # noqa: B018 - a property that raises


def test_storage_from_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "r.yaml"
    path.write_text("name: r\n")
    monkeypatch.delenv("NORMSEARCH_STORAGE", raising=False)
    assert load_recipe(path).storage_url == f"sqlite:///{tmp_path.name and Path('results') / 'r' / 'study.db'}"
    monkeypatch.setenv("NORMSEARCH_STORAGE", f"postgresql://ann:{SECRET}@db/x")
    r = load_recipe(path)
    assert r.storage == "env:NORMSEARCH_STORAGE" and r.storage_url == f"postgresql://ann:{SECRET}@db/x"
    assert SECRET not in r.to_yaml()
    path.write_text("name: r\nstorage: env:MY_DB\n")
    with pytest.raises(NormsearchError, match="^storage env:MY_DB: the environment variable MY_DB is not set$"):
        load_recipe(path).storage_url  # noqa: B018
    monkeypatch.setenv("MY_DB", "journal:x.journal")
    assert load_recipe(path).storage_url == "journal:x.journal" and from_env("env:MY_DB") == "journal:x.journal"


def test_validate_and_a_failed_run_print_no_password(tmp_path, monkeypatch):
    from tiny import write_tiny_recipe

    recipe = write_tiny_recipe(tmp_path)
    url = f"postgresql://ann:{SECRET}@127.0.0.1:9/nodb?sslpassword={SECRET}x&connect_timeout=2"
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["validate", str(recipe), "--storage", url])
    assert r.exit_code == 0 and "postgresql://ann:***@127.0.0.1:9/nodb?sslpassword=***" in r.stdout, r.output
    monkeypatch.setenv("NORMSEARCH_STORAGE", url)
    for args in (["validate", str(recipe)], ["run", str(recipe)], ["status", str(recipe)]):
        r = CliRunner().invoke(app, args)
        assert SECRET not in r.stdout + r.stderr, (args, r.output)
    assert r.exit_code == 2 and r.stderr.startswith("error: cannot open storage postgresql://ann:***@"), r.stderr
    assert not any(SECRET.encode() in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


def test_nothing_a_study_writes_holds_the_password(tmp_path, monkeypatch, one_thread):
    """A whole tiny study whose storage URL carries a password (SQLite ignores it): run, status,
    report and export; no file under the folder and no line of output holds the password."""
    from tiny import LEARNING, write_tiny_recipe

    recipe = write_tiny_recipe(tmp_path, name="secret", trials=1, **LEARNING)  # runs that learn: weights to export
    url = f"sqlite:///{tmp_path / 'db' / 'study.db'}?password={SECRET}"
    recipe.write_text(recipe.read_text() + f"storage: {url}\n")
    monkeypatch.chdir(tmp_path)
    outputs = []
    for args in (["run", str(recipe)], ["status", str(tmp_path / "results" / "secret"), "--storage", url],
                 ["report", str(recipe)], ["export", str(recipe), "--rank", "1", "--out", str(tmp_path / "out")]):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0, (args, r.output, r.exception)
        outputs.append(r.stdout + r.stderr)
    r = CliRunner().invoke(app, ["status", str(tmp_path / "results" / "secret")])  # its recipe.yaml has no password
    assert r.exit_code == 2 and "password is not kept" in r.stderr
    assert not any(SECRET in o for o in outputs)
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".db" and p != recipe]  # recipe: the input
    assert any(p.name == "recipe.yaml" for p in files) and any(p.name == "ranking.json" for p in files)
    leaks = [str(p) for p in files if SECRET.encode() in p.read_bytes()]
    assert not leaks
    assert "password=***" in (tmp_path / "results" / "secret" / "recipe.yaml").read_text()


def test_storage_errors_mask_the_password(tmp_path):
    with pytest.raises(NormsearchError) as e:
        open_storage(f"postgresql://ann:{SECRET}@127.0.0.1:9/x?connect_timeout=1")
    assert SECRET not in str(e.value) and "ann:***@" in str(e.value)
    os.environ.pop("NORMSEARCH_TEST_UNSET", None)
