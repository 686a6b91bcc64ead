"""The built wheel, installed where there is no checkout, as a researcher would use it.

The wheel is built from the package's files (setuptools' PEP 517 backend, no network, no build
isolation), installed with ``pip install --no-deps`` into a fresh venv outside the checkout, whose
``.pth`` file lends it this interpreter's site-packages (torch, Lightning...: nothing is downloaded;
the venv's own ``lit_gpu`` comes first). From empty folders, with no ``PYTHONPATH``:

* ``lit-gpu configs`` lists the shipped recipes and ``lit-gpu fit --config lit_gpu:simple`` trains;
* ``lit-gpu init proj``, then the README's first ``lit-gpu fit`` in ``proj``;
* ``proj/notebook.ipynb`` runs top to bottom (nbclient, a kernel of the fresh venv).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import torch

from lit_gpu.cli import recipes
from lit_gpu.commands import init
from tests.helpers.paths import REPO_ROOT

pytest.importorskip("setuptools", reason="the wheel is built with setuptools (pip install -e .[dev])")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

TIMEOUT_S = 300
SOURCES = ("pyproject.toml", "README.md", "lit_gpu")  # what the wheel is built from
# run by the venv's python in the project: the notebook, then one cell more that says where lit_gpu is
NOTEBOOK_CHECK = """
import nbformat, nbclient
nb = nbformat.read("notebook.ipynb", as_version=4)
nb.cells.append(nbformat.v4.new_code_cell("import lit_gpu; print(lit_gpu.__file__)"))
where = {{"metadata": {{"path": "."}}}}  # the kernel starts in the project: my_research imports
nbclient.NotebookClient(nb, timeout={timeout}, kernel_name="python3", resources=where).execute()
outputs = [o for c in nb.cells for o in c.get("outputs", [])]
print("".join(o.get("text", "") for o in outputs))
print("IMAGES", sum("image/png" in o.get("data", {{}}) for o in outputs))
"""


def _run(argv: list[str | Path], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, (
        f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout + done.stderr


def _build_wheel(out: Path) -> Path:
    """The wheel, built from a copy of the package's files (no stale build/ folder, no checkout litter)."""
    src = out / "src"
    src.mkdir()
    for name in SOURCES:
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(REPO_ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO_ROOT / name, src / name)
    build = f"from setuptools import build_meta; build_meta.build_wheel({str(out)!r})"
    _run([sys.executable, "-c", build], cwd=src, env=dict(os.environ))
    (wheel,) = out.glob("lit_gpu-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A venv outside the checkout with only the wheel installed; the environment to run it in."""
    root = tmp_path_factory.mktemp("wheel")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}  # no checkout
    clean.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", PYTHONNOUSERSITE="1")
    wheel = _build_wheel(root)
    inside = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n.removeprefix("lit_gpu/configs/") for n in inside if n.startswith("lit_gpu/configs/"))
    on_disk = sorted(p.relative_to(recipes.ROOT).as_posix() for p in recipes.ROOT.rglob("*") if p.is_file())
    assert shipped == on_disk, (
        "the wheel must ship every recipe (pyproject.toml [tool.setuptools.package-data])"
    )

    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], root, clean)  # no pip copy: ~4 s less
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    pip = [sys.executable, "-m", "pip", "--python", python]  # this pip, installing into the venv
    _run([*pip, "install", "--no-deps", "--no-index", "-q", wheel], root, clean)
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root, clean)
    # this interpreter's packages (torch, lightning, nbclient...), after the venv's own lit_gpu
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(site.strip()) / "_lit_gpu_test_deps.pth").write_text("\n".join(ours) + "\n")
    kernel = venv / "share" / "jupyter" / "kernels" / "python3"  # the notebook's kernel: this venv's python
    kernel.mkdir(parents=True)
    spec = {
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "language": "python",
    }
    (kernel / "kernel.json").write_text(json.dumps(spec | {"display_name": "Python 3 (wheel test)"}))

    env = clean | {
        "PATH": str(python.parent) + os.pathsep + clean.get("PATH", ""),
        "JUPYTER_PATH": str(kernel.parents[1]),
    }
    where = _run([python, "-c", "import lit_gpu; print(lit_gpu.__file__)"], root, env).strip()
    assert Path(where).is_relative_to(venv), f"lit_gpu must come from the wheel, not {where}"
    return {"python": python, "lit_gpu": python.parent / "lit-gpu", "env": env, "root": root}


def _last_step(run: Path) -> int:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["global_step"]


@pytest.mark.full  # the wheel's console script is sampled by the init test below
def test_named_recipes_train_from_an_empty_folder(installed):
    empty = installed["root"] / "empty"
    empty.mkdir()
    listing = _run([installed["lit_gpu"], "configs"], empty, installed["env"])
    assert "lit_gpu:simple " in listing and "lit_gpu:trainer/gpu " in listing

    _run(
        [installed["lit_gpu"], "fit", "--config", "lit_gpu:simple", "--trainer.max_steps", "2"],
        empty,
        installed["env"],
    )
    run = empty / "runs" / "lit_gpu" / "version_0"
    assert _last_step(run) == 2
    assert "lit_gpu.nets.SimpleModel" in (run / "config.yaml").read_text()
    assert sorted(p.name for p in empty.iterdir()) == ["runs"]  # nothing else written here


@pytest.mark.full  # a wheel built and installed in a fresh venv: the full tier
def test_init_project_trains_from_its_readme_and_notebook(installed):
    _run([installed["lit_gpu"], "init", "proj"], installed["root"], installed["env"])
    proj = installed["root"] / "proj"
    readme = (proj / "README.md").read_text()
    assert init.FIT in readme
    env = installed["env"] | {"PYTHONPATH": "."}  # as the README's command says
    _run([installed["lit_gpu"], "fit", *init.FIT_ARGS], proj, env)
    run = proj / "runs" / "lit_gpu" / "version_0"
    assert "class_path: my_research.HuberRegression" in (run / "config.yaml").read_text()
    with open(run / "metrics.csv", newline="") as f:
        val = [float(row["val/loss"]) for row in csv.DictReader(f) if row["val/loss"]]
    assert len(val) == 5 and val[-1] < 0.5 * val[0], f"val/loss per epoch: {val}"

    check = NOTEBOOK_CHECK.format(timeout=TIMEOUT_S)
    out = _run([installed["python"], "-c", check], proj, installed["env"])
    assert "IMAGES 1" in out and "val/loss:" in out
    assert f"{installed['root'] / 'venv'}" in out.split("IMAGES")[0].strip().splitlines()[-1]  # its lit_gpu
    assert sorted(p.name for p in (proj / "runs" / "lit_gpu").iterdir()) == ["version_0", "version_1"]
