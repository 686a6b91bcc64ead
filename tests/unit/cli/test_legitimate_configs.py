"""Configs users write and ``--print_config`` prints (tests/corpus/configs/): read with the meaning
jsonargparse's own YAML loader gives them (``jsonargparse._loaders_dumpers.yaml_load``), in every form an
editor saves them (a UTF-8 BOM, CRLF line ends), and applied by ``lit-gpu fit`` to the values they name;
the tags that build other types stay one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from jsonargparse._loaders_dumpers import yaml_load

from lit_gpu.cli import config_files, main
from tests.helpers.paths import CONFIGS

CORPUS = Path(__file__).parents[2] / "corpus" / "configs"
FILES = sorted(CORPUS.glob("*.yaml"))

#: each file's values as ``lit-gpu fit --config lit_gpu:simple --config FILE --print_config`` prints them
EXPECTED = {
    "core_tags.yaml": {
        "seed_everything": 7,
        "model.init_args.optimizer.init_args.lr": 0.001,
        "model.init_args.optimizer.init_args.momentum": 0.9,
        "model.init_args.optimizer.init_args.nesterov": True,
        "trainer.max_epochs": 7,
        "trainer.default_root_dir": "runs",
        "trainer.log_every_n_steps": 5,
        "trainer.gradient_clip_val": None,
        "trainer.enable_progress_bar": False,
        "trainer.limit_train_batches": 4.0,
    },
    "anchors.yaml": {
        "data.init_args.batch_size": 32,
        "trainer.limit_train_batches": 32,
        "trainer.limit_val_batches": 32,
        "model.init_args.optimizer.init_args.lr": 0.02,
    },
    "merge_keys.yaml": {
        "trainer.max_epochs": 5,
        "trainer.log_every_n_steps": 2,
        # PyYAML (jsonargparse's loader) lets the later mapping of a merge list win: 0.4, not the spec's 0.3
        "model.init_args.optimizer.init_args.lr": 0.4,
        "model.init_args.optimizer.init_args.momentum": 0.5,
        "model.init_args.optimizer.init_args.nesterov": True,
    },
    "document.yaml": {
        "trainer.max_epochs": 3,
        "trainer.default_root_dir": "runs/exp #1",
        "trainer.log_every_n_steps": 10,
        "model.init_args.optimizer.class_path": "torch.optim.SGD",
        "model.init_args.optimizer.init_args.lr": 0.015,
        "model.init_args.optimizer.init_args.momentum": 0.9,
    },
    "flow.yaml": {"trainer.max_epochs": 2, "trainer.limit_train_batches": 0.5, "seed_everything": 1234},
}

#: how editors save the same text: as typed, with a UTF-8 BOM (Windows Notepad), with CRLF line ends, both
FORMS = {
    "plain": lambda text: text,
    "bom": lambda text: "\ufeff" + text,
    "crlf": lambda text: text.replace("\n", "\r\n"),
    "bom+crlf": lambda text: "\ufeff" + text.replace("\n", "\r\n"),
}


def _load(path: Path) -> object:
    """``path`` as ``lit-gpu`` reads a ``--config`` file (the bounded reader, then the loader)."""
    with config_files.config_file(path) as read:
        assert read is not None
        return config_files.load(read, os.path.basename(path))


def _written(tmp_path: Path, source: Path, form: str) -> tuple[Path, str]:
    text = FORMS[form](source.read_text())
    path = tmp_path / source.name
    path.write_bytes(text.encode("utf-8"))
    with open(path) as file:  # as jsonargparse reads a file (Path.get_content: open(path, "r"))
        return path, file.read()


def _printed(capsys, *configs: Path) -> dict:
    args = [a for c in configs for a in ("--config", str(c))]
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", str(CONFIGS / "simple.yaml"), *args, "--print_config"])
    captured = capsys.readouterr()
    assert info.value.code in (0, None), captured.err
    assert "Traceback" not in captured.err
    return yaml.safe_load(captured.out)


def _refused(capsys, config: Path) -> tuple[str, str]:
    """``fit --print_config`` over simple.yaml and ``config``: exit 2, one error line; (that line, stdout)."""
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", str(CONFIGS / "simple.yaml"), "--config", str(config), "--print_config"])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert info.value.code == 2 and len(lines) == 1, captured.err
    return lines[0], captured.out


def _at(config: dict, dotted: str) -> object:
    for key in dotted.split("."):
        config = config[key]
    return config


def test_the_corpus_is_every_file_with_its_expected_values():
    assert sorted(EXPECTED) == sorted(p.name for p in FILES)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("source", FILES, ids=lambda p: p.stem)
def test_a_config_reads_as_jsonargparse_reads_it(source, form, tmp_path):
    path, text = _written(tmp_path, source, form)
    assert _load(path) == yaml_load(text)


@pytest.mark.parametrize(
    ("source", "form"),
    [
        *[(path, "plain") for path in FILES],
        (CORPUS / "core_tags.yaml", "bom+crlf"),  # a sample of the editor forms; the rest are full
        *[
            pytest.param(path, form, marks=pytest.mark.full)
            for path in FILES
            for form in FORMS
            if form != "plain" and (path.name, form) != ("core_tags.yaml", "bom+crlf")
        ],
    ],
    ids=lambda value: value.stem if isinstance(value, Path) else value,
)
def test_fit_applies_the_values_a_config_names(source, form, tmp_path, capsys):
    path, _ = _written(tmp_path, source, form)
    printed = _printed(capsys, path)
    for dotted, value in EXPECTED[source.name].items():
        assert _at(printed, dotted) == value, dotted


def test_print_config_output_with_tags_feeds_back_unchanged(tmp_path, capsys):
    """``--print_config > run.yaml`` then ``--config run.yaml``: the same config again, tags resolved."""
    first = _printed(capsys, CORPUS / "core_tags.yaml", CORPUS / "merge_keys.yaml")
    saved = tmp_path / "printed.yaml"
    saved.write_text(yaml.safe_dump(first, sort_keys=False))
    assert _printed(capsys, saved) == first


@pytest.mark.parametrize(
    "text",
    [
        "trainer: !!set {max_epochs, fast_dev_run}\n",
        "trainer:\n  max_epochs: !!python/object/apply:os.system [touch pwned]\n",
        "trainer:\n  max_epochs: !Ref epochs\n",
        "trainer:\n  max_epochs: !!timestamp 2001-12-14\n",
        "model: !!binary aGVsbG8=\n",
        "trainer: !!omap [{max_epochs: 1}]\n",
    ],
)
def test_a_tag_that_builds_another_type_stays_one_line(text, tmp_path, capsys):
    tagged = tmp_path / "tagged.yaml"
    tagged.write_text(text)
    line, out = _refused(capsys, tagged)
    assert line.startswith(f"lit-gpu: error: {tagged}, line ") and "is not allowed" in line
    assert "!!str !!int !!float !!bool !!null !!seq !!map" in line
    assert not out and not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('trainer:\n  max_epochs: !!int "seven"\n', "invalid literal for int()"),
        ('trainer:\n  logger: !!bool "maybe"\n', "!!bool 'maybe' is not a YAML boolean"),
        ("trainer: !!str {max_epochs: 1}\n", "expected a scalar node, but found mapping"),
    ],
)
def test_a_core_tag_on_a_value_it_cannot_read_is_one_line(text, says, tmp_path, capsys):
    tagged = tmp_path / "bad.yaml"
    tagged.write_text(text)
    line, _ = _refused(capsys, tagged)
    assert says in line and line.startswith(f"lit-gpu: error: {tagged}")


def test_lit_gpus_bounds_stay_on_top_of_the_core_tags(tmp_path, capsys):
    """An alias bomb written with ``!!seq``/``!!str`` tags is the same bomb: one line, nothing built."""
    bomb = "a: &a !!seq [!!str x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{name}: &{name} !!seq [{','.join([f'*{prev}'] * 9)}]\n"
        for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
    )
    tagged = tmp_path / "bomb.yaml"
    tagged.write_text(bomb + "trainer: {max_epochs: *i}\n")
    line, _ = _refused(capsys, tagged)
    assert "expands to more than 20000 values (aliases counted)" in line
