"""Fixtures shared by all tests (helpers live in tests/helpers/).

Tiers (tests/README.md):

* ``pytest`` (the README's): all but ``full`` and ``slow``; ``pytest --fast`` also leaves out ``integration``
  (all of tests/integration/, marked here, and unit tests marked so).
* ``pytest -m full`` (``.ci/run`` runs it after ``pytest``): the full lengths. A test that repeats a real
  process start many times (a signal chain, a requeue loop, every variant of a module) keeps a small sample
  unmarked and its full length beside it under ``@pytest.mark.full``: CI runs both.
* ``pytest -m slow``: opt-in long modes no tier runs (a 20 000-case fuzz, every config field, real MNIST,
  benchmark stages on CPU); run them by hand when touching what they cover.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.durations import SECONDS
from tests.helpers.fake_mnist import make_fake_mnist
from tests.helpers.paths import REPO_ROOT
from tests.helpers.ports import free_port


def pytest_configure(config: pytest.Config) -> None:
    """Under ``-n N`` (N > 1) each worker trains with one intra-op thread (and so do its subprocesses).

    N workers already keep the N cores busy; torch's default of one thread per core in every worker
    oversubscribes them, and the waiting OpenMP threads spin, burning CPU the other worker needs.
    """
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch  # here, not at the top: the controlling process never needs torch (~3 s of start-up)

        torch.set_num_threads(1)
    # pytest caches each test module with its asserts rewritten only where bytecode may be written: under
    # PYTHONDONTWRITEBYTECODE (CI) every worker rewrote all 150 modules again, ~4 s each run
    sys.dont_write_bytecode = False
    if not hasattr(config, "workerinput"):  # once, in the controlling process
        _compile_bytecode()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The session is over: move every object alive out of the cyclic GC's reach (``gc.freeze``), as the
    ``lit-gpu`` command does after its imports (``lit_gpu.cli.main.freeze_import_heap``). The interpreter's
    last collection at exit then skips the ~400,000 objects torch and Lightning made: ~1.5 s of each
    worker's exit, which the run waits for."""
    gc.freeze()


def _compile_bytecode() -> None:
    """Write lit_gpu's and the tests' bytecode before the run, whatever ``PYTHONDONTWRITEBYTECODE`` says.

    The suite starts about fifty fresh interpreters (entry points, DDP ranks, torchrun, kernels); where
    ``PYTHONDONTWRITEBYTECODE`` is set (as on the CI machine) each of them would compile every lit_gpu module
    again: ~0.4 s of CPU apiece. ``compileall`` writes only stale or missing ``__pycache__`` files (ignored
    by git).
    """
    import compileall

    for folder in ("lit_gpu", "tests", "examples"):
        if (REPO_ROOT / folder).is_dir():
            compileall.compile_dir(REPO_ROOT / folder, quiet=2, workers=1)


# ---- tiers: `pytest` runs everything (as CI); `pytest --fast` leaves out the `integration` tests -------
INTEGRATION_DIR = Path(__file__).parent / "integration"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="the inner-loop tier: leave out tests marked integration (every test in tests/integration/, "
        "and unit tests that start processes or train for seconds)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # heaviest files first (tests/helpers/durations.py); a stable sort keeps each file's tests together
    root = Path(str(config.rootpath))
    items.sort(key=lambda item: -SECONDS.get(Path(str(item.fspath)).relative_to(root).as_posix(), 0))
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
    if config.getoption("--fast"):
        slow = [item for item in items if item.get_closest_marker("integration")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not item.get_closest_marker("integration")]


#: variables launchers set in ``os.environ`` (Lightning's own launcher too, even for one device:
#: ``strategy="fsdp"`` sets LOCAL_RANK in the test process); a CLI started later must not read them
LAUNCHER_ENV = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")


@pytest.fixture(autouse=True)
def _restore_process_env(monkeypatch: pytest.MonkeyPatch):
    """``free:N`` hands its choice down through ``os.environ``, and launchers their ranks: keep one
    test's values out of the next."""
    for key in ("CUDA_VISIBLE_DEVICES", "LIT_GPU_FREE_CHOICE", *LAUNCHER_ENV):
        present = key in os.environ
        monkeypatch.setenv(key, os.environ.get(key, ""))  # records the value to restore at teardown
        if not present:
            monkeypatch.delenv(key)


@pytest.fixture(autouse=True)
def _fast_path_gate():
    """The gate reads the installed Lightning once per process (``gate.problem`` is cached): read it for
    every feature before any test wraps a Lightning method, and put it back after a test that changed it."""
    from lit_gpu import upstream as gate
    from lit_gpu.upstream import FEATURES

    if gate.problem.cache_info().currsize < len(FEATURES):
        for name in FEATURES:
            gate.problem(name)
    yield
    if gate.problem.cache_info().misses > len(FEATURES) or gate._told:
        gate.reset()
        for name in FEATURES:
            gate.problem(name)


@pytest.fixture(autouse=True)
def _teardown_process_group():
    yield
    torch = sys.modules.get("torch")  # a process group needs torch imported
    if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@pytest.fixture(scope="session")
def fake_mnist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data_dir holding a tiny, learnable fake MNIST (600 train / 200 test images)."""
    return make_fake_mnist(tmp_path_factory.mktemp("mnist"))


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """Environment for CLI subprocesses: quiet, CPU-only, a free master port, no launcher's ranks."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": "",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port()),
            # no empty entry (an empty entry is the working folder)
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), *env.get("PYTHONPATH", "").split(os.pathsep)) if p
            ),
            "OMP_NUM_THREADS": "1",
        }
    )
    return env


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A real 300 KB filesystem (tmpfs); skipped where mounting is not allowed."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)
