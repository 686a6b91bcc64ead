"""``lit-gpu configs``: every shipped recipe by name with its first comment line; NAME prints the file."""

from __future__ import annotations

import pytest

from lit_gpu.cli import main, recipes
from lit_gpu.commands import configs
from tests.helpers.paths import CONFIGS


def test_lists_every_name_with_its_description(capsys):
    assert configs.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [f"lit_gpu:{n}" for n in recipes.names()]
    gpu = next(line for line in lines if line.startswith("lit_gpu:trainer/gpu "))
    first_line = (CONFIGS / "trainer" / "gpu.yaml").read_text().splitlines()[0]
    assert gpu.split(None, 1)[1] == first_line.lstrip("# ")


def test_name_prints_the_file_and_path_prints_where_it_is(capsys):
    assert configs.main(["mnist"]) == 0
    assert capsys.readouterr().out == (CONFIGS / "mnist.yaml").read_text()
    assert configs.main(["lit_gpu:trainer/cpu", "--path"]) == 0
    assert capsys.readouterr().out == f"{CONFIGS / 'trainer' / 'cpu.yaml'}\n"


def test_unknown_name_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["configs", "simpel"])
    assert info.value.code == 2
    assert capsys.readouterr().err == (
        "lit-gpu: error: no shipped config named lit_gpu:simpel (did you mean lit_gpu:simple?); "
        "lit-gpu configs lists them\n"
    )


def test_recipes_say_what_they_are_for_not_which_tracker_entry_made_them():
    import re

    jargon = re.compile(r"\b(issue|round)\s*#?\d", re.IGNORECASE)
    texts = {name: recipes.path(name).read_text() for name in recipes.names()}
    cited = {name: m.group(0) for name, text in texts.items() if (m := jargon.search(text))}
    assert cited == {}
    for name in recipes.names():
        assert not recipes.describe(name).endswith(":"), f"{name}: the listing shows a line cut mid-sentence"
