"""What the command line needs besides its commands: usage errors on one line, SIGTERM handled like
Ctrl-C, and the checks of option values that come before any work. Torch-free; typer only."""

from __future__ import annotations

import functools

from pathlib import Path
from typing import Any, Optional

import typer
from typer.core import TyperGroup

from .errors import NormsearchError

try:  # the click that typer runs on: its own copy in newer typer
    from typer import _click as click
except ImportError:  # pragma: no cover - typer < 0.20 uses click itself
    import click


class _UsageError(click.ClickException):
    """Click's usage errors (a bad option value, a missing argument, an unknown command) as one line,
    like every other bad input."""

    exit_code = 2

    def __init__(self, e):
        where = f"; see {e.ctx.command_path} --help" if e.ctx is not None else ""
        super().__init__(" ".join(e.format_message().split()).rstrip(".") + where)

    def show(self, file=None):
        click.echo(f"error: {self.message}", err=True)


_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # a bare command shows its help, as it should


class Group(TyperGroup):
    """The command group: usage errors of it and of its commands become one ``error:`` line."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except _HELP:
            raise
        except click.exceptions.UsageError as e:
            raise _UsageError(e) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except _HELP:
            raise
        except click.exceptions.UsageError as e:
            raise _UsageError(e) from None


def at_least(low: int, **options):
    """Integer options checked before anything runs: ``--layers 0`` is one error line."""
    for name, value in options.items():
        if value is not None and value < low:
            raise NormsearchError(f"--{name.replace('_', '-')} must be >= {low}, not {value}")


def storage_option(storage: Optional[str]) -> Optional[str]:
    """A ``--storage`` value with ``env:VAR`` read from the environment."""
    from .storage import from_env

    return from_env(storage, "--storage")


def read_only(study: Optional[str], storage: Optional[str]) -> Optional[str]:
    """The ``--storage`` of a command that only reads: what it names must exist (a mistyped SQLite
    path or a never-run recipe must not leave an empty database behind)."""
    from .storage import require_existing

    storage = storage_option(storage)
    if storage:
        require_existing(storage)
    elif study is not None and Path(study).suffix in (".yaml", ".yml") and not Path(study).is_dir():
        from .recipe import load_recipe

        require_existing(load_recipe(study).storage_url)
    return storage


def check_new_file(path: Path, option: str):
    """A file the command will write: not a folder, in a folder that exists."""
    if path.is_dir():
        raise NormsearchError(f"{option} {path}: a folder; name the file to write")
    if not path.parent.is_dir():
        raise NormsearchError(f"{option} {path}: the folder {path.parent} does not exist")


_SIGTERM = {"received": False, "again": False}


def stop_on_sigterm():
    """SIGTERM (what Slurm, Kubernetes and ``timeout`` send) stops like Ctrl-C: the running trial is
    marked for a rerun, finished trials are kept. A second SIGTERM ends the process at once.

    Python runs the handler wherever the main thread is, and the :class:`~normsearch.errors.Terminated`
    it raises must reach the code that stops the study. Two places would lose it:

    - a weakref callback or a ``__del__`` (Lightning's setup runs many): Python prints "Exception
      ignored in ..." and carries on, and the run went on to its end with exit code 0. A Terminated
      swallowed there comes back at once, in the code the callback interrupted (:func:`_raise_again`);
    - an import (torch's import calls Python from C++, where an exception aborts the process): the
      Terminated waits until the import has finished."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers belong to the main thread (CliRunner in a thread, say)

    def handler(signum, frame):
        import sys

        again, _SIGTERM["again"] = _SIGTERM["again"], False
        if _SIGTERM["received"] and not again:  # a second SIGTERM (the first is still on its way)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)
            return
        _SIGTERM["received"] = True
        if _unsafe(frame):
            _when_safe(threading.get_ident())
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if not getattr(sys.unraisablehook, "_normsearch", False):
            sys.unraisablehook = functools.partial(_raise_again, handler, sys.unraisablehook)
            sys.unraisablehook._normsearch = True
        from .errors import Terminated

        raise Terminated

    signal.signal(signal.SIGTERM, handler)


def _raise_again(handler, previous, unraisable) -> None:
    """``sys.unraisablehook`` once a SIGTERM has come: a Terminated that a callback swallowed comes back
    as the same signal once the main thread has left this hook (a signal handled in the hook would be
    swallowed too), so that it is raised in the code the callback interrupted; should that be another
    callback, this starts over. Anything else goes to the hook before."""
    import signal
    import threading

    from .errors import Terminated

    if not (isinstance(unraisable.exc_value, Terminated) and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, handler)):
        previous(unraisable)
        return
    signal.signal(signal.SIGTERM, handler)  # the handler set SIG_DFL for a second signal: this is the first
    _when_safe(threading.get_ident())


def _unsafe(frame) -> bool:
    """Whether an exception raised in ``frame`` could be lost: it runs inside an import, or inside
    :func:`_raise_again`."""
    while frame is not None:
        code = frame.f_code
        if code is _raise_again.__code__ or code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _when_safe(main: int, patience: float = 60.0) -> None:
    """Call SIGTERM's handler again in the main thread once it is out of what :func:`_unsafe` names
    (after ``patience`` seconds in any case), from a thread of its own. ``_thread.interrupt_main`` does
    nothing when SIGTERM is no longer handled."""
    import threading

    def wait():
        import _thread
        import signal
        import sys
        import time

        deadline = time.monotonic() + patience
        while _unsafe(sys._current_frames().get(main)) and time.monotonic() < deadline:
            time.sleep(0.001)
        _SIGTERM["again"] = True
        _thread.interrupt_main(signal.SIGTERM)

    threading.Thread(target=wait, name="normsearch-sigterm", daemon=True).start()


def interrupted_code() -> int:
    """130 after Ctrl-C, 143 after SIGTERM (the shell's codes for the two signals)."""
    return 143 if _SIGTERM["received"] else 130


def bench_errors(main, args: list[str]) -> int:
    """Run a benchmark's argparse main; its usage errors become one ``error:`` line too."""
    import argparse

    def one_line(parser, message):
        raise NormsearchError(f"{parser.prog}: {message}")

    error = argparse.ArgumentParser.error
    argparse.ArgumentParser.error = one_line
    try:
        return main(args)
    finally:
        argparse.ArgumentParser.error = error


def user_errors(fn):
    """Run a command; a NormsearchError becomes one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except NormsearchError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None

    return wrapper


def shared_options(*options: tuple[str, Any, Any]):
    """Add options that several commands take, each ``(name, type, typer.Option(...))`` defined once,
    to a command's signature after its own; the command takes them as ``**shared``."""
    import inspect

    def add(fn):
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        more = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=tp)
                for name, tp, default in options]
        fn.__signature__ = sig.replace(parameters=own + more)
        fn.__annotations__ = {**fn.__annotations__, **{name: tp for name, tp, _ in options}}
        return fn

    return add


def setup_logging(verbose: bool):
    import logging

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s")
