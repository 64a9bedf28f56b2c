"""YAML in and out, the way a researcher writes it.

PyYAML follows YAML 1.1, where ``1e-5`` is a string, not a float; every recipe and spec in the world
writes eps that way, so our loader reads it as the float it means. Mappings keep the line they came
from, so an error can point at it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from .errors import NormsearchError

_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
    re.VERBOSE,
)


class _Loader(yaml.SafeLoader):
    pass


_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:float"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


class LineDict(dict):
    """A dict that remembers the line of each key in its source file (``lines[key]``, 1-based), and
    the command-line option that set a key instead (``overridden[key]``, e.g. ``--train.lr``)."""

    lines: dict
    source: str | None = None
    overridden: dict


def copy(d: dict) -> dict:
    """A shallow copy that keeps a LineDict's lines, source and overrides."""
    out = LineDict(d)
    out.lines = dict(getattr(d, "lines", {}))
    out.source = getattr(d, "source", None)
    out.overridden = dict(getattr(d, "overridden", {}))
    return out


def mark_override(d: LineDict, key, option: str) -> None:
    """Say that ``d[key]`` came from the command-line option ``option``: errors about it name that."""
    d.lines.pop(key, None)
    d.overridden[key] = option


def _construct_mapping(loader, node):
    d = LineDict(loader.construct_mapping(node, deep=True))
    d.lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if hasattr(k, "value")}
    d.overridden = {}
    return d


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def loads(text: str, source: str = "<string>") -> Any:
    try:
        return yaml.load(text, Loader=_Loader)
    except RecursionError:
        raise NormsearchError(f"{source}: nested too deeply to read") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise NormsearchError(f"{where}: not valid YAML ({problem}); fix the syntax") from None


def read_text(path: str | Path, what: str = "file") -> str:
    """The UTF-8 text of a file; a missing, unreadable, binary or non-UTF-8 file is a NormsearchError
    that says which."""
    path = Path(path)
    if path.is_dir():
        raise NormsearchError(f"{path}: a folder, not a {what}")
    if not path.exists():
        raise NormsearchError(f"{path}: no such file")
    if not path.is_file():
        raise NormsearchError(f"{path}: not a regular file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise NormsearchError(f"{path}: cannot read it ({e.strerror or e})") from None
    if b"\0" in data:
        raise NormsearchError(f"{path}: a binary file, not a {what} (YAML text)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise NormsearchError(f"{path}:{line}: not UTF-8 text (byte {data[e.start]:#04x}); save the file as UTF-8") \
            from None
    return text.removeprefix("\ufeff")


def load(path: str | Path, what: str = "YAML file") -> Any:
    path = Path(path)
    data = loads(read_text(path, what), source=str(path))
    _mark_source(data, str(path))
    return data


def _mark_source(data, source):
    if isinstance(data, LineDict):
        data.source = source
        for v in data.values():
            _mark_source(v, source)
    elif isinstance(data, list):
        for v in data:
            _mark_source(v, source)


def where(d, key=None) -> str:
    """'recipe.yaml:12: ' for a key of a LineDict read from a file, '' otherwise."""
    if isinstance(d, LineDict) and key is not None and key in getattr(d, "overridden", {}):
        return f"{d.overridden[key]}: "
    if isinstance(d, LineDict) and d.source:
        line = d.lines.get(key) if key is not None else None
        if line is None and d.lines:
            line = min(d.lines.values())
        return f"{d.source}:{line}: " if line else f"{d.source}: "
    return ""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(LineDict, lambda dumper, d: dumper.represent_dict(dict(d)))


class Flow(dict):
    """A mapping written on one line (``{kind: rmsnorm, eps: 1.0e-05}``)."""


_Dumper.add_representer(
    Flow, lambda dumper, d: dumper.represent_mapping("tag:yaml.org,2002:map", d, flow_style=True)
)


def flow_leaves(data: Any) -> Any:
    """Write innermost mappings (norm specs, layer selectors) on one line each."""
    if isinstance(data, dict):
        def flat(v):
            return not isinstance(v, (dict, list)) or (
                isinstance(v, list) and not any(isinstance(x, (dict, list)) for x in v)
            )

        if data and all(flat(v) for v in data.values()):
            return Flow(data)
        return {k: flow_leaves(v) for k, v in data.items()}
    if isinstance(data, list):
        return [flow_leaves(v) for v in data]
    return data


def dumps(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
