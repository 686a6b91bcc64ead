"""The search space of ``lit-gpu sweep``: a YAML file mapping dotted config keys to Optuna distributions.

Example (``configs/sweeps/simple.yaml``)::

    model.init_args.optimizer.init_args.lr: {type: float, low: 1.0e-4, high: 0.3, log: true}
    model.init_args.optimizer.init_args.momentum: {type: float, low: 0.0, high: 0.95}
    data.init_args.batch_size: {type: categorical, choices: [32, 64, 128]}
    trainer.max_epochs: {type: int, low: 2, high: 6}

A key with a plain value (not a mapping) is set to that value in every trial, e.g.
``trainer.limit_val_batches: 1.0``. Every trial gets the sampled values as ``--key=value`` flags after
the user's own configs and flags, exactly as if typed after ``lit-gpu fit``.

The trials' ``fit`` arguments: checked once up front, and how parameters are named on screen.

``best.yaml``: the best trial's fit settings, built from the sweep's own configs and the trial's values.

Nothing is copied from the trial's run folder or taken from the storage but the trial's parameter
values, which must lie in the user's search space: a tampered storage cannot put a checkpoint, a
safety switch or a path into the file that the sweep tells the user to run.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.commands.sweep.storage import TrialRecord, read_space_file
from lit_gpu.errors import LitGpuError

# ---- space -----------------------------------------------------------------------------------------------
TYPES = ("float", "int", "categorical")
_FIELDS = {
    "float": ({"low", "high"}, {"log", "step"}),
    "int": ({"low", "high"}, {"log", "step"}),
    "categorical": ({"choices"}, set()),
}
#: top-level settings a search space never sets (each trial would get them as flags): what to resume from
#: and the safety switches (``weights_only: false`` with a ``ckpt_path`` ran a pickled checkpoint's code in
#: every trial); the same settings best.yaml never carries (lit_gpu.commands.sweep.space.DROPPED)
NOT_FROM_A_SPACE = ("config", "ckpt_path", "weights_only", "trust_module", "trust_modules", "predict_out")
_KEY = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_SCALARS = (type(None), bool, int, float, str)


@dataclass(frozen=True)
class Param:
    """One searched key: its Optuna distribution kind and arguments."""

    key: str
    type: str
    args: dict[str, Any]

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is one this parameter can take (a queued trial's value is checked so)."""
        if self.type == "categorical":
            return any(type(value) is type(c) and value == c for c in self.args["choices"])
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.type == "int" and not isinstance(value, int):
            return False
        low, high, step = self.args["low"], self.args["high"], self.args.get("step")
        if not (math.isfinite(value) and low <= value <= high):
            return False
        if step is None:
            return True
        k = (value - low) / step
        return math.isclose(k, round(k), abs_tol=1e-8)


@dataclass
class SearchSpace:
    """Searched parameters (in file order) and fixed overrides, read from ``path``."""

    path: str
    params: list[Param] = field(default_factory=list)
    fixed: dict[str, Any] = field(default_factory=dict)

    def sample(self, trial) -> dict[str, Any]:
        """Ask ``trial`` (an ``optuna.Trial``) for one value of every parameter: ``{key: value}``."""
        values: dict[str, Any] = {}
        for p in self.params:
            if p.type == "categorical":
                values[p.key] = trial.suggest_categorical(p.key, p.args["choices"])
            elif p.type == "float":
                values[p.key] = trial.suggest_float(p.key, **p.args)
            else:
                values[p.key] = trial.suggest_int(p.key, **p.args)
        return values

    def first_values(self) -> dict[str, Any]:
        """A valid value of every parameter (low end / first choice), to check the keys once up front."""
        return {
            p.key: (p.args["choices"][0] if p.type == "categorical" else p.args["low"]) for p in self.params
        }

    def flags(self, values: dict[str, Any]) -> list[str]:
        """``--key=value`` arguments for LightningCLI: the fixed overrides, then ``values``."""
        merged = {**self.fixed, **values}
        return [f"--{key}={format_value(value)}" for key, value in merged.items()]


def format_value(value: Any) -> str:
    """A value as jsonargparse reads it on the command line (strings raw, everything else as JSON)."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return json.dumps(value)


def _fail(path: str, key: str | None, what: str) -> LitGpuError:
    where = f"{path}: {key}" if key else path
    return LitGpuError(messages.SWEEP_BAD_SPACE.format(where=where, what=what))


def _number(path: str, key: str, spec: dict[str, Any], name: str, kind: str) -> float | int:
    value = spec[name]
    ok = isinstance(value, int) if kind == "int" else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or (isinstance(value, float) and not math.isfinite(value)):
        what = "an integer" if kind == "int" else "a number"
        raise _fail(path, key, f"'{name}' must be {what}, got {value!r}")
    return value


def _param(path: str, key: str, spec: dict[str, Any]) -> Param:
    kind = spec.get("type")
    if kind not in TYPES:
        raise _fail(path, key, f"unknown type {kind!r}")
    required, optional = _FIELDS[kind]
    given = set(spec) - {"type"}
    if required - given:
        raise _fail(path, key, f"type {kind} needs {', '.join(sorted(required - given))}")
    if given - required - optional:
        unknown = ", ".join(sorted(given - required - optional))
        raise _fail(path, key, f"unknown field(s) {unknown} for type {kind}")
    if kind == "categorical":
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise _fail(path, key, "'choices' must be a non-empty list")
        if not all(isinstance(c, _SCALARS) for c in choices):
            raise _fail(path, key, "choices must be plain values (numbers, strings, booleans or null)")
        return Param(key, kind, {"choices": list(choices)})
    low, high = _number(path, key, spec, "low", kind), _number(path, key, spec, "high", kind)
    if low > high:
        raise _fail(path, key, f"low ({low}) is above high ({high})")
    args: dict[str, Any] = {"low": low, "high": high}
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise _fail(path, key, f"'log' must be true or false, got {log!r}")
    if log:
        if low <= 0:
            raise _fail(path, key, f"log: true needs low > 0, got {low}")
        if spec.get("step") is not None and kind == "float":
            raise _fail(path, key, "a float cannot have both log: true and a step")
        args["log"] = True
    if spec.get("step") is not None:
        step = _number(path, key, spec, "step", kind)
        if step <= 0:
            raise _fail(path, key, f"'step' must be positive, got {step}")
        args["step"] = step
    return Param(key, kind, args)


def load_space(path: str | os.PathLike) -> SearchSpace:
    """Read and check a search-space YAML file.

    Raises:
        LitGpuError: Missing file, not a mapping, a malformed key, an unknown distribution type or a
            bad field. Whether a key exists in the config is checked later, by the CLI's parser.
    """
    text_path = str(path)
    try:
        data = read_space_file(path)  # lit_gpu.textfiles: files someone else may have written are read there
    except FileNotFoundError:
        raise LitGpuError(messages.SWEEP_SPACE_NOT_FOUND.format(path=text_path)) from None
    except (OSError, ValueError) as err:
        raise _fail(text_path, None, f"cannot read it ({str(err).splitlines()[0]})") from None
    if not isinstance(data, dict) or not data:
        raise _fail(text_path, None, "must be a non-empty mapping of dotted config keys")
    space = SearchSpace(text_path)
    for key, spec in data.items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise _fail(text_path, str(key), "keys must be dotted config keys such as trainer.max_epochs")
        if key.split(".")[0] in NOT_FROM_A_SPACE:
            raise _fail(text_path, key, messages.SWEEP_SPACE_SETS_A_SWITCH)
        if isinstance(spec, dict):
            space.params.append(_param(text_path, key, spec))
        else:
            space.fixed[key] = spec
    if not space.params:
        raise _fail(text_path, None, "no key has a distribution (a mapping with 'type')")
    return space


# ---- fitargs ---------------------------------------------------------------------------------------------
class _Parsed(Exception):
    def __init__(self, config: Any) -> None:
        self.config = config


def parse_fit_args(args: list[str]) -> Any:
    """Parse ``fit`` arguments without building anything; returns the ``fit`` config.

    A wrong key or value ends here with the CLI's one-line ``lit-gpu: error:`` and exit status 2.
    """
    from lit_gpu.cli.lightning_cli import LitGpuCLI

    class CheckCLI(LitGpuCLI):
        @override
        def _lit_gpu_before_instantiate(self) -> None:  # parsed and checked; no GPU claimed for a check
            raise _Parsed(self.config)

    try:
        CheckCLI(args=args)
    except _Parsed as parsed:
        return parsed.config["fit"]
    raise AssertionError("LitGpuCLI returned without parsing")  # pragma: no cover


def _flat_keys(config: Any, prefix: str = "") -> list[str]:
    keys = []
    for key, value in config.items() if hasattr(config, "items") else []:
        dotted = f"{prefix}{key}"
        keys.append(dotted)
        if hasattr(value, "items"):
            keys += _flat_keys(value, dotted + ".")
    return keys


def check_space_keys(space: SearchSpace, config: Any) -> None:
    """Every key of the search space must name a setting of the parsed ``fit`` config."""
    known = set(_flat_keys(config.as_dict() if hasattr(config, "as_dict") else config))
    for key in [p.key for p in space.params] + list(space.fixed):
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else "see lit-gpu fit --print_config for the keys"
            raise LitGpuError(messages.SWEEP_UNKNOWN_KEY.format(path=space.path, key=key, hint=hint))


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """Shortest unambiguous dotted suffix of each key (``...optimizer.init_args.lr`` -> ``lr``)."""
    names: dict[str, str] = {}
    for key in keys:
        parts = [p for p in key.split(".") if p != "init_args"]
        for n in range(1, len(parts) + 1):
            name = ".".join(parts[-n:])
            others = [k for k in keys if k != key]
            if not any(".".join([p for p in k.split(".") if p != "init_args"][-n:]) == name for k in others):
                break
        names[key] = name
    return names


def fmt(value: Any) -> str:
    """A value as the sweep prints it (floats to 4 significant digits)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def logger_flag(sweep_dir: Path, version: int) -> str:
    """``--trainer.logger=...``: a CSVLogger writing to ``<sweep_dir>/version_<version>``."""
    logger = {
        "class_path": "lightning.pytorch.loggers.CSVLogger",
        "init_args": {"save_dir": str(sweep_dir.parent), "name": sweep_dir.name, "version": version},
    }
    return f"--trainer.logger={json.dumps(logger)}"


# ---- best ------------------------------------------------------------------------------------------------
# settings best.yaml never carries: what to resume from, safety switches, where to write
DROPPED = NOT_FROM_A_SPACE
DROPPED_NESTED = (("trainer", "logger"), ("trainer", "default_root_dir"), ("checkpoint", "dirpath"))


def best_config(fit_args: list[str], space: SearchSpace, best: TrialRecord) -> dict[str, Any]:
    """The ``fit`` config of the sweep's own arguments plus ``best``'s values, as plain data."""
    values = {p.key: best.params[p.key] for p in space.params if p.key in best.params}
    config = parse_fit_args(["fit", *fit_args, *space.flags(values)])
    data = json.loads(json.dumps(config.as_dict(), default=str))
    for key in DROPPED:
        data.pop(key, None)
    for group, key in DROPPED_NESTED:
        if isinstance(data.get(group), dict):
            data[group].pop(key, None)
    return data


def write_best_config(
    out: Path, study_name: str, metric: str, best: TrialRecord, config: dict[str, Any]
) -> Path:
    """Write ``config`` to ``out`` atomically, with a header naming the trial."""
    header = (
        f"# Best trial {best.number} of study {study_name}: {metric} = {best.value:.6g}\n"
        f"# the sweep's configs and flags with this trial's values (its run: {best.run_dir})\n"
        f"#   lit-gpu fit --config {out}\n"
    )
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(header + yaml.safe_dump(config, sort_keys=False))
    os.replace(tmp, out)
    return out
