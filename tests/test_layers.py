"""The package's import graph stays acyclic (imports inside functions included), and the lower half
(the spec language, the configuration, the records, the statistics and the ranking) imports no torch."""

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "normsearch"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """normsearch modules this file imports, anywhere in it."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("normsearch"):
                out.add(target)
                out.update(f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("normsearch"))
    return out


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PKG.rglob("*.py")}
    g = {}
    for name, path in files.items():
        deps = {d for d in imports(path) if d in files and d != name}
        # a package's __init__ re-exports its children: an edge to the package is an edge to them
        g[name] = deps
    return g


def test_the_import_graph_has_no_cycle():
    g = graph()
    pkg_init = {n for n in g if (PKG.parent / n.replace(".", "/") / "__init__.py").is_file()}
    state: dict[str, int] = {}

    def visit(n, path):
        state[n] = 1
        for d in sorted(g[n]):
            if d in pkg_init and n.startswith(d + "."):
                continue  # a submodule importing its own package's __init__ (a re-export) is not a layer
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path + [n, d]))
            if d not in state:
                visit(d, path + [n])
        state[n] = 2

    for n in sorted(g):
        if n not in state:
            visit(n, [])


def test_the_lower_half_imports_no_torch():
    lower = ["spec", "norms", "space", "recipe", "config", "records", "scoring", "stats", "ranking", "checks",
             "baselines", "show", "_secrets", "storage"]
    code = ("import sys; " + "; ".join(f"import normsearch.{m}" for m in lower)
            + "; bad = [m for m in ('torch', 'lightning', 'matplotlib') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
