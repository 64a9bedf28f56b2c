"""The one exception type a user should ever see: a problem with their input, said in one line."""

from __future__ import annotations


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so that the same clean-up runs."""


class NormsearchError(Exception):
    """Bad input: a broken recipe, an unknown site, a missing file, a dead database.

    The message is one line that names the problem and, where there is one, the fix. The command
    line prints it as ``error: <message>`` and exits with code 2; it never shows a traceback.
    """


class SpecError(NormsearchError, ValueError):
    """A placement or norm spec that cannot describe a network."""


def closest(word, known, n: int = 3) -> str:
    """"'a' or 'b'": the (at most ``n``) known names closest to ``word`` (difflib), '' when none is close."""
    import difflib

    return " or ".join(map(repr, difflib.get_close_matches(str(word), [str(k) for k in known], n=n)))


def did_you_mean(word: str, known) -> str:
    """' (did you mean X?)' when a known name is close to ``word``, else ''."""
    close = closest(word, known, n=1)
    return f" (did you mean {close}?)" if close else ""


def unknown(what: str, word, known) -> str:
    """'unknown site 'atn_in' (did you mean 'attn_in'?); known: a, b, c'"""
    known = list(known)
    return f"unknown {what} {word!r}{did_you_mean(word, known)}; known: {', '.join(map(str, known))}"
