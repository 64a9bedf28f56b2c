"""Does the best learning rate stay put as the model widens? The muP papers' test on the quickstart
task: a learning-rate sweep at several widths under standard and under mup parametrization, Pre-LN.

    python benchmarks/lr_transfer.py                       # the committed run (results/mup/)
    python benchmarks/lr_transfer.py --summary             # the table from the JSON, training nothing

Every run is one ``normsearch.train.train_run`` of recipes/quickstart.yaml's model and data with
``model.d_model`` (heads fixed, so the head dimension grows), ``model.parametrization`` and the
lr set; its final validation bits per byte is appended to the JSON as it finishes, so a rerun resumes
where it stopped. ``--jobs`` processes of one thread each train side by side.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _key(param: str, width: int, lr: float, seed: int) -> str:
    return f"{param}/d{width}/lr{lr:.6g}/s{seed}"


def _one(recipe_path: str, param: str, width: int, lr: float, seed: int, steps: int, base: int) -> dict:
    """One run in a worker process (one thread); plain data back."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from normsearch.recipe import load_recipe
    from normsearch.train import train_run

    overrides = {"model.d_model": width, "train.steps": steps, "train.eval_every": steps, "train.threads": 1,
                 "train.device": "cpu"}
    if param != "standard":
        overrides.update({"model.parametrization": param, "model.mup_base_width": base})
    r = load_recipe(recipe_path, overrides)
    res = train_run("pre_ln", r.model, r.data, r.train, seed=seed, lr=lr)
    return {"parametrization": param, "width": width, "lr": lr, "seed": seed, "steps": res.steps,
            "val_bpb": res.value, "diverged": bool(res.diverged), "train_loss": res.curve[-1]["train_loss"]
            if res.curve else None, "wall_time": res.wall_time, "n_params": res.n_params}


def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {"runs": {}}


def summarize(data: dict) -> str:
    """Per parametrization and width: the val bpb at every lr (mean over seeds) and the best lr; then
    whether the best lr moved by more than one sweep step between the widths."""
    runs = list(data["runs"].values())
    lrs = sorted({r["lr"] for r in runs})
    params = [p for p in ("standard", "mup") if any(r["parametrization"] == p for r in runs)]
    lines = ["| parametrization | width | " + " | ".join(f"lr {lr:.3g}" for lr in lrs) + " | best lr |",
             "|---|---|" + "---|" * len(lrs) + "---|"]
    verdict = []
    for p in params:
        best = {}
        for w in sorted({r["width"] for r in runs if r["parametrization"] == p}):
            cells, means = [], {}
            for lr in lrs:
                vals = [r["val_bpb"] if r["val_bpb"] is not None and not r["diverged"] else math.inf
                        for r in runs if (r["parametrization"], r["width"], r["lr"]) == (p, w, lr)]
                if not vals:
                    cells.append("")
                    continue
                means[lr] = sum(vals) / len(vals)
                cells.append("diverged" if math.isinf(means[lr]) else f"{means[lr]:.4f}")
            b = min(means, key=means.get) if means else None
            best[w] = b
            lines.append(f"| {p} | {w} | " + " | ".join(cells) + (f" | {b:.3g} |" if b else " | |"))
        idx = {w: lrs.index(b) for w, b in best.items() if b is not None}
        spread = max(idx.values()) - min(idx.values()) if idx else 0
        moves = " -> ".join(f"{best[w]:.3g} (d{w})" for w in sorted(idx))
        verdict.append(f"{p}: best lr {moves}; spread {spread} sweep step(s): "
                       + ("stays put (within one step)" if spread <= 1 else "moves"))
    return "\n".join(lines + [""] + verdict)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default=str(ROOT / "recipes/quickstart.yaml"))
    ap.add_argument("--widths", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--lrs", type=float, nargs="+",
                    default=[round(1e-3 * 2 ** k, 6) for k in range(0, 7)])  # 1e-3 .. 6.4e-2, factor 2
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--parametrizations", nargs="+", default=["standard", "mup"], choices=["standard", "mup"])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--base", type=int, default=64, help="model.mup_base_width")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "results/mup/lr_transfer.json"))
    ap.add_argument("--summary", action="store_true", help="print the table from --out and train nothing")
    a = ap.parse_args(argv)
    out = Path(a.out)
    data = load(out)
    if not a.summary:
        data.setdefault("invocations", []).append({
                            "recipe": os.path.relpath(a.recipe, ROOT), "placement": "pre_ln", "widths": a.widths,
                            "lrs": a.lrs, "seeds": a.seeds, "steps": a.steps, "mup_base_width": a.base,
                            "jobs": a.jobs, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        todo = [(p, w, lr, s) for w in sorted(a.widths) for p in a.parametrizations
                for lr in a.lrs for s in a.seeds if _key(p, w, lr, s) not in data["runs"]]
        # mup at its base width is standard bit for bit (tests/test_parametrization.py): not trained twice
        twins = [t for t in todo if t[0] == "mup" and t[1] == a.base and "standard" in a.parametrizations]
        todo = [t for t in todo if t not in twins]
        print(f"{len(todo)} runs to train ({len(data['runs'])} cached in {out})", flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        start, before = time.time(), data.get("wall_time_s", 0.0)  # wall time summed over resumptions
        with ProcessPoolExecutor(a.jobs) as pool:
            futs = {pool.submit(_one, a.recipe, p, w, lr, s, a.steps, a.base): (p, w, lr, s) for p, w, lr, s in todo}
            for f in as_completed(futs):
                r = f.result()
                data["runs"][_key(*futs[f])] = r
                data["wall_time_s"] = before + time.time() - start
                tmp = out.with_suffix(".tmp")
                tmp.write_text(json.dumps(data, indent=1))
                tmp.replace(out)
                print(f"{_key(*futs[f])}: val_bpb {r['val_bpb']} ({r['wall_time']:.0f} s) "
                      f"[{time.time() - start:.0f} s]", flush=True)
        for p, w, lr, s in twins:
            twin = _key("standard", w, lr, s)
            if twin in data["runs"]:
                data["runs"][_key(p, w, lr, s)] = {**data["runs"][twin], "parametrization": p, "same_as": twin}
        data["wall_time_s"] = before + time.time() - start
        out.write_text(json.dumps(data, indent=1))
    print(summarize(data))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
