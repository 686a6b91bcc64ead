"""configs/: each full config is exactly its model and data fragments plus a few run settings of its own.

jsonargparse composes configs only on the command line (``--config a.yaml --config b.yaml``); a YAML
file cannot include another one. So a full config repeats its fragments, and this test is what keeps the
two in sync: the merged result of the fragments + the run settings listed here must equal the full config.
"""

from __future__ import annotations

import pytest
import yaml

from lit_gpu.cli import main
from tests.helpers.paths import CONFIGS

# full config -> (its fragments, the settings it owns beyond them, as flags)
COMPOSITIONS = {
    "mnist.yaml": (["model/mnist_cnn.yaml", "data/mnist.yaml"], ["--trainer.log_every_n_steps", "50"]),
    "simple.yaml": (
        ["model/simple.yaml", "data/synthetic.yaml"],
        ["--trainer.max_epochs", "10", "--trainer.log_every_n_steps", "10"],
    ),
}


def _printed(args: list[str], capsys) -> dict:
    with pytest.raises(SystemExit) as info:
        main(["fit", *args, "--print_config"])
    assert info.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


@pytest.mark.parametrize("full", sorted(COMPOSITIONS))
def test_full_config_equals_its_fragments_merged(full, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fragments, own = COMPOSITIONS[full]
    merged = _printed([a for f in fragments for a in ("--config", str(CONFIGS / f))] + own, capsys)
    assert _printed(["--config", str(CONFIGS / full)], capsys) == merged


def test_every_fragment_is_used_or_standalone():
    used = {f for fragments, _ in COMPOSITIONS.values() for f in fragments}
    fragments = {str(p.relative_to(CONFIGS)) for p in CONFIGS.glob("model/*.yaml")}
    fragments |= {str(p.relative_to(CONFIGS)) for p in CONFIGS.glob("data/*.yaml")}
    assert fragments == used, "a new model/data fragment: add the full config it mirrors to COMPOSITIONS"
