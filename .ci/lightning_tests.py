#!/usr/bin/env python3
"""Lightning's own tests as a check of lit_gpu: run them without and with lit_gpu's default callbacks.

    .venv/bin/python .ci/lightning_tests.py               # the CI tier: loops, optimization, logging, hooks
    .venv/bin/python .ci/lightning_tests.py --tier full   # issue 39's 1,359-test selection (~40 min, 2 cores)

Lightning's tests of the installed release's line (``../shared/lightning/tests_pytorch-2.6.5.tgz``) are
unpacked to a temporary folder and run twice with pytest-xdist: as they are, and with
``tests/lightning_suite/plugin.py``, which gives every ``Trainer`` they build the callbacks ``lit-gpu``
adds. The tests whose outcome differs are listed; a difference named in :data:`BY_DESIGN` is an
artefact of the test or a documented lit_gpu choice (the reason is printed), any other fails the run
(exit 1). Needs pytest-xdist, pytest-timeout, pytest-rerunfailures, cloudpickle, scikit-learn and
pandas (``--install`` adds the ones lit_gpu's dev extra lacks).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARBALL = REPO.parent / "shared" / "lightning" / "tests_pytorch-2.6.5.tgz"
EXTRA = ["pytest-rerunfailures", "cloudpickle", "scikit-learn", "pandas"]

TIERS = {
    "ci": ["loops", "trainer/optimization", "trainer/logging_", "models/test_hooks.py"],
    "full": [
        "loops", "trainer/optimization", "trainer/logging_", "callbacks", "models/test_hooks.py",
        "models/test_restore.py", "checkpointing", "trainer/test_trainer.py", "trainer/flags",
        "core/test_lightning_optimizer.py", "core/test_lightning_module.py",
        "trainer/connectors/test_signal_connector.py", "trainer/connectors/test_checkpoint_connector.py",
    ],
}  # fmt: skip

#: test id (or its start) -> why its outcome differs with lit_gpu's callbacks and that is not a defect
_REPLAY_STATE = (
    "with lit_gpu a module's plain train loader has a state (lit_gpu.resume.plain: exact mid-epoch resume); "
    "this test resumes a finished fit, which trains nothing, so Lightning never hands the saved state to the "
    "loader and the checkpoint it saves again lacks it (as with any stateful loader in stock Lightning); "
    "the test compares the two checkpoints' loop states"
)
_EXACT_RESUME = (
    "Lightning warns that a mid-epoch resume of a plain (stateless) train loader is inexact; with lit_gpu "
    "the "
    "module's plain loader is made replayable (lit_gpu.resume.plain: its position is in the checkpoint), the "
    "resume continues at the exact batch and Lightning rightly does not warn; the test expects the warning"
)
BY_DESIGN: dict[str, str] = {
    "loops/test_loops.py::test_restart_from_last_parity": _REPLAY_STATE,
    "loops/test_loops.py::test_restart_from_last_with_val_parity": _REPLAY_STATE,
    "models/test_restore.py::test_restarting_mid_epoch_raises_warning[ExceptionModel-True]": _EXACT_RESUME,
    "models/test_restore.py::test_restarting_mid_epoch_raises_warning[ShouldStopModel-True]": _EXACT_RESUME,
}

_TAGS = (("failure", "failed"), ("error", "error"), ("skipped", "skipped"))

PYTEST_INI = """[pytest]
addopts = --strict-markers --disable-pytest-warnings
xfail_strict = true
timeout = 300
"""


def unpack(dest: Path) -> Path:
    root = dest / "lt"
    if not (root / "tests_pytorch").is_dir():
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(TARBALL) as tar:
            tar.extractall(root, filter="data")
    return root


def run(root: Path, paths: list[str], plugin_on: bool, workers: int, out: Path) -> dict[str, str]:
    """Outcome per test id: passed, failed, error or skipped."""
    ini = root / "pytest.ini"
    ini.write_text(PYTEST_INI)
    junit = out / f"{'with' if plugin_on else 'without'}_lit_gpu.xml"
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env["LIT_GPU_PLUGIN_OFF"] = "0" if plugin_on else "1"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(ini),
        "--rootdir",
        str(root),
        "-p",
        "tests.lightning_suite.plugin",
    ]
    cmd += ["-n", str(workers), "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "--reruns", "1"]
    cmd += [str(root / "tests_pytorch" / p) for p in paths]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
    tail = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(f"  {'with' if plugin_on else 'without'} lit_gpu: {tail} ({time.monotonic() - started:.0f} s)")
    if not junit.is_file():
        print(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(2)
    outcomes: dict[str, str] = {}
    for case in ET.parse(junit).iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        name = name.split("tests_pytorch/", 1)[-1]
        kinds = {child.tag for child in case}
        outcomes[name] = next((o for tag, o in _TAGS if tag in kinds), "passed")
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tier", choices=sorted(TIERS), default="ci")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--install", action="store_true", help=f"pip install {' '.join(EXTRA)} first")
    parser.add_argument("--out", type=Path, help="keep the JUnit files here (default: a temporary folder)")
    parser.add_argument("--only", nargs="+", help="these test paths instead of the tier's")
    args = parser.parse_args()
    if args.install:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *EXTRA], check=True)
    import lightning

    with tempfile.TemporaryDirectory() as tmp:
        root = unpack(Path(tmp))
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        paths = args.only or TIERS[args.tier]
        print(f"Lightning {lightning.__version__}'s tests (2.6.5 suite), tier {args.tier}: {' '.join(paths)}")
        without = run(root, paths, plugin_on=False, workers=args.workers, out=out)
        with_ = run(root, paths, plugin_on=True, workers=args.workers, out=out)
    differ = sorted(t for t in without.keys() | with_.keys() if without.get(t) != with_.get(t))
    genuine = []
    for test in differ:
        reason = next((why for key, why in BY_DESIGN.items() if test.startswith(key)), None)
        line = f"  {test}: {without.get(test, 'absent')} -> {with_.get(test, 'absent')}"
        print(line + (f"  [by design: {reason}]" if reason else ""))
        if reason is None:
            genuine.append(test)
    print(f"{len(without)} tests; {len(differ)} differ, {len(genuine)} genuine")
    return 1 if genuine else 0


if __name__ == "__main__":
    sys.exit(main())
