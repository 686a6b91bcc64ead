"""``plot`` reads a run's own ``metrics.csv`` only: a link out of the run folder is one line, never read."""

from __future__ import annotations

import pytest

from lit_gpu.cli import main
from lit_gpu.commands.plot import find_metrics

SECRET = "root:x:0:0:secret first line\n"


@pytest.mark.parametrize("where", ["run", "root"])
def test_a_metrics_csv_linked_out_of_its_run_is_not_followed(where, tmp_path, capsys):
    secret = tmp_path / "secret.csv"
    secret.write_text(SECRET)
    run = tmp_path / "runs" / "lit_gpu" / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").symlink_to(secret)
    with pytest.raises(SystemExit) as info:
        main(["plot", str(run if where == "run" else tmp_path / "runs")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lit-gpu: error: "), err
    assert "root:x" not in err
    if where == "run":
        assert "is a link that leads out of its run folder" in err
    assert not (run / "curves.png").exists()


def test_the_csv_named_itself_is_the_users_choice(tmp_path):
    own = tmp_path / "mine.csv"
    own.write_text("step,train/loss\n0,1.0\n")
    link = tmp_path / "link.csv"
    link.symlink_to(own)
    assert find_metrics(link) == link
