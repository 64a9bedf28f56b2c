"""Passwords never leave the process: storage URLs masked for every line and file the tool writes.

:func:`mask_url` hides the password of a URL (in its user part and in its query string);
:func:`mask_text` hides, in any text (a driver's error message, a log line), every password seen so
far and every URL it quotes; :func:`mask_recipe` is a stored recipe's plain data with its storage
masked. Torch-free and optuna-free.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, unquote_plus

MASK = "***"

#: query keys whose value is a secret (password=, passwd=, pwd=, sslpassword=, api_token=, ...)
_SECRET_KEY = re.compile(r"pass|pwd|secret|token", re.IGNORECASE)
#: one key=value of a query string (with the separator before it)
_QUERY_PAIR = re.compile(r"(^|[&;])([^&;=]*)=([^&;]*)")
#: a URL inside free text (up to the first white space or quote)
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")
#: passwords shorter than this are only masked inside URLs, not wherever the letters appear
_MIN_SECRET = 3

_known: set[str] = set()  # every secret seen in a URL by this process


def _split(url: str) -> tuple[str, str, str | None, str] | None:
    """(scheme://, user, password or None, rest) of a URL with a user part, else None.

    The user part ends at the *last* ``@`` of the URL, so a password that holds ``@``, ``:``, ``/``
    or ``?`` unencoded is still found whole (SQLAlchemy's own parser cuts it at the first ``@``). A
    URL without a user part whose path or query holds an ``@`` may be over-masked; that is the safe
    side for a line meant for display."""
    scheme, sep, rest = url.partition("://")
    if not sep or rest.startswith("/") or "@" not in rest:
        return None
    at = rest.rfind("@")
    userinfo, tail = rest[:at], rest[at:]
    user, colon, password = userinfo.partition(":")
    if "/" in user or "?" in user:  # the "@" is in the path or the query, not after a user
        return None
    return scheme + sep, user, password if colon else None, tail


def _query_secrets(query: str) -> list[tuple[str, str]]:
    """(key, value) of each secret parameter of a query string."""
    return [(m[2], m[3]) for m in _QUERY_PAIR.finditer(query) if _SECRET_KEY.search(unquote_plus(m[2]))]


def secrets_of(url: str | None) -> list[str]:
    """The passwords a URL holds, as written and percent-decoded."""
    if not url or "://" not in url:
        return []
    found = []
    parts = _split(url)
    if parts is not None and parts[2]:
        found.append(parts[2])
    query = url.partition("?")[2] if parts is None else parts[3].partition("?")[2]
    found += [v for _, v in _query_secrets(query) if v]
    out = []
    for s in found:
        for form in (s, unquote(s), unquote_plus(s)):
            if form and form not in out:
                out.append(form)
    return out


def remember(url: str | None) -> None:
    """Note the passwords of ``url`` so that :func:`mask_text` hides them from any later text."""
    _known.update(secrets_of(url))


def mask_url(url: str | None) -> str | None:
    """``url`` with the password of its user part and every secret query value replaced by ``***``:
    ``postgresql://ann:***@db:5432/study?sslpassword=***``. Other strings (a journal path, None)
    come back unchanged."""
    if not url or "://" not in url:
        return url
    remember(url)
    parts = _split(url)
    if parts is not None:
        scheme, user, password, tail = parts
        head = f"{scheme}{user}:{MASK}" if password is not None else f"{scheme}{user}"
    else:
        head, tail = "", url
    base, q, query = tail.partition("?")
    query = _QUERY_PAIR.sub(lambda m: f"{m[1]}{m[2]}={MASK}" if _SECRET_KEY.search(unquote_plus(m[2])) else m[0],
                            query)
    return head + base + q + query


def mask_text(text: str, secrets=()) -> str:
    """``text`` with every URL in it masked and every known password (``secrets`` and those of the
    URLs seen by :func:`mask_url` / :func:`remember`) replaced by ``***``."""
    if not text:
        return text
    text = _URL_IN_TEXT.sub(lambda m: mask_url(m.group(0)), text)
    words = {s for s in (*secrets, *_known) if s and len(s) >= _MIN_SECRET}
    for s in sorted(words, key=len, reverse=True):
        text = text.replace(s, MASK)
    return text


def is_masked(url: str | None) -> bool:
    """Whether ``url`` is one that :func:`mask_url` hid a password of (so it cannot be connected to)."""
    return MASK in secrets_of(url)


def mask_recipe(raw: dict[str, Any]) -> dict[str, Any]:
    """A recipe's plain data (as stored with a study or written to ``recipe.yaml``/``ranking.json``)
    with its storage URL masked."""
    if not isinstance(raw, dict) or not isinstance(raw.get("storage"), str):
        return raw
    return {**raw, "storage": mask_url(raw["storage"])}
