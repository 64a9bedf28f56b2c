"""Export a found architecture as a standalone PyTorch module.

An export is a folder::

    spec.yaml           the placement (canonical form), the model config and the arch_id
    config.json         the same architecture as model.py reads it: sizes, and each layer's norms
    model.py            normsearch's standalone model (standalone.py, the same in every export)
    norms.py            the norm kinds it uses, copied from the registry; torch alone
    model.safetensors   the weights
    README.md           what it is, its score where one is given, and how to load it

``model.py`` is not generated: it is :mod:`normsearch.export.standalone`, a linted and tested
module whose block is normsearch's ``Block.forward`` site for site. The architecture travels as
data, so the same maths and parameter names load with ``strict=True``.

- :func:`export_architecture` writes a folder for a placement (``_folder``);
- :func:`export` chooses an architecture of a study, by rank, trial or baseline (``_select``);
- :func:`load_exported` reads a folder back into normsearch's ``Transformer`` (``_load``).
"""

from __future__ import annotations

import sys
import types

from ._folder import EXPORT_FILES, architecture, export_architecture, norms_source
from ._load import load_exported
from ._select import export

__all__ = ["EXPORT_FILES", "architecture", "export", "export_architecture", "load_exported", "norms_source"]


class _Module(types.ModuleType):
    """Importing this package makes it the attribute ``normsearch.export``, where the public API
    has the function :func:`export`; so calling the package calls the function."""

    def __call__(self, *args, **kwargs):
        return export(*args, **kwargs)


sys.modules[__name__].__class__ = _Module
