"""Every YAML a user hands the CLI is read by lit_gpu's bounded reader before jsonargparse sees it."""

from __future__ import annotations

import os
import tracemalloc

import pytest
import yaml
from jsonargparse import get_loader

from lit_gpu.cli import config_files, main
from lit_gpu.files.text import YAML_LIMITS
from tests.helpers.paths import CONFIGS

SHIPPED = sorted(CONFIGS.rglob("*.yaml"))

#: 350 bytes that expand to 9**9 (387 million) strings
BOMB = (
    "a: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]\n"
        for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + "trainer: {max_epochs: *i}\n"
)


def _load(text: str, path: str) -> object:
    with config_files.config_file(path):
        return config_files.load(text, os.path.basename(path))


@pytest.mark.parametrize("config", SHIPPED, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_shipped_config_reads_as_jsonargparse_reads_it(config):
    text = config.read_text()
    assert _load(text, str(config)) == get_loader("yaml")(text)


def test_print_config_output_reads_as_jsonargparse_reads_it(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(CONFIGS / "mnist.yaml"), "--print_config"])
    printed = capsys.readouterr().out
    saved = tmp_path / "printed.yaml"
    saved.write_text(printed)
    assert _load(printed, str(saved)) == get_loader("yaml")(printed)


def _refused(capsys, *configs) -> str:
    args = [a for c in configs for a in ("--config", str(c))]
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", str(CONFIGS / "simple.yaml"), *args, "--print_config"])
    assert info.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lit-gpu: error: "), captured.err
    assert not captured.out  # nothing printed as a config
    return lines[0]


def test_an_alias_bomb_is_one_line_and_costs_no_more_than_the_text_budget(tmp_path, capsys):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    assert len(BOMB) < 400
    line = _refused(capsys, bomb)
    assert f"{bomb}, line " in line and "expands to more than" in line
    tracemalloc.start()
    try:
        with pytest.raises(config_files.BadFileError):
            _load(BOMB, str(bomb))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < YAML_LIMITS.max_bytes


@pytest.mark.parametrize(
    "text",
    [
        "trainer: !!set {max_epochs, fast_dev_run}\n",
        "trainer:\n  max_epochs: !!python/object/apply:os.system [touch pwned]\n",
        "trainer:\n  max_epochs: !custom 3\n",
        "model: !!binary aGVsbG8=\n",
        "trainer: !<tag:yaml.org,2002:map> {max_epochs: 1}\n",
    ],
)
def test_a_tag_in_a_later_config_is_one_line_naming_the_file_and_line(text, tmp_path, capsys):
    """Before: a ``!!set`` in a third config replaced the whole trainer section of the ones before."""
    first = tmp_path / "epochs.yaml"
    first.write_text("trainer:\n  max_epochs: 3\n")
    tagged = tmp_path / "tagged.yaml"
    tagged.write_text(text)
    line = _refused(capsys, first, tagged)
    assert f"{tagged}, line {text.count(chr(10), 0, text.index('!')) + 1}: the tag !" in line
    assert not (tmp_path / "pwned").exists()


def test_a_fifo_or_an_oversized_file_is_refused_before_it_is_read(tmp_path, capsys):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    assert "is not a regular file" in _refused(capsys, fifo)
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(YAML_LIMITS.max_bytes + 1)  # sparse: no disk used
    assert "is larger than" in _refused(capsys, big)


def test_a_command_line_value_that_is_not_plain_yaml_stays_the_string_typed(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(CONFIGS / "simple.yaml"), "--trainer.default_root_dir", "!!set x",
              "--print_config"])  # fmt: skip
    assert yaml.safe_load(capsys.readouterr().out)["trainer"]["default_root_dir"] == "!!set x"


def test_an_alias_bomb_given_as_config_text_on_the_command_line_is_one_line(capsys):
    """``--config`` also takes YAML text: the same reader, the same budget (found by attacking the door)."""
    line = _refused(capsys, BOMB)
    assert "expands to more than" in line
