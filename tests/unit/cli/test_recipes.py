"""lit_gpu:NAME names a shipped recipe (package data, one folder), resolved before parsing, anywhere."""

from __future__ import annotations

import sys

import pytest
import yaml

from lit_gpu.cli import main, recipes
from lit_gpu.errors import LitGpuError
from tests.helpers.paths import CONFIGS, REPO_ROOT


def test_one_source_of_truth_the_checkout_configs_is_the_package_folder():
    assert (REPO_ROOT / "configs").is_symlink()
    assert (REPO_ROOT / "configs").resolve() == CONFIGS.resolve() == recipes.ROOT
    on_disk = sorted(p.relative_to(CONFIGS).with_suffix("").as_posix() for p in CONFIGS.rglob("*.yaml"))
    assert recipes.names() == on_disk
    assert {"simple", "mnist", "debug", "trainer/gpu", "data/mnist", "sweeps/simple"} <= set(on_disk)


@pytest.mark.parametrize("name", recipes.names())
def test_every_recipe_has_a_one_line_description_and_no_checkout_paths(name):
    text = recipes.path(name).read_text()
    assert recipes.describe(name) and text.startswith("# ")
    assert "configs/" not in text and "../" not in text, "a recipe must work where lit_gpu is installed"
    assert isinstance(yaml.safe_load(text), dict)


@pytest.mark.parametrize("given", ["lit_gpu:trainer/gpu", "trainer/gpu", "lit_gpu:trainer/gpu.yaml"])
def test_path_accepts_the_name_with_or_without_prefix_and_suffix(given):
    assert recipes.path(given) == CONFIGS / "trainer" / "gpu.yaml"


@pytest.mark.parametrize(
    ("given", "hint"),
    [("lit_gpu:mnsit", "did you mean lit_gpu:mnist?"), ("lit_gpu:../pyproject", None), ("lit_gpu:", None)],
)
def test_unknown_names_are_refused_with_the_closest_one(given, hint):
    with pytest.raises(LitGpuError, match="no shipped config named .*lit-gpu configs lists them") as info:
        recipes.path(given)
    assert hint is None or hint in str(info.value)


def test_resolve_argv_rewrites_only_config_and_search_values():
    gpu, simple, space = (str(recipes.path(n)) for n in ("trainer/gpu", "simple", "sweeps/simple"))
    argv = ["fit", "--config", "lit_gpu:simple", "-c", "my.yaml", "--config=lit_gpu:trainer/gpu",
            "--search", "lit_gpu:sweeps/simple", "--trainer.default_root_dir", "lit_gpu:simple"]  # fmt: skip
    assert recipes.resolve_argv(argv) == [
        "fit", "--config", simple, "-c", "my.yaml", f"--config={gpu}", "--search", space,
        "--trainer.default_root_dir", "lit_gpu:simple",
    ]  # fmt: skip
    assert recipes.resolve_args({"config": "lit_gpu:simple"}) == {"config": "lit_gpu:simple"}


def test_resolve_args_leaves_sys_argv_alone_without_names(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["lit-gpu", "fit", "--config", "my.yaml"])
    assert recipes.resolve_args(None) is None
    monkeypatch.setattr(sys, "argv", ["lit-gpu", "fit", "--config", "lit_gpu:simple"])
    assert recipes.resolve_args(None) == ["fit", "--config", str(CONFIGS / "simple.yaml")]


def _printed(argv: list[str], capsys) -> dict:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


def test_a_name_parses_exactly_as_its_file_from_another_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no configs/ here
    names = ["--config", "lit_gpu:simple", "--config=lit_gpu:trainer/cpu"]
    by_name = _printed(["fit", *names, "--print_config"], capsys)
    files = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "trainer" / "cpu.yaml")]
    assert by_name == _printed(["fit", *files, "--print_config"], capsys)
    assert by_name["trainer"]["accelerator"] == "cpu"
    assert by_name["model"]["class_path"] == "lit_gpu.modules.RegressionModule"


def test_a_typo_in_a_name_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", "lit_gpu:trainer/cpuu"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "lit-gpu: error: no shipped config named lit_gpu:trainer/cpuu (did you mean lit_gpu:trainer/cpu?); "
        "lit-gpu configs lists them"
    ]
