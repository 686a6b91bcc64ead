"""The budgeted text readers (lit_gpu.files.text) and the walls they end in: one line naming the file."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from lit_gpu.errors import LitGpuError
from lit_gpu.files import text, yaml_json
from lit_gpu.files.idx import check_idx_pair, idx_shape
from lit_gpu.files.names import check_name
from lit_gpu.files.sweep_storage import read_owner
from lit_gpu.files.text import BadFileError

WRITTEN = Path(__file__).parent / "written"


def _one_line(err: pytest.ExceptionInfo, *parts: str) -> str:
    message = str(err.value)
    assert "\n" not in message
    for part in parts:
        assert part in message
    return message


def test_the_files_lit_gpu_writes_read_back_unchanged():
    header, rows = text.read_csv(WRITTEN / "metrics.csv")
    assert header[:2] == ["epoch", "step"] and rows and set(rows[0]) == set(header)
    assert text.read_yaml(WRITTEN / "config.yaml")["trainer"]
    entries = list(text.json_lines(WRITTEN / "optuna_journal.log"))
    assert entries and all(isinstance(e, dict) and "op_code" in e for _, e in entries)


def test_a_byte_that_is_not_utf8_names_the_file_and_line(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_bytes(b"step,loss\n1,2\n3,\xff4\n")
    with pytest.raises(BadFileError) as err:
        text.read_csv(path)
    _one_line(err, str(path), "line 3", "0xff", "fix or remove")


def test_a_200kb_cell_and_a_long_line_are_refused(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n1," + "9" * 200_000 + "\n")
    with pytest.raises(BadFileError) as err:
        text.read_csv(path)
    _one_line(err, "line 2", "field larger")
    path.write_text("step,loss\n" + "1," * 600_000 + "\n")
    with pytest.raises(BadFileError) as err:
        text.read_csv(path)
    _one_line(err, "line 2", "longer than")


def test_csv_extra_and_missing_cells_and_nul(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("a,b\n1,2,3\n4\n\n")
    assert text.read_csv(path) == (["a", "b"], [{"a": "1", "b": "2"}, {"a": "4", "b": ""}])
    path.write_bytes(b"a,b\n1,\x002\n")  # a NUL is data to the csv module of Python 3.11+
    assert text.read_csv(path)[1] == [{"a": "1", "b": "\x002"}]


def test_deep_json_and_big_integers(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("[" * 100_000)
    with pytest.raises(BadFileError) as err:
        text.read_json(path)
    _one_line(err, "nested more than")
    path.write_text('{"pid": 18446744073709551617}')
    with pytest.raises(BadFileError) as err:
        text.read_json(path)
    _one_line(err, "out of range")
    path.write_text('{"beat": NaN}')
    with pytest.raises(BadFileError):
        text.read_json(path)
    assert text.parse_json('{"a": "[[[[", "b": [1]}', "x") == {"a": "[[[[", "b": [1]}


def test_owner_records_past_the_budget_count_as_absent(tmp_path):
    path = tmp_path / "version_0.json"
    for body in ("[" * 100_000, '{"pid": 18446744073709551617, "host": "h", "beat": 1}', "\xff"):
        path.write_text(body, errors="surrogateescape")
        assert read_owner(path) is None
    path.write_text('{"pid": 12, "host": "h", "beat": Infinity}')
    assert read_owner(path) is None
    path.write_text('{"pid": 12, "host": "h", "beat": 1.5}')
    assert read_owner(path).pid == 12


def test_yaml_bombs_depth_and_tags(tmp_path):
    path = tmp_path / "c.yaml"
    laughs = ["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for prev, name in zip("abcdefg", "bcdefgh", strict=True):
        laughs.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    path.write_text("\n".join(laughs) + "\n")
    with pytest.raises(BadFileError) as err:
        text.read_yaml(path)
    _one_line(err, "expands to more than")
    path.write_text("a: " + "[" * 100 + "]" * 100)
    with pytest.raises(BadFileError) as err:
        text.read_yaml(path)
    _one_line(err, "nested more than")
    path.write_text("a: " + "9" * 5000)
    with pytest.raises(BadFileError) as err:
        text.read_yaml(path)
    _one_line(err, "out of range")
    path.write_text("a: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(BadFileError) as err:
        text.read_yaml(path)
    _one_line(err, "line 1")


def test_only_regular_files_are_opened(tmp_path):
    fifo = tmp_path / "metrics.csv"
    os.mkfifo(fifo)
    with pytest.raises(BadFileError) as err:
        text.read_csv(fifo)  # would block forever on open() without O_NONBLOCK
    _one_line(err, "not a regular file")
    with pytest.raises(BadFileError):
        text.read_text(tmp_path)
    with pytest.raises(FileNotFoundError):
        text.read_text(tmp_path / "missing")


def test_whole_file_reads_stop_at_their_budget(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"a: 1\n" * 100)
    with pytest.raises(BadFileError) as err:
        text.read_yaml(path, text.Limits(max_bytes=100))
    _one_line(err, "larger than 100 bytes")


def test_control_characters_of_a_file_name_are_escaped(tmp_path):
    path = tmp_path / "m\x1b[2J.csv"
    path.write_bytes(b"\xff")
    with pytest.raises(BadFileError) as err:
        text.read_csv(path)
    assert "\x1b" not in str(err.value) and "\\x1b" in str(err.value)


def test_environment_records(monkeypatch):
    from lit_gpu.commands.sweep.trial import trial_spec
    from lit_gpu.free_gpus import FREE_CHOICE_ENV, claim_free_gpus

    with pytest.raises(LitGpuError) as err:
        trial_spec("[" * 100_000)
    _one_line(err, "$LIT_GPU_SWEEP_TRIAL", "unset")
    with pytest.raises(LitGpuError) as err:
        trial_spec('{"args": 1}')
    _one_line(err, "not a trial spec")
    monkeypatch.setenv(FREE_CHOICE_ENV, '{"n": 99999999999999999999}')
    with pytest.raises(LitGpuError) as err:
        claim_free_gpus(1)
    _one_line(err, FREE_CHOICE_ENV)


@pytest.mark.parametrize(
    "name", ["..", ".", "a/b", "", "x\0y", "a\\b", "a\nb", "a\x9bb", "a\u202eb", "a\u200bb", "a\x1b[2Jb"]
)
def test_names_are_names(name):
    with pytest.raises(LitGpuError) as err:
        check_name(name, "--study_name", "pass a plain name")
    _one_line(err, "--study_name", "pass a plain name")


def test_a_search_file_named_dot_dot_yaml_is_refused():
    from lit_gpu.commands.sweep.options import parse_argv

    with pytest.raises(LitGpuError) as err:
        parse_argv(["--search", "...yaml"])
    _one_line(err, "study name", "--study_name")
    with pytest.raises(LitGpuError) as err:
        parse_argv(["--search", "s.yaml", "--study_name", "../out"])
    _one_line(err, "--study_name")
    assert parse_argv(["--search", "dir/simple.yaml"])[0].study == "simple"


def _idx(path: Path, dims: tuple[int, ...], items: int) -> None:
    path.write_bytes(b"\0\0\x08" + bytes([len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + b"\0" * items)


def test_idx_labels_shorter_than_images(tmp_path):
    images, labels = tmp_path / "images", tmp_path / "labels"
    _idx(images, (10, 2, 2), 40)
    _idx(labels, (7,), 7)
    assert idx_shape(images) == (10, 2, 2)
    with pytest.raises(BadFileError) as err:
        check_idx_pair(images, labels)
    _one_line(err, "7 labels", "10 images", "download both again")
    _idx(labels, (10,), 9)
    with pytest.raises(BadFileError) as err:
        check_idx_pair(images, labels)
    _one_line(err, "truncated")
    _idx(labels, (10,), 10)
    assert check_idx_pair(images, labels) == 10


def test_plot_labels_are_never_mathtext():
    from lit_gpu.commands.plot import plain_label

    assert plain_label("val/$\\frac{$") == "val/\\$\\frac{\\$"
    assert plain_label("_hidden").startswith("\u200a")
    assert "\x1b" not in plain_label("a\x1b[2Jb")


def test_sweep_journal_link_out_of_the_folder_and_bad_storage_urls(tmp_path):
    pytest.importorskip("optuna")
    from lit_gpu.commands.sweep.options import JOURNAL_NAME
    from lit_gpu.commands.sweep.study import make_storage

    sweep_dir, victim = tmp_path / "sweep", tmp_path / "victim.log"
    sweep_dir.mkdir()
    victim.write_text("")
    (sweep_dir / JOURNAL_NAME).symlink_to(victim)
    with pytest.raises(LitGpuError) as err:
        make_storage(None, sweep_dir)
    _one_line(err, "link out of the sweep folder", "--storage")
    assert victim.read_text() == ""
    with pytest.raises(LitGpuError) as err:
        make_storage(f"sqlite:///{tmp_path}/no/such/dir/s.db", sweep_dir)
    _one_line(err, "--storage", "cannot open that database")
    with pytest.raises(LitGpuError) as err:
        make_storage("sqlite://user:secret@/x?mode=bogus&uri=true", sweep_dir)
    assert "secret" not in _one_line(err, "--storage")


def test_a_journal_that_is_not_optuna_s(tmp_path):
    pytest.importorskip("optuna")
    from lit_gpu.commands.sweep.study import make_storage

    journal = tmp_path / "j.log"
    for body, part in (
        (b'{"op_code": 0}\n[1]\n', "line 2"),
        (b'{"op_code": 0, "worker_id": 18446744073709551617}\n', "out of range"),
        (b"\xff\n", "line 1"),
        (b'{"op_code": 0, "worker_id": "w"}\n', "cannot replay"),
    ):
        journal.write_bytes(body)
        with pytest.raises(LitGpuError) as err:
            make_storage(str(journal), tmp_path)
        _one_line(err, str(journal), part)


@pytest.mark.parametrize(
    "source",
    ["x: &a [*a]", "x: &a {k: *a}", "x: &a [1, [2, *a]]", "a: &a [1]\nb: &a [*a]"],
)
def test_a_yaml_alias_inside_its_own_anchor_is_refused(tmp_path, source):
    with pytest.raises(BadFileError) as err:
        text.parse_yaml(source, "config.yaml")
    _one_line(err, "config.yaml", "contains itself")
    # an alias to a finished anchor is fine, shared or not
    assert text.parse_yaml("a: &a [1]\nb: [*a, *a]", "ok.yaml") == {"a": [1], "b": [[1], [1]]}


def test_the_plain_data_check_refuses_a_cycle_without_recursing():
    cyclic: list = []
    cyclic.append(cyclic)
    with pytest.raises(yaml_json._Bad, match="contains itself"):
        yaml_json._check_plain({"x": cyclic}, text.YAML_LIMITS)
    shared = [1]
    yaml_json._check_plain([shared, shared, {"k": shared}], text.YAML_LIMITS)  # shared, not cyclic


def test_a_run_config_with_a_recursive_alias_has_no_signature(tmp_path):
    from lit_gpu.run.store import _class_paths
    from lit_gpu.run.store import _read_config as _read

    path = tmp_path / "config.yaml"
    path.write_text("model:\n  class_path: m.M\n  init_args:\n    extra: &a [*a]\n")
    assert _read(path) is None  # unreadable: not this run's config, never a RecursionError
    cyclic: list = [{"class_path": "x.Y"}]
    cyclic.append(cyclic)
    assert _class_paths({"k": cyclic}) == ["x.Y"]  # bounded even on data no reader makes: walked once
    shared = {"class_path": "x.Z"}  # a node two aliases share (acyclic): walked each time, as it expands
    assert _class_paths({"a": [shared, {"b": shared}]}) == ["x.Z", "x.Z"]


@pytest.mark.parametrize("number", ["1e400", "-1e999", "1" * 4000 + ".5", "0." + "1" * 100])
def test_json_numbers_that_are_infinite_or_too_long_are_refused(number):
    with pytest.raises(BadFileError) as err:
        text.parse_json(f'{{"value": {number}}}', "trial.json")
    _one_line(err, "trial.json", "number")
    assert text.parse_json('{"value": 1.5e308}', "ok.json") == {"value": 1.5e308}
