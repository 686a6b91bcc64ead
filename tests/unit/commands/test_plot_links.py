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


@pytest.mark.parametrize("swap", ["link out", "another file"])
def test_a_link_swapped_in_after_the_check_is_not_read(swap, tmp_path, capsys, monkeypatch):
    """Found by the red team: ``find_metrics`` checked where ``metrics.csv`` led, then the reader opened
    the path again; a link swapped in between was followed. Now the opened file itself is checked."""
    import lit_gpu.commands.plot as plot

    secret = tmp_path / "secret.csv"
    secret.write_text("step,train/loss\n" + "".join(f"{i},{i}.5\n" for i in range(3)))
    run = tmp_path / "runs" / "lit_gpu" / "version_0"
    run.mkdir(parents=True)
    csv = run / "metrics.csv"
    csv.write_text("step,train/loss\n0,1.0\n")
    found = plot.find_metrics

    def checked_then_swapped(run_dir):
        path = found(run_dir)  # the check passed on the run's own file; then the swap
        csv.unlink()
        if swap == "link out":
            csv.symlink_to(secret)
        else:  # a link out opened, then the run's own file put back before the real-path check
            csv.symlink_to(secret)
            real_open = plot.open_regular

            def open_then_restore(path, fix=None):
                f = real_open(path, fix)
                csv.unlink()
                csv.write_text("step,train/loss\n0,1.0\n")
                return f

            monkeypatch.setattr(plot, "open_regular", open_then_restore)
        return path

    monkeypatch.setattr(plot, "find_metrics", checked_then_swapped)
    with pytest.raises(SystemExit) as info:
        main(["plot", str(run)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "is a link that leads out of its run folder" in err and "secret" not in err
    assert not (run / "curves.png").exists()


def test_a_link_inside_the_run_folder_is_still_read(tmp_path):
    from lit_gpu.commands.plot import read_metrics

    run = tmp_path / "version_0"
    run.mkdir()
    (run / "kept.csv").write_text("step,train/loss\n0,1.0\n1,0.5\n")
    (run / "metrics.csv").symlink_to(run / "kept.csv")
    assert read_metrics(run) == {"train/loss": [(0.0, 1.0), (1.0, 0.5)]}
