"""Files are data (issue 18): one test per vector the attack on lit_gpu's doors found.

Every attack starts from an ordinary run's files (a real ``lit-gpu fit`` of configs/simple.yaml) and a
weights-only-clean checkpoint. Each test checks what an attacker wanted did not happen: no marker file
(code ran), no victim changed or removed, nothing new written outside the run folder, no download tried
(``TORCH_HOME`` stays empty), no untrusted module imported; and what the user sees instead.
Vectors 7 and 8 (sweep storages, the working folder of trial processes) are in test_sweep_security.py;
links planted in a run folder that a resumed fit continues are in test_requeue.py.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from lit_gpu.checkpoints import build as safe_build
from lit_gpu.cli import main
from tests.helpers.paths import CONFIGS
from tests.helpers.payload import Payload as _Payload

SIMPLE = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]
RUN = Path("runs") / "lit_gpu" / "version_0"


@pytest.fixture(scope="module")
def ordinary_run(tmp_path_factory) -> Path:
    """The folder of one ordinary, finished run (``runs/lit_gpu/version_0`` inside it)."""
    cwd = tmp_path_factory.mktemp("ordinary")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        mp.setattr(sys, "argv", ["lit-gpu"])
        mp.delenv(safe_build.TRUST_ENV, raising=False)
        main(["fit", *SIMPLE])
    return cwd


@pytest.fixture
def work(ordinary_run, tmp_path, monkeypatch) -> Path:
    """A copy of the ordinary run in an empty working folder, with a victim beside it and TORCH_HOME."""
    shutil.copytree(ordinary_run / "runs", tmp_path / "runs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    monkeypatch.delenv(safe_build.TRUST_ENV, raising=False)
    (tmp_path / "torch_home").mkdir()
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    victims = tmp_path / "important_project_data"
    victims.mkdir()
    (victims / "thesis.tex").write_text("years of work")
    return tmp_path


def _outside_run(root: Path) -> dict[str, str]:
    """Every file outside ``runs/`` (and the markers' folder), with a hash of its content."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] == "runs" or not path.is_file() or path.is_symlink():
            continue
        found[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _lit_gpu(argv: list[str], capsys) -> tuple[int, list[str], str]:
    """Run lit-gpu in-process: exit status, its ``lit-gpu:`` lines on stderr, stdout."""
    capsys.readouterr()
    try:
        main(argv)
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.startswith("lit-gpu:")]
    return code, lines, captured.out


def _assert_untouched(work: Path, before: dict[str, str], marker: Path | None = None) -> None:
    assert (work / "important_project_data" / "thesis.tex").read_text() == "years of work"
    assert _outside_run(work) == before, "something was written outside the run folder"
    assert not any((work / "torch_home").iterdir()), "a download was tried"
    if marker is not None:
        assert not marker.exists(), "code from a file ran"


def _tamper_checkpoint(path: Path, **changes: Any) -> None:
    checkpoint = torch.load(path, weights_only=True)
    for key, value in changes.items():
        checkpoint[key] = value
    torch.save(checkpoint, path)


def _tamper_config(run: Path, update) -> None:
    config = yaml.safe_load((run / "config.yaml").read_text())
    update(config)
    (run / "config.yaml").write_text(yaml.safe_dump(config))


# ---- 1: a config.yaml switching the safety off ---------------------------------------------------------
def test_1_a_run_config_cannot_switch_weights_only_off(work, capsys):
    marker = work / "marker"
    ckpt = work / RUN / "checkpoints" / "last.ckpt"
    _tamper_config(work / RUN, lambda c: c.update(weights_only=False))
    _tamper_checkpoint(ckpt, payload=_Payload(marker))
    before = _outside_run(work)
    code, lines, _ = _lit_gpu(["test", "--ckpt_path", str(ckpt)], capsys)
    assert code == 2 and len([ln for ln in lines if "error" in ln]) == 1
    error = next(ln for ln in lines if "error" in ln)
    assert "refusing" in error or "pickle" in error.lower() or "weights" in error.lower(), error
    assert any("took model" in ln and "nothing else is read from it" in ln for ln in lines), lines
    _assert_untouched(work, before, marker)


# ---- 2: a config.yaml naming a module to import -----------------------------------------------------
def test_2_a_run_config_cannot_import_a_module(work, capsys):
    sys.modules.pop("this", None)
    _tamper_config(work / RUN, lambda c: c["trainer"].update(callbacks=[{"class_path": "this.Anything"}]))
    before = _outside_run(work)
    code, lines, out = _lit_gpu(
        [
            "test",
            "--ckpt_path",
            str(work / RUN / "checkpoints" / "last.ckpt"),
            "--trainer.limit_test_batches",
            "2",
        ],
        capsys,
    )
    assert code == 0, lines  # the callbacks entry is simply not read: model and data only
    assert "this" not in sys.modules and "Beautiful is better than ugly" not in out
    _assert_untouched(work, before)


# ---- 3: a config.yaml choosing where lit_gpu writes -------------------------------------------------
def test_3_a_run_config_cannot_choose_where_outputs_go(work, capsys):
    victim = work / "important_project_data" / "thesis.tex"
    elsewhere = work / "elsewhere_logs"

    def update(config: dict) -> None:
        config["predict_out"] = str(victim)
        config["trainer"]["logger"] = {
            "class_path": "lightning.pytorch.loggers.CSVLogger",
            "init_args": {"save_dir": str(elsewhere)},
        }
        config["trainer"]["default_root_dir"] = str(elsewhere)

    _tamper_config(work / RUN, update)
    before = _outside_run(work)
    ckpt = str(work / RUN / "checkpoints" / "last.ckpt")
    code, lines, _ = _lit_gpu(
        ["predict", "--ckpt_path", ckpt, "--trainer.limit_predict_batches", "2"], capsys
    )
    assert code == 0, lines
    assert not elsewhere.exists()
    after = _outside_run(work)
    new = {k for k in after if k not in before}
    assert new <= {"predictions.csv"}, new  # the default output, in the user's working folder
    assert all(after[k] == v for k, v in before.items())  # the victim (predict_out) is unchanged
    assert not any((work / "torch_home").iterdir())


# ---- 4: a config.yaml planted in a shared parent folder ---------------------------------------------
def test_4_a_config_in_a_parent_folder_is_not_picked_up(work, capsys):
    marker = work / "marker"
    shared = work / "shared"
    (shared / "sub").mkdir(parents=True)
    shutil.copy(work / RUN / "checkpoints" / "last.ckpt", shared / "sub" / "model.ckpt")
    planted = yaml.safe_load((work / RUN / "config.yaml").read_text())
    planted["model"]["init_args"]["net"] = {
        "class_path": "subprocess.Popen",
        "init_args": {"args": ["touch", str(marker)]},
    }
    planted["weights_only"] = False
    (shared / "config.yaml").write_text(yaml.safe_dump(planted))
    before = _outside_run(work)
    code, lines, _ = _lit_gpu(["test", "--ckpt_path", str(shared / "sub" / "model.ckpt")], capsys)
    assert code == 2 and len(lines) == 1, lines
    assert "ROOT/NAME/version_N/checkpoints layout" in lines[0] and "--config" in lines[0]
    _assert_untouched(work, before, marker)


# ---- 5: checkpoint-callback state naming paths outside the run --------------------------------------
def _point_state_at(ckpt: Path, target: str) -> None:
    checkpoint = torch.load(ckpt, weights_only=True)
    for state in checkpoint["callbacks"].values():
        if isinstance(state, dict) and "dirpath" in state:
            state["last_model_path"] = target
            state["best_model_path"] = target
            state["kth_best_model_path"] = target
            state["best_k_models"] = {target: torch.tensor(0.0)}
    torch.save(checkpoint, ckpt)


@pytest.mark.parametrize("form", ["dotdot", "absolute", "symlink"])
def test_5_resume_never_deletes_outside_the_run(work, capsys, form):
    ckpt = work / RUN / "checkpoints" / "last.ckpt"
    checkpoints = (work / RUN / "checkpoints").absolute()
    victims = work / "important_project_data"
    if form == "dotdot":
        target = str(checkpoints / ".." / ".." / ".." / ".." / "important_project_data")
    elif form == "absolute":
        target = str(victims)
    else:  # a link inside the checkpoint folder that leads to the victim
        (checkpoints / "old-best.ckpt").symlink_to(victims)
        target = str(checkpoints / "old-best.ckpt")
    _point_state_at(ckpt, target)
    before = _outside_run(work)
    # the user's own config and the default root: the state is restored since dirpath matches
    code, lines, _ = _lit_gpu(["fit", *SIMPLE, "--trainer.max_epochs", "4", "--ckpt_path", "last"], capsys)
    if form == "symlink":  # a continued folder with a link out of it is refused as a whole
        assert code == 2 and any("links that lead outside it" in ln for ln in lines), lines
    else:
        assert code == 0, lines
        dropped = [ln for ln in lines if "ignored" in ln and "lead outside" in ln]
        assert dropped and "FreshLastCheckpoint.last_model_path -> " in dropped[0], lines  # readable names
    assert victims.is_dir() and (victims / "thesis.tex").read_text() == "years of work"
    _assert_untouched(work, before)


# ---- 6: an imported package is not a trusted one; nothing that downloads is built ------------------
LPIPS = "torchmetrics.image.lpip.LearnedPerceptualImagePatchSimilarity"


def test_6_export_does_not_build_a_class_of_an_untrusted_imported_package(work, capsys):
    import torchmetrics  # noqa: F401 - imported already (Lightning imports it): still untrusted

    ckpt = work / RUN / "checkpoints" / "last.ckpt"
    _tamper_checkpoint(ckpt, lit_gpu_net={"class_path": LPIPS, "init_args": {"net_type": "vgg"}})
    before = _outside_run(work)
    code, lines, _ = _lit_gpu(["export", str(ckpt), "--out", str(work / RUN / "m.pt")], capsys)
    assert code == 2 and len(lines) == 1, lines
    assert "'torchmetrics' is not a trusted package" in lines[0]
    _assert_untouched(work, before)


def test_6_load_from_checkpoint_does_not_build_it_from_hparams_either(work):
    from lit_gpu.errors import LitGpuError
    from lit_gpu.modules import RegressionModule

    ckpt = work / RUN / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(ckpt, weights_only=True)
    checkpoint["hyper_parameters"]["net"] = {"class_path": LPIPS, "init_args": {"net_type": "vgg"}}
    torch.save(checkpoint, ckpt)
    before = _outside_run(work)
    with pytest.raises(LitGpuError, match="'torchmetrics' is not a trusted package"):
        RegressionModule.load_from_checkpoint(ckpt)
    _assert_untouched(work, before)


# ---- the same guarantees for any LightningModule -------------------------------------------------------
BORING = "lightning.pytorch.demos.boring_classes"


def test_any_lightning_module_loads_safely_and_exports(tmp_path, monkeypatch, capsys):
    """Lightning's BoringModel (no lit_gpu base class) trained by lit-gpu: loaded with
    ``lit_gpu.checkpoints.load_lightning_module`` and exported; a tampered hparams class is refused."""
    from lightning.pytorch.demos.boring_classes import BoringModel

    from lit_gpu.checkpoints import load_lightning_module
    from lit_gpu.errors import LitGpuError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    args = ["--model", f"{BORING}.BoringModel", "--data", f"{BORING}.BoringDataModule"]
    main(["fit", *args, "--config", str(CONFIGS / "debug.yaml")])
    ckpt = tmp_path / RUN / "checkpoints" / "last.ckpt"
    model = load_lightning_module(BoringModel, ckpt)
    state = torch.load(ckpt, weights_only=True)["state_dict"]
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())

    code, lines, _ = _lit_gpu(["export", str(ckpt), "--out", str(tmp_path / "boring.pt")], capsys)
    assert code == 0 and (tmp_path / "boring.pt").is_file(), lines

    marker = tmp_path / "marker"
    checkpoint = torch.load(ckpt, weights_only=True)
    checkpoint["hyper_parameters"] = {  # as LightningCLI records them, with the class swapped
        "_instantiator": "lightning.pytorch.cli.instantiate_module",
        "_class_path": "subprocess.Popen",
        "args": ["touch", str(marker)],
    }
    torch.save(checkpoint, tmp_path / "tampered.ckpt")
    with pytest.raises(LitGpuError):
        load_lightning_module(BoringModel, tmp_path / "tampered.ckpt")
    assert not marker.exists()


def test_plot_replaces_a_planted_link_instead_of_writing_through_it(work, capsys):
    """``lit-gpu plot RUN`` writes curves.png into someone else's run folder: atomically, replacing a
    symlink planted there, so the file it pointed to is untouched."""
    victim = work / "important_project_data" / "thesis.tex"
    (work / RUN / "curves.png").symlink_to(victim)
    before = _outside_run(work)
    code, lines, out = _lit_gpu(["plot", str(work / RUN)], capsys)
    assert code == 0, lines
    png = work / RUN / "curves.png"
    assert not png.is_symlink() and png.read_bytes()[:4] == b"\x89PNG"
    _assert_untouched(work, before)


@pytest.mark.parametrize("how", ["last", "file"])
def test_a_version_folder_planted_as_a_link_is_never_continued(how, work, capsys):
    """Found attacking the doors: ``runs/lit_gpu/version_0 -> elsewhere`` was continued and written into."""
    elsewhere = work / "someone_elses_run"
    shutil.move(str(work / RUN), elsewhere)
    (elsewhere / "hparams.yaml").write_text("PRECIOUS")
    (work / RUN).symlink_to(elsewhere)
    before = {p.name: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()}
    which = "last" if how == "last" else str(RUN / "checkpoints" / "last.ckpt")
    code, lines, _ = _lit_gpu(["fit", *SIMPLE, "--trainer.max_epochs", "3", "--ckpt_path", which], capsys)
    if how == "last":  # not a run here: a new run starts in a real folder
        assert code == 0 and any("training from scratch" in ln for ln in lines), lines
        assert (work / "runs" / "lit_gpu" / "version_1" / "checkpoints" / "last.ckpt").is_file()
    else:
        assert code == 2 and any(f"version_0 itself -> {elsewhere}" in ln for ln in lines), lines
    assert {p.name: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()} == before
