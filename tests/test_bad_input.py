"""Bad input to every command: one ``error:`` line on stderr, exit code 2, no traceback, nothing
written. Every case fails in validation, before any training, in-process through Typer's CliRunner.

Tests run as root, so "unreadable" files are simulated: a folder where a file should be, or a
read that raises PermissionError (a mock); a read-only working directory is simulated by making
``os.access`` answer no for it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from normsearch.cli import app

GOOD = """\
name: good
model: {n_layers: 2, d_model: 32, n_heads: 2, context_length: 32}
data: {corpus: text, path: corpus, eval_windows: 4}
train: {steps: 5, batch_size: 2, warmup: 1, eval_every: 5, lr: [3.0e-3], seeds: [0], threads: 1}
space:
  kind: rmsnorm
  sites: {attn_in: [none, norm], attn_out: [none, norm], ffn_in: [none, norm], final: [norm]}
search: {trials: 3, baselines: [pre_ln, post_ln]}
results_dir: results
"""


def variant(**sections: str) -> str:
    """GOOD with some top-level lines replaced (``model="model: {...}"``) or dropped (None)."""
    lines = {line.split(":")[0]: line for line in GOOD.replace("\n  ", "\0  ").splitlines()}
    for key, text in sections.items():
        lines[key] = text
    return "\n".join(v.replace("\0", "\n") for v in lines.values() if v is not None) + "\n"


SPACE_SITES = "kind: rmsnorm, sites: {attn_in: [none, norm], attn_out: [none, norm], ffn_in: [none, norm], final: [norm]}"

#: recipe files of the world, by name: text, or bytes written as they are
RECIPES: dict[str, str | bytes] = {
    "binary": b"\x00\x01\x02name: x\n\xff\xfe",
    "latin1": "name: caf\xe9\n".encode("latin-1"),
    "utf16": GOOD.encode("utf-16"),
    "bad_yaml": "model: {n_layers: [2\n",
    "a_list": "- model\n- data\n",
    "a_scalar": "hello\n",
    "empty": "",
    "deep": "[" * 5000 + "]" * 5000 + "\n",
    "unknown_section": GOOD + "modle: {}\n",
    "unknown_key": variant(model="model: {n_layer: 2}"),
    "seed_negative": variant(train="train: {seeds: [-1]}"),
    "seed_float": variant(train="train: {seeds: [0.5]}"),
    "seed_huge": variant(train="train: {seeds: [99999999999]}"),
    "seed_repeated": variant(train="train: {seeds: [1, 1]}"),
    "lr_zero": variant(train="train: {lr: 0}"),
    "lr_negative": variant(train="train: {lr: [-1.0e-3]}"),
    "lr_nan": variant(train="train: {lr: .nan}"),
    "lr_inf": variant(train="train: {lr: .inf}"),
    "lr_text": variant(train="train: {lr: fast}"),
    "lr_empty": variant(train="train: {lr: []}"),
    "steps_zero": variant(train="train: {steps: 0}"),
    "batch_negative": variant(train="train: {batch_size: -1}"),
    "warmup_long": variant(train="train: {steps: 5, warmup: 10}"),
    "heads_odd": variant(model="model: {d_model: 30, n_heads: 4}"),
    "context_zero": variant(model="model: {context_length: 0}"),
    "dropout_big": variant(model="model: {dropout: 1.5}"),
    "layers_text": variant(model="model: {n_layers: four}"),
    "trials_negative": variant(search="search: {trials: -1}"),
    "search_seed_negative": variant(search="search: {trials: 3, seed: -1}"),
    "sampler_unknown": variant(search="search: {sampler: bayes}"),
    "baseline_unknown": variant(search="search: {baselines: [pre_lm]}"),
    "heartbeat_zero": variant(search="search: {heartbeat: 0, grace: 5}"),
    "trials_no_space": variant(space=None, search="search: {trials: 3, baselines: [pre_ln]}"),
    "space_too_small": variant(space="space: {sites: {attn_in: [none, norm], final: [norm]}}",
                               search="search: {trials: 5, baselines: []}"),
    "space_kind_empty": variant(space="space: {kind: [], sites: {attn_in: [none, norm]}}"),
    "space_kind_unknown": variant(space="space: {kind: batchnorm, sites: {attn_in: [none, norm]}}"),
    "space_site_unknown": variant(space="space: {sites: {atn_in: [none, norm]}}"),
    "space_no_sites": variant(space="space: {kind: rmsnorm}"),
    "space_no_choice": variant(space="space: {sites: {attn_in: []}}"),
    "space_missing_file": variant(space="space: nope.yaml"),
    "space_binary_file": variant(space="space: binary_space.yaml"),
    "space_latin1_file": variant(space="space: latin1_space.yaml"),
    "space_a_list": variant(space="space: [attn_in]"),
    "name_newline": variant(name='name: "a\\nb"'),
    "name_bell": variant(name='name: "a\\u0007b"'),
    "name_escape": variant(name='name: "a\\e[31mb"'),
    "name_tab": variant(name='name: "a\\tb"'),
    "name_space": variant(name="name: a b"),
    "name_slash": variant(name="name: a/b"),
    "name_dot": variant(name="name: .hidden"),
    "name_empty": variant(name='name: ""'),
    "name_number": variant(name="name: 12"),
    "name_long": variant(name="name: " + "x" * 300),
    "data_missing": variant(data="data: {corpus: text, path: nowhere}"),
    "data_no_path": variant(data="data: {corpus: text}"),
    "data_binary": variant(data="data: {corpus: text, path: noise.bin}"),
    "data_unreadable": variant(data="data: {corpus: text, path: locked.txt}"),
    "data_short": variant(data="data: {corpus: text, path: short.txt}"),
    "data_val_fraction": variant(data="data: {corpus: text, path: corpus, val_fraction: 1.5}"),
    "data_eval_windows": variant(data="data: {corpus: text, path: corpus, eval_windows: 0}"),
    "data_corpus_unknown": variant(data="data: {corpus: web}"),
    "data_bpe_vocab": variant(data="data: {corpus: text, path: corpus, tokenizer: bpe, vocab_size: 100}"),
    "data_bpt_for_text": variant(data="data: {corpus: text, path: corpus, bytes_per_token: 2.0}"),
    "vocab_small": variant(model="model: {n_layers: 2, d_model: 32, n_heads: 2, context_length: 32, vocab_size: 100}"),
    "bin_odd": variant(data="data: {corpus: bin, path: bin_odd, bytes_per_token: 4.0}"),
    "bin_no_val": variant(data="data: {corpus: bin, path: bin_no_val, bytes_per_token: 4.0}"),
    "bin_bpt_zero": variant(data="data: {corpus: bin, path: bin_good, bytes_per_token: 0}"),
    "bin_bpt_negative": variant(data="data: {corpus: bin, path: bin_good, bytes_per_token: -4.0}"),
    "bin_bpt_nan": variant(data="data: {corpus: bin, path: bin_good, bytes_per_token: .nan}"),
    "bin_no_bpt": variant(data="data: {corpus: bin, path: bin_good}"),
    "bin_a_file": variant(data="data: {corpus: bin, path: short.txt, bytes_per_token: 4.0}"),
    "bin_vocab": variant(data="data: {corpus: bin, path: bin_good, bytes_per_token: 4.0}",
                         model="model: {n_layers: 2, d_model: 32, n_heads: 2, context_length: 32, vocab_size: 100}"),
    "cache_on_file": variant(data="data: {corpus: text, path: corpus, cache_dir: short.txt}"),
    "storage_garbage": GOOD + "storage: not a url\n",
    "storage_number": GOOD + "storage: 42\n",
    "storage_empty": GOOD + 'storage: ""\n',
    "storage_sqlite_on_file": GOOD + "storage: sqlite:///short.txt/study.db\n",
    "storage_sqlite_a_folder": GOOD + "storage: sqlite:///corpus\n",
    "storage_journal_no_folder": GOOD + "storage: journal:nowhere/study.journal\n",
    "storage_env_unset": GOOD + "storage: env:NORMSEARCH_TEST_UNSET\n",
    "storage_env_bad": GOOD + "storage: env:not-a-name\n",
    "storage_masked": GOOD + "storage: postgresql://ann:***@localhost/db\n",
    "results_on_file": variant(results_dir="results_dir: short.txt"),
    "results_number": variant(results_dir="results_dir: 5"),
    # the 2026 speedruns' options (issue 28): in a recipe's space and train sections
    "space_x0_sideways": variant(space=f"space: {{{SPACE_SITES}, options: {{x0: [none, sideways]}}}}"),
    "space_gain_two": variant(space=f"space: {{{SPACE_SITES}, options: {{gain: [vector, 2]}}}}"),
    "space_sinks_maybe": variant(space=f"space: {{{SPACE_SITES}, options: {{sinks: [off, maybe]}}}}"),
    "space_ctx_granularity": variant(space=f"space: {{{SPACE_SITES}, granularity: {{attn_in: full}}}}"),
    "train_gain_decay_maybe": variant(train="train: {gain_decay: maybe}"),
}

#: placement specs with a bad 2026 option (issue 28), written as spec_<name>.yaml: (text, message)
BAD_SPECS = {
    "x0_middle": ("block: {attn_in: rmsnorm}\nx0: {at: middle}\n", "x0.at: unknown place 'middle'; known: input, attn"),
    "stream_sideways": ("block: {attn_in: rmsnorm}\nresidual: {stream: sideways}\n",
                        "residual.stream: unknown stream 'sideways'; known: none, sublayer, block"),
    "stream_init_alone": ("block: {attn_in: rmsnorm}\nresidual: {stream_init: 2}\n",
                          "residual.stream_init and stream_lr need a stream multiplier (stream: sublayer or block)"),
    "sinks_maybe": ("block: {attn_in: rmsnorm}\nsinks: maybe\n", "sinks must be true or false, not 'maybe'"),
    "gain_two": ("block: {attn_in: {kind: rmsnorm, gain: 2}}\n",
                 "rmsnorm.gain must be vector (or true), none (or false) or one_plus, not 2"),
    "gain_decay_one": ("block: {attn_in: rmsnorm}\ngain_decay: 1\n", "gain_decay must be true or false, not 1"),
    "x0_gate_mlp": ("block: {attn_in: rmsnorm}\nx0: {at: input, gate: mlp}\n", "x0.gate: unknown gate 'mlp'"),
    "ctx_granularity": ("block: {attn_in: {kind: rmsnorm, granularity: full}}\n",
                        "granularity is only for the q, k, v and ctx sites"),
}

SPACES = {"binary_space.yaml": b"\x00sites:\x00", "latin1_space.yaml": "description: caf\xe9\n".encode("latin-1")}


def make_world(root: Path) -> None:
    corpus = root / "corpus"
    corpus.mkdir()
    words = "the of and to a in that is was he for it with as his on be at by had".split()
    for i in range(20):
        (corpus / f"doc{i:02d}.txt").write_text(" ".join(words[(i + j) % len(words)] for j in range(400)) + "\n")
    (root / "short.txt").write_text("too short\n")
    (root / "locked.txt").write_text("a locked file that the mock refuses to read\n" * 50)
    (root / "noise.bin").write_bytes(bytes(range(256)) * 40)
    for name, sizes in {"bin_good": (4000, 1000), "bin_odd": (4001, 1000), "bin_no_val": (4000, None)}.items():
        (root / name).mkdir()
        (root / name / "train.bin").write_bytes(bytes([1, 200]) * (sizes[0] // 2) + bytes(sizes[0] % 2))
        if sizes[1]:
            (root / name / "val.bin").write_bytes(bytes([1, 200]) * (sizes[1] // 2))
    (root / "good.yaml").write_text(GOOD)
    for name, text in RECIPES.items():
        path = root / f"{name}.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    for name, data in SPACES.items():
        (root / name).write_bytes(data)
    (root / "folder.yaml").mkdir()  # a folder where a file should be
    (root / "spec_binary.yaml").write_bytes(b"block:\x00\xff")
    (root / "spec_latin1.yaml").write_bytes("block: {attn_in: rmsn\xf6rm}\n".encode("latin-1"))
    (root / "spec_typo.yaml").write_text("block: {atn_in: rmsnorm}\n")
    for name, (text, _) in BAD_SPECS.items():
        (root / f"spec_{name}.yaml").write_text(text)
    (root / "notes").mkdir()
    (root / "notes" / "mine.png").write_text("the user's own file")
    (root / "results").mkdir()
    (root / "results" / "notastudy").mkdir()
    # a finished study (its architectures: pre_ln and post_ln, the baselines, and t3 and t5)
    shutil.copytree(Path(__file__).parent / "fixtures" / "study_v1" / "results" / "v1", root / "results" / "v1")


def _locked(monkeypatch, root: Path):
    """Reading locked.txt or good.yaml's twin locked.yaml fails as if its mode were 000."""
    real = Path.read_bytes

    def read_bytes(self):
        if self.name in ("locked.txt", "locked.yaml"):
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    (root / "locked.yaml").write_text(GOOD)


def _read_only_cwd(monkeypatch, root: Path):
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p).resolve() == root.resolve()
                        else real(p, mode, **kw))


def _cache_on_file(monkeypatch, root: Path):
    monkeypatch.setenv("NORMSEARCH_CACHE", str(root / "short.txt"))


def _storage_env(url: str):
    def setup(monkeypatch, root):
        monkeypatch.setenv("NORMSEARCH_STORAGE", url)
    return setup


NEEDS_SEARCH = pytest.mark.xfail(strict=True, reason="needs search package (integrator)")

CASES = []


def case(id_, *args, msg="", setup=None, marks=()):
    CASES.append(pytest.param(list(args), msg, setup, id=id_, marks=marks))


# -- every bad recipe, through each command that reads a recipe -------------------------------------
RECIPE_MESSAGES = {
    "binary": "binary file", "latin1": "not UTF-8", "utf16": "binary file", "bad_yaml": "not valid YAML",
    "a_list": "a recipe is a mapping", "a_scalar": "a recipe is a mapping", "empty": "a recipe is a mapping",
    "deep": "deep.yaml", "unknown_section": "unknown section 'modle'", "unknown_key": "unknown key 'n_layer'",
    "seed_negative": "train.seeds", "seed_float": "train.seeds", "seed_huge": "train.seeds",
    "seed_repeated": "repeated", "lr_zero": "train.lr", "lr_negative": "train.lr", "lr_nan": "train.lr",
    "lr_inf": "train.lr", "lr_text": "train.lr", "lr_empty": "train.lr", "steps_zero": "train.steps",
    "batch_negative": "train.batch_size", "warmup_long": "train.warmup", "heads_odd": "divisible",
    "context_zero": "context_length", "dropout_big": "dropout", "layers_text": "model.n_layers",
    "trials_negative": "search.trials", "search_seed_negative": "search.seed", "sampler_unknown": "search.sampler",
    "baseline_unknown": "unknown baseline 'pre_lm'", "heartbeat_zero": "search.heartbeat",
    "trials_no_space": "no `space`", "space_too_small": "fewer than", "space_kind_empty": "space kind",
    "space_kind_unknown": "unknown norm kind", "space_site_unknown": "unknown site 'atn_in'",
    "space_no_sites": "space needs `sites`", "space_no_choice": "at least one choice",
    "space_missing_file": "not found", "space_binary_file": "binary file", "space_latin1_file": "not UTF-8",
    "space_a_list": "a search space is a mapping", "name_newline": "study name", "name_bell": "study name",
    "name_escape": "study name", "name_tab": "study name", "name_space": "study name", "name_slash": "study name",
    "name_dot": "study name", "name_empty": "study name", "name_number": "study name", "name_long": "study name",
    "data_missing": "no such file or folder", "data_no_path": "needs data.path", "data_binary": "binary file",
    "data_short": "fewer than one eval window",
    "data_val_fraction": "val_fraction", "data_eval_windows": "eval_windows", "data_corpus_unknown": "data.corpus",
    "data_bpe_vocab": "vocab_size", "data_bpt_for_text": "bytes_per_token", "vocab_small": "model.vocab_size",
    "bin_odd": "not a whole number", "bin_no_val": "no val.bin", "bin_bpt_zero": "bytes_per_token",
    "bin_bpt_negative": "bytes_per_token", "bin_bpt_nan": "bytes_per_token", "bin_no_bpt": "bytes_per_token",
    "bin_a_file": "not a folder", "bin_vocab": "model.vocab_size", "cache_on_file": "is a file, not a folder",
    "storage_garbage": "neither a database URL", "storage_number": "storage must be",
    "storage_empty": "storage must be", "storage_sqlite_on_file": "is a file, not a folder",
    "storage_sqlite_a_folder": "is not a file", "storage_journal_no_folder": "does not exist",
    "storage_env_unset": "NORMSEARCH_TEST_UNSET is not set", "storage_env_bad": "names an environment variable",
    "storage_masked": "password is not kept", "results_on_file": "is a file, not a folder",
    "results_number": "results_dir must be",
    "space_x0_sideways": "space options.x0: unknown choice 'sideways'; known: none, input, attn",
    "space_gain_two": "space options.gain: unknown choice 2; known: vector, none, one_plus",
    "space_sinks_maybe": "space options.sinks: unknown choice 'maybe'; known: off, on",
    "space_ctx_granularity": "only q, k, v and ctx have one, not 'attn_in'",
    "train_gain_decay_maybe": "train.gain_decay must be true",
}
NOT_TRAIN = {  # train reads model, data and train only: the rest of these is no concern of it
    "trials_negative", "search_seed_negative", "sampler_unknown", "baseline_unknown", "heartbeat_zero",
    "trials_no_space", "space_too_small", "storage_garbage", "storage_sqlite_on_file", "storage_sqlite_a_folder",
    "storage_journal_no_folder", "storage_env_unset", "storage_env_bad", "storage_masked", "results_on_file",
    "space_x0_sideways", "space_gain_two", "space_sinks_maybe", "space_ctx_granularity",
}
for name, message in RECIPE_MESSAGES.items():
    case(f"validate-{name}", "validate", f"{name}.yaml", msg=message)
    case(f"run-{name}", "run", f"{name}.yaml", msg=message)
    if name not in NOT_TRAIN:
        case(f"train-{name}", "train", f"{name}.yaml", "-p", "pre_ln", msg=message)
for name in ("binary", "bad_yaml", "name_newline", "storage_env_unset", "storage_garbage"):
    case(f"status-{name}", "status", f"{name}.yaml", msg=RECIPE_MESSAGES[name])

# -- files that are not there, not files, not readable -----------------------------------------------
for cmd in (["validate"], ["run"], ["train", "-p", "pre_ln"], ["status"]):
    case(f"{cmd[0]}-missing-recipe", cmd[0], "missing.yaml", *cmd[1:], msg="missing.yaml")
    if cmd[0] != "status":
        case(f"{cmd[0]}-folder-recipe", cmd[0], "folder.yaml", *cmd[1:], msg="a folder")
        case(f"{cmd[0]}-unreadable-recipe", cmd[0], "locked.yaml", *cmd[1:], msg="cannot read", setup=_locked)
    else:
        case("status-folder-not-results", "status", "folder.yaml", msg="not a normsearch results folder")
case("validate-unreadable-corpus", "validate", "data_unreadable.yaml", msg="cannot read", setup=_locked)
case("run-unreadable-corpus", "run", "data_unreadable.yaml", msg="cannot read", setup=_locked)
case("validate-read-only-cwd", "validate", "good.yaml", msg="not writable", setup=_read_only_cwd)
case("run-read-only-cwd", "run", "good.yaml", msg="not writable", setup=_read_only_cwd)
for cmd in (["validate"], ["run"], ["train", "-p", "pre_ln"]):
    case(f"{cmd[0]}-cache-on-file", cmd[0], "good.yaml", *cmd[1:], msg="$NORMSEARCH_CACHE", setup=_cache_on_file)

# -- command-line overrides: the error names the override ------------------------------------------
OVERRIDES = [
    ("lr-zero", ["--train.lr", "0"], "--train.lr"), ("lr-nan", ["--train.lr", ".nan"], "--train.lr"),
    ("lr-neg", ["--train.lr=-1"], "--train.lr"), ("seeds-neg", ["--train.seeds", "[-1]"], "--train.seeds"),
    ("steps-text", ["--train.steps", "many"], "--train.steps"), ("layers-zero", ["--model.n_layers", "0"],
                                                                  "--model.n_layers"),
    ("unknown-section", ["--modle.n_layers", "2"], "unknown recipe section"),
    ("unknown-key", ["--train.stepz", "2"], "--train.stepz"), ("no-value", ["--train.lr"], "needs a value"),
    ("positional", ["extra"], "unexpected argument"), ("bad-yaml", ["--train.lr", "[1,"], "not valid YAML"),
    ("name-space", ["--name", "a b"], "--name"), ("name-newline", ["--name", "a\nb"], "--name"),
    ("name-control", ["--name", "a\x1b[2Jb"], "--name"), ("trials-big", ["--search.trials", "500"], "fewer than"),
    ("space-missing", ["--space", "nope.yaml"], "not found"), ("baseline", ["--search.baselines", "[x]"],
                                                                "unknown baseline"),
    ("corpus", ["--data.corpus", "web"], "--data.corpus"), ("results-empty", ["--results_dir="], "results_dir"),
    ("storage-env", ["--storage", "env:NORMSEARCH_TEST_UNSET"], "NORMSEARCH_TEST_UNSET"),
    ("storage-garbage", ["--storage", "garbage"], "neither a database URL"),
    ("storage-file-folder", ["--storage", "sqlite:///short.txt/x.db"], "is a file"),
    ("storage-dotted", ["--storage.url", "x"], "is a value"),
    ("space-key", ["--space.kind", "[]"], "space kind"),
]
for id_, args, message in OVERRIDES:
    for cmd in ("validate", "run"):
        case(f"{cmd}-override-{id_}", cmd, "good.yaml", *args, msg=message)
for id_, args, message in OVERRIDES[:11]:
    case(f"train-override-{id_}", "train", "good.yaml", "-p", "pre_ln", *args, msg=message)

# -- train's own options -----------------------------------------------------------------------------
for id_, args, message in [
    ("seed-negative", ["--seed", "-1"], "--seed"), ("seed-text", ["--seed", "x"], "--seed"),
    ("seed-huge", ["--seed", str(2**40)], "--seed"), ("lr-zero", ["--lr", "0"], "--lr"),
    ("lr-negative", ["--lr", "-0.1"], "--lr"), ("lr-nan", ["--lr", "nan"], "--lr"), ("lr-inf", ["--lr", "inf"], "--lr"),
    ("lr-text", ["--lr", "fast"], "--lr"), ("placement-unknown", ["-p", "pre_lm"], "unknown baseline"),
    ("placement-missing", ["-p", "missing.yaml"], "no such spec file"),
    ("placement-binary", ["-p", "spec_binary.yaml"], "binary file"),
    ("placement-latin1", ["-p", "spec_latin1.yaml"], "not UTF-8"),
    ("placement-folder", ["-p", "folder.yaml"], "no such spec file"),
    ("placement-typo", ["-p", "spec_typo.yaml"], "unknown site 'atn_in'"),
    ("checkpoint-folder", ["--checkpoint", "notes"], "--checkpoint"),
    ("checkpoint-nowhere", ["--checkpoint", "nowhere/w.safetensors"], "--checkpoint"),
]:
    if "-p" not in args:
        args = ["-p", "pre_ln", *args]
    case(f"train-{id_}", "train", "good.yaml", *args, msg=message)
case("train-no-placement", "train", "good.yaml", msg="--placement")

# -- run's own options -------------------------------------------------------------------------------
case("run-devices-text", "run", "good.yaml", "--devices", "a,b", msg="--devices")
case("run-in-flight-zero", "run", "good.yaml", "--search.in_flight", "0", msg="search.in_flight must be >= 1")
case("run-reproducible-text", "run", "good.yaml", "--search.reproducible", "maybe", msg="must be true/false")
case("run-devices-empty", "run", "good.yaml", "--devices", ",", msg="--devices")
case("validate-storage-env", "validate", "good.yaml", "--storage", "env:NORMSEARCH_TEST_UNSET",
     msg="NORMSEARCH_TEST_UNSET")
case("validate-storage-recipe-env", "validate", "good.yaml", msg="neither a database URL",
     setup=_storage_env("garbage"))
case("run-storage-recipe-env", "run", "good.yaml", msg="neither a database URL", setup=_storage_env("garbage"))

# -- show and baselines ------------------------------------------------------------------------------
for id_, args, message in [
    ("unknown", ["show", "peri"], "unknown baseline"), ("missing", ["show", "missing.yaml"], "no such spec file"),
    ("binary", ["show", "spec_binary.yaml"], "binary file"), ("latin1", ["show", "spec_latin1.yaml"], "not UTF-8"),
    ("folder", ["show", "folder.yaml"], "no such spec file"), ("typo", ["show", "spec_typo.yaml"], "atn_in"),
    ("layers-zero", ["show", "pre_ln", "--layers", "0"], "--layers"),
    ("layers-negative", ["show", "pre_ln", "--layers", "-2"], "--layers"),
    ("layers-text", ["show", "pre_ln", "--layers", "x"], "--layers"),
    ("d-model-zero", ["show", "pre_ln", "--d-model", "0"], "--d-model"),
    ("heads-odd", ["show", "pre_ln", "--n-heads", "5"], "divisible"),
    ("heads-zero", ["show", "pre_ln", "--n-heads", "0"], "--n-heads"),
    ("kind", ["show", "pre_ln", "--kind", "batchnorm"], "unknown norm kind"),
    ("no-arg", ["show"], "Missing argument"),
    ("baselines-kind", ["baselines", "--kind", "batchnorm"], "unknown norm kind"),
    ("baselines-layers-zero", ["baselines", "--layers", "0"], "--layers"),
    ("baselines-layers-text", ["baselines", "--layers", "many"], "--layers"),
    ("baselines-extra", ["baselines", "extra"], "extra"),
    ("unknown-command", ["nosuch"], "No such command"),
    ("unknown-option", ["validate", "good.yaml", "--nosuch"], "--nosuch"),
    ("bench-unknown", ["bench", "nope"], "No such command"),
    ("bench-trial-option", ["bench", "trial", "--steps", "x"], "--steps"),
    ("bench-trial-unknown", ["bench", "trial", "--nope"], "--nope"),
    ("bench-kernels-unknown", ["bench", "kernels", "--nope"], "--nope"),
    ("bench-kernels-dtype", ["bench", "kernels", "--dtype", "int3"], "--dtype"),
]:
    case(f"show-{id_}" if args[0] == "show" else id_, *args, msg=message)

# -- placement specs with a bad 2026 option (issue 28), through show and train -p ---------------------
for name, (_, message) in BAD_SPECS.items():
    case(f"show-spec-{name}", "show", f"spec_{name}.yaml", msg=f"spec_{name}.yaml:")
    case(f"show-spec-{name}-says", "show", f"spec_{name}.yaml", msg=message)
    case(f"train-spec-{name}", "train", "good.yaml", "-p", f"spec_{name}.yaml", msg=message)

# -- status, report, export: read-only commands write nothing --------------------------------------
for cmd in ("status", "report"):
    case(f"{cmd}-sqlite-typo", cmd, "--storage", "sqlite:///tpyo.db", "--study-name", "x", msg="no such file")
    case(f"{cmd}-never-run", cmd, "good.yaml", msg="no such file")
    case(f"{cmd}-no-target", cmd, msg="results folder")
    case(f"{cmd}-not-results", cmd, "results/notastudy", msg="not a normsearch results folder")
    case(f"{cmd}-nowhere", cmd, "nowhere", msg="no such results folder")
    case(f"{cmd}-storage-env", cmd, "--storage", "env:NORMSEARCH_TEST_UNSET", "--study-name", "x",
         msg="NORMSEARCH_TEST_UNSET")
    case(f"{cmd}-storage-garbage", cmd, "--storage", "garbage", "--study-name", "x", msg="neither a database URL")
    case(f"{cmd}-journal-typo", cmd, "--storage", "journal:tpyo.journal", "--study-name", "x", msg="no such file")
    case(f"{cmd}-binary-recipe", cmd, "binary.yaml", msg="binary file")
case("report-out-file", "report", "good.yaml", "--out", "short.txt", msg="a file, not a folder")
# --against a name the study does not have: the closest names, else the study's baselines and architectures
# (the default baselines peri_ln and hybridnorm, absent from this study too, are skipped without a word)
case("report-against-typo", "report", "results/v1", "--against", "post_lm", msg="did you mean 'post_ln'",)
case("report-against-unknown", "report", "results/v1", "--against", "qk_norm_everywhere",
     msg="its baselines: pre_ln, post_ln; its other architectures: t3, t5")
case("report-against-one-unknown", "report", "results/v1", "--against", "t3", "--against", "nosuch",
     msg="'nosuch': study 'v1' has no architecture of that name")
case("report-out-foreign", "report", "good.yaml", "--out", "notes", msg="not a normsearch report")
for id_, args, message in [
    ("no-out", [], "--out"), ("out-file", ["--out", "short.txt", "--rank", "1"], "a file, not a folder"),
    ("rank-zero", ["--out", "x", "--rank", "0"], "--rank"), ("rank-text", ["--out", "x", "--rank", "x"], "--rank"),
    ("trial-negative", ["--out", "x", "--trial", "-1"], "--trial"),
    ("steps-zero", ["--out", "x", "--rank", "1", "--steps", "0"], "--steps"),
    ("sqlite-typo", ["--out", "x", "--rank", "1", "--storage", "sqlite:///tpyo.db", "--study-name", "x"],
     "no such file"),
    ("never-run", ["--out", "x", "--rank", "1"], "no such file"),
    ("storage-env", ["--out", "x", "--rank", "1", "--storage", "env:NORMSEARCH_TEST_UNSET", "--study-name", "x"],
     "NORMSEARCH_TEST_UNSET"),
]:
    target = [] if id_ in ("sqlite-typo", "storage-env") else ["good.yaml"]
    case(f"export-{id_}", "export", *target, *args, msg=message)
case("export-not-results", "export", "results/notastudy", "--out", "x", "--rank", "1",
     msg="not a normsearch results folder")


def snapshot(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = p.lstat()
            out[str(p.relative_to(root))] = (p.is_dir(), st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-input")
    make_world(root)
    return root


def test_at_least_150_kinds_of_bad_input():
    assert len(CASES) >= 150, len(CASES)


def test_the_good_recipe_is_valid_and_validate_writes_nothing(world, monkeypatch):
    """The cases are variants of one recipe that passes every check (so each case fails for its own
    reason), and validate itself writes nothing: no results folder, no database, no token cache."""
    monkeypatch.chdir(world)
    monkeypatch.setenv("NORMSEARCH_CACHE", str(world / "cache"))
    monkeypatch.delenv("NORMSEARCH_STORAGE", raising=False)
    before = snapshot(world)
    r = CliRunner().invoke(app, ["validate", "good.yaml", "--search.trials", "4"])
    assert r.exit_code == 0, r.output
    assert "is valid" in r.stdout and "storage: sqlite:///results/good/study.db" in r.stdout
    assert snapshot(world) == before


@pytest.mark.parametrize("args,message,setup", CASES)
def test_bad_input(world, monkeypatch, args, message, setup):
    monkeypatch.chdir(world)
    cache = world / "cache"
    monkeypatch.setenv("NORMSEARCH_CACHE", str(cache))
    monkeypatch.delenv("NORMSEARCH_STORAGE", raising=False)
    monkeypatch.delenv("NORMSEARCH_TEST_UNSET", raising=False)
    if setup is not None:
        setup(monkeypatch, world)
    before = snapshot(world)
    r = CliRunner().invoke(app, args)
    after = snapshot(world)
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr, r.exception)
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert message in lines[0], lines[0]
    assert after == before, {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
                             if before.get(k) != after.get(k)}
