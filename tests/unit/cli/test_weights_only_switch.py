"""``weights_only: false`` counts only when typed on the command line (lit_gpu.cli.lightning_cli)."""

from __future__ import annotations

import pytest
from jsonargparse import Namespace

from lit_gpu.cli.lightning_cli import check_weights_only, typed_on_command_line
from lit_gpu.errors import LitGpuError


@pytest.mark.parametrize(
    ("argv", "typed"),
    [
        (["fit", "--config", "a.yaml", "--weights_only", "false"], True),
        (["fit", "-c", "a.yaml", "--weights_only=false"], True),
        (["--config", "top.yaml", "fit", "--weights_only", "false"], True),
        (["fit", "--weights_only", "false", "--config", "a.yaml"], False),  # the file has the last word
        (["fit", "--weights_only=false", "--config=a.yaml"], False),
        (["fit", "--config", "a.yaml"], False),
    ],
)
def test_the_last_word_on_weights_only_is_the_flag_or_a_file(argv, typed):
    assert typed_on_command_line(argv) is typed


def _config(value):
    return Namespace(subcommand="fit", fit=Namespace(weights_only=value))


def test_only_a_false_from_a_file_is_refused():
    file_argv = ["fit", "--config", "a.yaml"]
    with pytest.raises(LitGpuError, match="weights_only: false comes from a config file"):
        check_weights_only(_config(False), file_argv, from_command_line=True)
    for value in (True, None):  # weights-only on, or unset (lit_gpu makes it True)
        check_weights_only(_config(value), file_argv, from_command_line=True)
    check_weights_only(_config(False), [*file_argv, "--weights_only", "false"], from_command_line=True)
    check_weights_only(_config(False), [], from_command_line=False)  # LitGpuCLI(args={...}) in Python


def test_a_later_config_without_weights_only_leaves_the_typed_flag_the_last_word(tmp_path, monkeypatch):
    """As jsonargparse reads them: a later ``--config`` after ``--weights_only=false`` sets its keys only."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "b.yaml").write_text("trainer:\n  max_epochs: 2\n")
    (tmp_path / "c.yaml").write_text("fit:\n  weights_only: false\n")
    argv = ["fit", "--config", "a.yaml", "--weights_only=false", "--config", "b.yaml"]
    assert typed_on_command_line(argv) is True
    check_weights_only(_config(False), argv, from_command_line=True)
    assert typed_on_command_line([*argv, "-c=c.yaml"]) is False  # this one sets it
