"""normsearch: search where the normalization layers of a Transformer should go.

The public API is small; everything else is private. Imports are deferred, so ``import normsearch``
costs nothing until a name is used (and ``normsearch --help`` never loads torch).

    Placement, NormSpec      the placement spec (where the norms go, and which)
    ModelConfig, build_model the model that obeys a placement
    baselines                the named placements from the papers
    load_recipe, run_study   recipes and Optuna studies
    train_run, RunResult     one training run (a seed at a learning rate) and what it produced
    rank                     ranking with confidence intervals and Welch tests
    export, load_exported    standalone PyTorch modules of found architectures
"""

from __future__ import annotations

from importlib import import_module

from ._version import __version__

_API = {
    "Placement": "spec",
    "NormSpec": "spec",
    "ModelConfig": "config",
    "build_model": "model",
    "baselines": "baselines",
    "NormsearchError": "errors",
    "NORM_KINDS": "norms",
    "register_norm": "norms",
    "NormKind": "norms",
    "load_recipe": "recipe",
    "train_run": "train",
    "run_trial": "train",  # the name before 0.2; kept for scripts that use it
    "RunResult": "records",
    "run_study": "search",
    "rank": "ranking",
    "export": "export",
    "load_exported": "export",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        value = getattr(import_module(f".{_API[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'normsearch' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
