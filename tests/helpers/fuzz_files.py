"""Fuzzing the readers of files lit_gpu writes: real files, mutated, read the way lit_gpu reads them.

Each target is a file lit_gpu wrote (``tests/unit/files/written/``: a run's ``metrics.csv``,
``config.yaml`` and ``hparams.yaml``, a sweep's journal and ``best.yaml``; owner records and trial
results are made by lit_gpu's own writers) and the calls that read it in lit_gpu. A mutation truncates
it, flips bytes, inserts random bytes or an attacker's token (a 200 KB cell, ``{`` 100 000 deep, an
integer past 2**63, a byte that is not UTF-8, mathtext, an escape sequence...). A read may succeed or
raise :class:`~lit_gpu.errors.LitGpuError` with one line; anything else is a failure, and so is a read
that runs past :data:`CALL_LIMIT_S` (a hang) or a process that grows past :data:`MEMORY_BUDGET`.

``python -m tests.helpers.fuzz_files N`` runs ``N`` mutated files and prints the tally.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lit_gpu.errors import LitGpuError
from tests.helpers.paths import CONFIGS

WRITTEN = Path(__file__).resolve().parents[1] / "unit" / "files" / "written"
MEMORY_BUDGET = 512 << 20  # growth of the process's peak RSS over a whole fuzz run
CALL_LIMIT_S = 20  # a single read taking longer is a hang

ATTACKS = (
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",  # a UTF-8 surrogate
    b"\x00",
    b"\r",
    b"\n",
    b'"',
    b",",
    b"\t",
    b"[" * 200,
    b"{" * 100_000,
    b"[" * 100_000,
    b"- " * 5000,
    b"9" * 25,
    b"-" + b"9" * 5000,
    b"18446744073709551617",
    b"1e999",
    b"NaN",
    b"-Infinity",
    b"x" * 200_000,  # a 200 KB cell
    b"$\\frac{$",
    b"$x^$",
    b"\x1b]0;pwned\x07\x1b[2J",
    "\u202e".encode(),
    b"&a [*a, *a, *a, *a, *a, *a, *a, *a, *a]",
    b"!!python/object/apply:os.system ['true']",
    b"? [a]: 1",
    b"../../../../etc/passwd",
    b'{"op_code": 7, "worker_id": "w", "trial_id": 99999999999}\n',
    b'"pid": 18446744073709551617',
)


@dataclass
class Target:
    """A file lit_gpu writes and a function that reads it the way lit_gpu does."""

    name: str  # the file name it is written under
    original: bytes
    read: Callable[[Path], Any]
    handled: tuple[type[BaseException], ...] = (LitGpuError,)
    weight: int = 1  # relative share of the mutations


@dataclass
class Tally:
    """What a fuzz run saw."""

    files: int = 0
    read_ok: int = 0
    one_line_errors: int = 0
    failures: list[str] = field(default_factory=list)
    per_target: dict[str, int] = field(default_factory=dict)
    rss_growth: int = 0


# ---- the reads --------------------------------------------------------------------------------
def _read_metrics(path: Path) -> None:
    from lit_gpu.commands import plot
    from lit_gpu.commands.sweep import trial as metrics_csv
    from lit_gpu.run.folder import continue_run
    from lit_gpu.run.loggers import MetricsWriter

    plot.read_metrics(path.parent)  # lit-gpu plot
    other = len(path.read_bytes()) % 3  # one of the other readers, varying with the file
    if other == 0:
        metrics_csv._rows(path)  # a stopped trial's metrics, continued
    elif other == 1:
        MetricsWriter(str(path.parent))  # a resumed fit appends to the file
    else:
        continue_run(path.parent, 3)  # a resumed fit drops the rows after its checkpoint


def _read_config(path: Path) -> None:
    from lit_gpu.run.store import read_plain
    from lit_gpu.textfiles import read_yaml

    read_plain(path)
    read_yaml(path)


def _read_yaml(path: Path) -> None:
    from lit_gpu.textfiles import read_yaml

    read_yaml(path)


def _read_space(path: Path) -> None:
    from lit_gpu.commands.sweep.space import load_space

    load_space(path)


def _read_journal(path: Path) -> None:
    from lit_gpu.commands.sweep.storage import read_trial
    from lit_gpu.commands.sweep.study import make_storage

    storage = make_storage(str(path), path.parent)
    for study in storage.get_all_studies():
        for trial in storage.get_all_trials(study._study_id, deepcopy=False):
            read_trial(trial, path.parent, None, str(path))


def _read_owner(path: Path) -> None:
    from lit_gpu.commands.sweep.storage import read_owner
    from lit_gpu.commands.sweep.worker import stale_reason

    stale_reason(read_owner(path), None)


def _read_result(path: Path) -> None:
    from lit_gpu.commands.sweep.trial import read_result

    read_result(path)


def _read_trial_env(path: Path) -> None:
    from lit_gpu.commands.sweep.trial import trial_spec

    trial_spec(os.fsdecode(path.read_bytes()))  # an environment value: str with surrogate escapes


def _read_free_choice_env(path: Path) -> None:
    from lit_gpu.devices import FreeChoice

    FreeChoice.from_env(os.fsdecode(path.read_bytes()))


def _read_checkpoint(path: Path) -> None:
    from lit_gpu.checkpoints.read import read_header

    read_header(path)


def _owner_record() -> bytes:
    from lit_gpu.commands.sweep.storage import Owner
    from lit_gpu.commands.sweep.worker import write_owner

    with _scratch() as folder:
        path = folder / "version_0.json"
        write_owner(path, Owner(pid=4242, host="node-1", beat=1.7e9, state="stopped", started="123"))
        return path.read_bytes()


def _trial_result() -> bytes:
    from lit_gpu.commands.sweep.trial import TrialResult

    return json.dumps(asdict(TrialResult(0.25, None, ["val/loss", "train/loss"]))).encode()


def _trial_env() -> bytes:
    spec = {
        "connect": {"study": "simple", "storage": None, "sweep_dir": "runs/sweeps/simple", "trial_id": 0},
        "metric": "val/loss",
        "reported": [],
        "args": ["--config", "simple.yaml", "--trainer.max_epochs=2"],
        "result": "runs/sweeps/simple/version_0/sweep_trial.json",
    }
    return json.dumps(spec).encode()


def _free_choice_env() -> bytes:
    from lit_gpu.devices import ChosenGpu, FreeChoice

    gpus = (ChosenGpu(0, 3, "GPU-1234", "NVIDIA H100"),)
    return FreeChoice(1, gpus, [0], "3", decided_here=True).to_env().encode()


def targets(checkpoint: bool = False) -> list[Target]:
    """The files and their reads (``checkpoint``: also ``last.ckpt`` through the checkpoint reader)."""
    found = [
        Target("metrics.csv", (WRITTEN / "metrics.csv").read_bytes(), _read_metrics, weight=3),
        Target("config.yaml", (WRITTEN / "config.yaml").read_bytes(), _read_config, weight=2),
        Target("hparams.yaml", (WRITTEN / "hparams.yaml").read_bytes(), _read_yaml),
        Target("best.yaml", (WRITTEN / "best.yaml").read_bytes(), _read_yaml),
        Target("space.yaml", (CONFIGS / "sweeps" / "simple.yaml").read_bytes(), _read_space),
        Target("optuna_journal.log", (WRITTEN / "optuna_journal.log").read_bytes(), _read_journal, weight=2),
        Target("version_0.json", _owner_record(), _read_owner, weight=2),
        Target("sweep_trial.json", _trial_result(), _read_result),
        Target("LIT_GPU_SWEEP_TRIAL", _trial_env(), _read_trial_env),
        # the caller (claim_free_gpus) turns these three into its one line
        Target(
            "LIT_GPU_FREE_CHOICE",
            _free_choice_env(),
            _read_free_choice_env,
            (LitGpuError, ValueError, KeyError, TypeError),
        ),
    ]
    if checkpoint:
        found.append(Target("last.ckpt", (WRITTEN / "last.ckpt").read_bytes(), _read_checkpoint))
    return found


# ---- mutations --------------------------------------------------------------------------------
def mutate(data: bytes, rng: random.Random) -> bytes:
    """``data`` with one to three random truncations, byte flips, insertions, deletions or repeats."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        at = rng.randint(0, len(out))
        if op < 0.15:
            del out[at:]
        elif op < 0.4 and out:
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(out))
                out[i] = rng.choice((out[i] ^ (1 << rng.randrange(8)), rng.randrange(256)))
        elif op < 0.55:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op < 0.85:
            out[at:at] = rng.choice(ATTACKS)
        elif op < 0.96:
            del out[at : at + rng.randint(1, 64)]
        else:
            chunk = bytes(out[at : at + rng.randint(1, 80)])
            out[at:at] = chunk * rng.randint(2, max(2, 100_000 // max(len(chunk), 1)))
    return bytes(out)


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lit_gpu_fuzz_") as folder:
        yield Path(folder)


class _Hang(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def on_alarm(signum: int, frame: object) -> None:
        raise _Hang(f"no answer after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def fuzz(n: int, seed: int = 0, checkpoint: bool = False, folder: Path | None = None) -> Tally:
    """Read ``n`` mutated files (spread over :func:`targets` by weight); return what happened."""
    rng = random.Random(seed)
    chosen = targets(checkpoint)
    weights = [t.weight for t in chosen]
    tally = Tally()
    peak = _peak_rss()
    with contextlib.ExitStack() as stack:
        base = folder or stack.enter_context(_scratch())
        for index in range(n):
            target = rng.choices(chosen, weights)[0]
            data = mutate(target.original, rng)
            run_dir = base / f"f{index % 50}"
            run_dir.mkdir(exist_ok=True)
            for old in run_dir.iterdir():
                old.unlink()
            path = run_dir / target.name
            path.write_bytes(data)
            tally.files += 1
            tally.per_target[target.name] = tally.per_target.get(target.name, 0) + 1
            try:
                with _time_limit(CALL_LIMIT_S):
                    target.read(path)
                tally.read_ok += 1
            except target.handled as err:
                if isinstance(err, LitGpuError) and "\n" in str(err):
                    tally.failures.append(
                        f"{target.name} #{index}: a message of several lines: {str(err)[:300]!r}"
                    )
                else:
                    tally.one_line_errors += 1
            except BaseException as err:  # noqa: BLE001 - everything else is what the fuzz looks for
                if isinstance(err, KeyboardInterrupt):
                    raise
                where = "".join(traceback.format_exception(err)[-3:])[:600]
                what = f"{type(err).__name__}: {err!s:.200}"
                tally.failures.append(f"{target.name} #{index} (seed {seed}): {what} {where}")
    tally.rss_growth = max(0, _peak_rss() - peak)
    return tally


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    result = fuzz(count, seed=int(sys.argv[2]) if len(sys.argv) > 2 else 0, checkpoint="--ckpt" in sys.argv)
    print(
        f"files {result.files}, read {result.read_ok}, one-line errors {result.one_line_errors}, "
        f"failures {len(result.failures)}, peak RSS growth {result.rss_growth >> 20} MiB"
    )
    print(json.dumps(result.per_target))
    for failure in result.failures[:20]:
        print(failure)
    with open("/proc/loadavg") as f:
        print("load average:", f.read().strip())
    sys.exit(1 if result.failures else 0)
