"""What the short forms of the tables mean: printed under ``normsearch baselines`` and in the README.

Built from :data:`normsearch.spec.SITE_ABBREV`, so the legend and the tables cannot disagree.
"""

from __future__ import annotations

from .spec import SITE_ABBREV


def site_legend() -> str:
    """Two lines: every short site name and what the marks around them mean."""
    short = ", ".join(f"{a} {s}" for s, a in SITE_ABBREV.items() if a != s)
    return (f"sites: {short}; q k v the query/key/value norms, ctx the context norm on the attention's output "
            f"before W_o (per head; with F, e.g. qF: over the full width)\n"
            f"marks: 'block | model-level' sites; [kind] the norm kind of every site (else site:kind); "
            f"after a site D: depth-scaled, 0: weightless, +: a 1 + w gain; "
            f"L0-1: layers 0 to 1 when layers differ; * in a ranking: a baseline")
