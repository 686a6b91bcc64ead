"""Every YAML a user hands the CLI is read by lit_gpu's bounded reader before jsonargparse sees it."""

from __future__ import annotations

import io
import os
import tracemalloc

import pytest
import yaml
from jsonargparse import get_loader

from lit_gpu.cli import config_files, main
from lit_gpu.cli.config_files import CONFIG_LIMITS
from lit_gpu.textfiles import READ_CHUNK, YAML_LIMITS
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
        "trainer: !<tag:yaml.org,2002:set> {max_epochs}\n",
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
        f.truncate(CONFIG_LIMITS.max_bytes + 1)  # sparse: no disk used
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


@pytest.mark.parametrize(
    "target",
    [
        "/proc/self/pagemap",  # a regular file that lists itself as empty: its read fails (was a traceback)
        "latin1",  # bytes that are not UTF-8 (was a UnicodeDecodeError traceback)
    ],
)
def test_a_config_that_cannot_be_read_as_text_is_one_line(target, tmp_path, capsys):
    """Found by attacking the door: jsonargparse read the file itself, after lit_gpu's checks."""
    config = tmp_path / "config.yaml"
    if target == "latin1":
        config.write_bytes(b"trainer:\n  default_root_dir: caf\xe9\n")
    else:
        config.symlink_to(target)
    line = _refused(capsys, config)
    assert str(config) in line


def test_a_config_file_is_read_once_and_what_was_checked_is_what_is_parsed(tmp_path, capsys, monkeypatch):
    """jsonargparse's own read (after the size check: a file that grew, a swapped file) is never used."""
    from jsonargparse import Path

    def swapped(self: Path) -> str:
        return "trainer: !!set {max_epochs}\n" if str(self).endswith("epochs.yaml") else real(self)

    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", swapped)
    config = tmp_path / "epochs.yaml"
    config.write_text("trainer:\n  max_epochs: 3\n")
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(CONFIGS / "simple.yaml"), "--config", str(config), "--print_config"])
    assert yaml.safe_load(capsys.readouterr().out)["trainer"]["max_epochs"] == 3


def test_a_file_named_inside_a_config_is_read_by_the_bounded_reader_too(tmp_path, capsys):
    """Found by attacking the door: ``data: big.yaml`` (a sub-config) was read whole by jsonargparse
    before the size check (300 MB of file: +900 MB of memory); now at most the text budget, one line."""
    from jsonargparse import Path

    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(4 * CONFIG_LIMITS.max_bytes)  # sparse: no disk used
    tracemalloc.start()
    try:
        with config_files.bounded_reads(), pytest.raises(config_files.BadFileError, match="is larger than"):
            Path(str(big), mode="fr").read_text()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < CONFIG_LIMITS.max_bytes + READ_CHUNK
    sub = tmp_path / "sub.yaml"
    sub.write_text("class_path: lit_gpu.data.SyntheticRegressionDataModule\ninit_args: {num_samples: 77}\n")
    main_config = tmp_path / "main.yaml"
    main_config.write_text("data: sub.yaml\n")  # relative to the config's folder, read as before
    with pytest.raises(SystemExit):
        main(
            ["fit", "--config", str(CONFIGS / "simple.yaml"), "--config", str(main_config), "--print_config"]
        )
    assert yaml.safe_load(capsys.readouterr().out)["data"]["init_args"]["num_samples"] == 77
    main_config.write_text("data: big.yaml\n")
    assert str(big) in _refused(capsys, main_config)


def test_config_dash_reads_standard_input_not_a_file_named_dash(tmp_path, capsys, monkeypatch):
    """``--config -`` is the config piped in: a file named ``-`` in the working folder is not read instead
    (found attacking the read-once change: it stat'ed ``-`` as a path)."""
    import io

    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").write_text("trainer:\n  max_epochs: 99\n")
    monkeypatch.setattr("sys.stdin", io.StringIO("trainer:\n  max_epochs: 3\n"))
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(CONFIGS / "simple.yaml"), "--config", "-", "--print_config"])
    assert yaml.safe_load(capsys.readouterr().out)["trainer"]["max_epochs"] == 3


class _Endless(io.TextIOBase):
    """``yes``'s output: a standard input that never ends (read past the budget, a test would hang)."""

    def __init__(self) -> None:
        self.served = 0

    def read(self, size: int | None = -1) -> str:
        assert size is not None and size >= 0, "standard input read to its end"
        self.served += size
        return "y\n" * (size // 2) + "y" * (size % 2)


def test_config_dash_reads_at_most_the_config_budget_of_standard_input(capsys, monkeypatch):
    """Found by the red team: ``yes | lit-gpu fit --config -`` read standard input without end."""
    stdin = _Endless()
    monkeypatch.setattr("sys.stdin", stdin)
    line = _refused(capsys, "-")
    assert "standard input (--config -): is longer than" in line
    assert stdin.served <= CONFIG_LIMITS.max_bytes + 1


def test_a_tag_in_a_sub_config_is_one_line_naming_that_file_and_line(tmp_path, capsys):
    """Found by the red team: refused, but as jsonargparse's "Expected a path ... not accessible"."""
    sub = tmp_path / "sub.yaml"
    sub.write_text("class_path: lit_gpu.data.SyntheticRegressionDataModule\ninit_args: !!set {a}\n")
    main_config = tmp_path / "main.yaml"
    main_config.write_text("data: sub.yaml\n")
    line = _refused(capsys, main_config)
    assert f"{sub}, line 2: the tag !!set is not allowed" in line


def test_config_limits_are_far_above_every_shipped_config_and_print_config_output(capsys):
    texts = [p.read_text() for p in SHIPPED]
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(CONFIGS / "mnist_gpu_graph.yaml"), "--print_config"])
    texts.append(capsys.readouterr().out)
    loader = yaml.SafeLoader
    for text in texts:
        assert len(text.encode()) * 100 < CONFIG_LIMITS.max_bytes
        events = sum(isinstance(e, yaml.NodeEvent) for e in yaml.parse(text, Loader=loader))
        assert events * 20 < CONFIG_LIMITS.max_nodes


@pytest.mark.parametrize("where", ["file", "sub-config"])
def test_a_config_past_the_config_limits_is_one_line_before_jsonargparse_sees_it(where, tmp_path, capsys):
    """Found by the red team: 300 000 keys (3.5 MB, under the 8 MiB file limit) took jsonargparse minutes."""
    many = tmp_path / "many.yaml"
    many.write_text("".join(f"k{i}: {i}\n" for i in range(CONFIG_LIMITS.max_nodes)))
    long = tmp_path / "long.yaml"
    long.write_text(f"model: {'x' * CONFIG_LIMITS.max_bytes}\n")
    for config, problem in ((many, "expands to more than"), (long, "is larger than")):
        if where == "sub-config":
            (tmp_path / "main.yaml").write_text(f"data: {config.name}\n")
            line = _refused(capsys, tmp_path / "main.yaml")
        else:
            line = _refused(capsys, config)
        assert f"{config}" in line and problem in line
