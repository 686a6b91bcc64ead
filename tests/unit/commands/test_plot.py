"""``lit_gpu.commands.plot``: run curves and confusion matrices as fixed-size PNGs; ``lit-gpu plot``."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
import torch

from lit_gpu.cli import main
from lit_gpu.commands.plot import (
    CONFUSION_SIZE_PX,
    CURVES_SIZE_PX,
    MAX_POINTS,
    confusion_matrix,
    plot_confusion_matrix,
    plot_run,
    read_metrics,
)
from lit_gpu.errors import LitGpuError

# The layout Lightning's CSVLogger writes: step metrics and epoch metrics on separate rows.
CSV = """epoch,step,train/acc,train/loss_epoch,train/loss_step,train/lr,val/acc,val/loss
0,0,,,2.30,0.01,,
0,1,,,1.90,0.01,,
0,1,,,,,0.55,1.70
0,1,0.40,2.10,,,,
1,2,,,1.20,0.01,,
1,3,,,0.90,0.01,,
1,3,,,,,0.80,0.85
1,3,0.75,1.05,,,,
"""


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "lit_gpu" / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text(CSV)
    return run


def test_read_metrics_skips_empty_cells(run_dir):
    series = read_metrics(run_dir)
    assert series["train/loss_step"] == [(0, 2.3), (1, 1.9), (2, 1.2), (3, 0.9)]
    assert series["val/acc"] == [(1, 0.55), (3, 0.8)]
    assert "step" not in series and "epoch" not in series


def test_read_metrics_keeps_one_point_per_step_the_later_row_winning(run_dir):
    # a file two attempts of a restarted run appended to (as older lit_gpu versions left them)
    with open(run_dir / "metrics.csv", "a") as f:
        f.write("1,2,,,1.10,0.01,,\n1,3,,,0.85,0.01,,\n2,4,,,0.70,0.01,,\n")
    series = read_metrics(run_dir)
    assert series["train/loss_step"] == [(0, 2.3), (1, 1.9), (2, 1.1), (3, 0.85), (4, 0.7)]


def test_plot_run_writes_png_of_fixed_size(run_dir):
    out = plot_run(run_dir)
    assert out == run_dir / "curves.png"
    assert out.is_file() and out.stat().st_size > 5000
    assert png_size(out) == CURVES_SIZE_PX == (1200, 450)


def test_plot_run_without_accuracy_keeps_size(tmp_path):
    (tmp_path / "metrics.csv").write_text("epoch,step,train/loss_step,val/loss\n0,0,1.0,\n0,0,,0.9\n")
    out = plot_run(tmp_path / "metrics.csv", out=tmp_path / "sub" / "c.png")
    assert png_size(out) == CURVES_SIZE_PX


def test_plot_run_picks_newest_version_of_logger_dir(run_dir):
    out = plot_run(run_dir.parent, out=run_dir.parent / "newest.png")
    assert png_size(out) == CURVES_SIZE_PX


def test_plot_run_errors_are_one_line(tmp_path):
    with pytest.raises(LitGpuError, match="no metrics.csv"):
        plot_run(tmp_path)
    (tmp_path / "metrics.csv").write_text("epoch,step,train/lr\n0,0,0.1\n")
    with pytest.raises(LitGpuError, match="no loss or accuracy column"):
        plot_run(tmp_path)


def test_plot_command(run_dir, tmp_path, capsys):
    out = tmp_path / "curves.png"
    with pytest.raises(SystemExit) as exit_info:
        main(["plot", str(run_dir), "--out", str(out)])
    assert exit_info.value.code == 0
    assert png_size(out) == CURVES_SIZE_PX
    assert str(out) in capsys.readouterr().out


def test_plot_command_missing_run_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["plot", str(tmp_path / "nope")])
    assert exit_info.value.code == 2
    assert "no metrics.csv" in capsys.readouterr().err


class _Lookup(torch.nn.Module):
    """Predicts class ``x[0]`` (as one-hot logits)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(x[:, 0].long(), 3).float()


def test_confusion_matrix_counts_true_rows_predicted_columns(tmp_path):
    preds = torch.tensor([0, 1, 2, 2, 1, 0])
    targets = torch.tensor([0, 1, 2, 1, 1, 2])
    loader = [(preds[:3, None], targets[:3]), (preds[3:, None], targets[3:])]
    matrix = confusion_matrix(_Lookup(), loader, num_classes=3)
    expected = torch.tensor([[1, 0, 0], [0, 2, 1], [1, 0, 1]])
    assert torch.equal(matrix, expected)
    out = plot_confusion_matrix(matrix, tmp_path / "cm.png", class_names=["a", "b", "c"])
    assert png_size(out) == CONFUSION_SIZE_PX


def test_plot_of_a_root_skips_a_version_folder_planted_as_a_link(tmp_path):
    """Found attacking the doors: ``lit-gpu plot runs`` wrote curves.png into a linked version_9 elsewhere."""
    from lit_gpu.commands.plot import find_metrics

    mine = tmp_path / "runs" / "lit_gpu" / "version_0"
    mine.mkdir(parents=True)
    (mine / "metrics.csv").write_text(CSV)
    elsewhere = tmp_path / "plotvictim"
    elsewhere.mkdir()
    (elsewhere / "metrics.csv").write_text(CSV)  # newer than mine
    (tmp_path / "runs" / "lit_gpu" / "version_9").symlink_to(elsewhere)
    assert find_metrics(tmp_path / "runs") == mine / "metrics.csv"
    assert find_metrics(tmp_path / "runs" / "lit_gpu") == mine / "metrics.csv"


def _run_under_address_limit(margin: int, call) -> int:
    """Exit status of ``call()`` in a forked child whose address space may grow by at most ``margin``
    bytes (``RLIMIT_AS``): 0 when it returned, 3 on ``MemoryError``, 1 on anything else."""
    import resource

    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            with open("/proc/self/statm") as f:
                size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            resource.setrlimit(resource.RLIMIT_AS, (size + margin, size + margin))
            call()
            code = 0
        except MemoryError:
            code = 3
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.integration  # writes and reads half a million rows: not the inner loop (--fast)
def test_a_500_000_row_metrics_file_is_read_in_constant_memory(tmp_path):
    run = tmp_path / "lit_gpu" / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text("train/loss\n" + "1\n" * 500_000)  # 1 MiB; one point per row

    def read() -> None:
        assert len(read_metrics(run)["train/loss"]) <= MAX_POINTS + 1

    # all its points held would take ~80 MiB; the kept ones, well under the file's size
    assert _run_under_address_limit(24 << 20, read) == 0


def test_a_long_curve_keeps_evenly_spaced_points_and_its_last(tmp_path):
    run = tmp_path / "version_0"
    run.mkdir()
    rows = 3 * MAX_POINTS + 7
    (run / "metrics.csv").write_text("step,train/loss\n" + "".join(f"{i},{i / 2}\n" for i in range(rows)))
    points = read_metrics(run)["train/loss"]
    assert MAX_POINTS // 2 <= len(points) <= MAX_POINTS + 1
    assert points[0] == (0, 0) and points[-1] == (rows - 1, (rows - 1) / 2)  # first and newest kept
    steps = [x for x, _ in points[:-1]]
    stride = steps[1] - steps[0]
    assert stride > 1 and all(b - a == stride for a, b in zip(steps, steps[1:], strict=False))
    assert all(y == x / 2 for x, y in points)  # each kept point is the file's own value
    # a restarted run's rows at kept steps still win over the earlier attempt's
    with open(run / "metrics.csv", "a") as f:
        f.write(f"{steps[1]},-1\n")
    assert (steps[1], -1.0) in read_metrics(run)["train/loss"]
