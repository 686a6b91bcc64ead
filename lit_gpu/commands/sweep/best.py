"""``best.yaml``: the best trial's fit settings, built from the sweep's own configs and the trial's values.

Nothing is copied from the trial's run folder or taken from the storage but the trial's parameter
values, which must lie in the user's search space: a tampered storage cannot put a checkpoint, a
safety switch or a path into the file that the sweep tells the user to run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from lit_gpu.commands.sweep.fitargs import parse_fit_args
from lit_gpu.commands.sweep.space import NOT_FROM_A_SPACE, SearchSpace
from lit_gpu.commands.sweep.storage import TrialRecord

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
