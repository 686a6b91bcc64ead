"""The front door: ``lit-gpu``, ``--help``, a mistyped command, ``--version``; tools imported lazily."""

from __future__ import annotations

import importlib
import subprocess
import sys
from importlib import metadata

import pytest

from lit_gpu.cli.main import COMMANDS, LIGHTNING_SUBCOMMANDS, closest_command, main

EVERY_COMMAND = ("fit", "validate", "test", "predict", "env", "bench", "export", "plot", "sweep")


def _main(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def _listed(text: str) -> dict[str, str]:
    """command -> its help line, from the ``commands:`` block of the help text."""
    block = text.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    return dict(line.strip().split(None, 1) for line in block.splitlines())


def test_help_lists_every_command_with_one_line(capsys):
    code, out, _ = _main(["--help"], capsys)
    assert code == 0
    listed = _listed(out)
    assert set(EVERY_COMMAND) <= set(listed) and list(listed) == list(COMMANDS)
    assert all(len(text) > 10 for text in listed.values())
    assert "--version" in out
    assert _main(["-h"], capsys)[1] == out


def test_no_command_lists_them_and_exits_2(capsys):
    code, out, err = _main([], capsys)
    assert code == 2 and out == ""
    assert set(EVERY_COMMAND) <= set(_listed(err))
    assert err.splitlines()[-1] == "lit-gpu: error: no command given (all commands are listed above)"


@pytest.mark.parametrize(
    ("typed", "meant"), [("fitt", "fit"), ("tset", "test"), ("sweeep", "sweep"), ("exprot", "export")]
)
def test_mistyped_command_suggests_the_closest(typed, meant, capsys):
    code, out, err = _main([typed, "--config", "x.yaml"], capsys)
    assert code == 2 and out == ""
    assert set(EVERY_COMMAND) <= set(_listed(err))
    assert err.splitlines()[-1] == (
        f"lit-gpu: error: unknown command {typed!r}; did you mean {meant!r}? (all commands are listed above)"
    )


def test_unrelated_word_gets_no_suggestion(capsys):
    assert closest_command("zzzzzz") is None
    code, _, err = _main(["zzzzzz"], capsys)
    assert code == 2 and "did you mean" not in err and "unknown command 'zzzzzz'" in err


def test_version_prints_lit_gpu_and_key_dependencies(capsys):
    import lit_gpu

    code, out, _ = _main(["--version"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"lit-gpu {lit_gpu.__version__} (Python ")
    versions = dict(line.split() for line in lines[1:])
    assert versions["torch"] == metadata.version("torch")
    assert versions["lightning"] == metadata.version("lightning")
    assert {"torchmetrics", "jsonargparse", "optuna"} <= set(versions)


def test_every_tool_module_has_a_main():
    for name, (module, _) in COMMANDS.items():
        if name not in LIGHTNING_SUBCOMMANDS:
            assert callable(importlib.import_module(module).main), name


@pytest.mark.integration
def test_help_imports_no_tool_and_no_lightning_cli(cli_env):
    """``lit-gpu --help`` answers without importing the tool modules (optuna, matplotlib) or LitGpuCLI."""
    code = (
        "import sys\nfrom lit_gpu.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('lit_gpu.cli.lightning_cli', 'lit_gpu.commands.sweep', 'optuna',"
        " 'lit_gpu.commands.bench', 'jsonargparse') if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    command = [sys.executable, "-c", code]
    out = subprocess.run(command, capture_output=True, text=True, env=cli_env, timeout=120)
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("from_command", [True, False])
def test_the_command_freezes_its_import_heap_and_python_callers_keep_theirs(
    from_command, monkeypatch, capsys
):
    """``lit-gpu`` (argv from the command line) calls gc.freeze after its imports; ``main(argv)`` from a
    notebook or a test does not touch the caller's garbage collector."""
    main_module = importlib.import_module("lit_gpu.cli.main")
    frozen: list[bool] = []
    monkeypatch.setattr(main_module.gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(sys, "argv", ["lit-gpu", "env", "--json"])
    with pytest.raises(SystemExit) as exit_info:
        main_module.main(None if from_command else ["env", "--json"])
    assert exit_info.value.code in (0, None)
    assert frozen == ([True] if from_command else [])
    assert capsys.readouterr().out.strip().startswith("{")


def test_the_ctrl_c_exit_status_is_the_interrupt_callbacks():
    from lit_gpu.cli.main import INTERRUPT_EXIT_CODE as FRONT_DOORS
    from lit_gpu.preemption import INTERRUPT_EXIT_CODE

    assert FRONT_DOORS == INTERRUPT_EXIT_CODE == 130
