"""The CSV logger's experiment takes TensorBoard ``SummaryWriter``'s calls (lit_gpu/run/loggers.py): scalars
as rows, the rest ignored with one line (the TensorBoard logger keeps them)."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch.utils.tensorboard import SummaryWriter

from lit_gpu.run import loggers as logger_media
from lit_gpu.run.loggers import MetricsWriter


@pytest.fixture
def writer(tmp_path):
    return MetricsWriter(str(tmp_path / "run"))


def test_scalars_are_rows_of_metrics_csv(writer, tmp_path):
    writer.add_scalar("lr", torch.tensor(0.5), 3)
    writer.add_scalars("loss", {"a": 1.0, "b": torch.tensor(2.0)}, 4)
    writer.flush()
    text = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert text[0] == "loss/a,loss/b,lr,step"
    assert text[1:] == [",,0.5,3", "1.0,2.0,,4"]
    assert writer.get_logdir() == str(tmp_path / "run")
    writer.close()


def test_every_other_summary_writer_method_is_ignored_with_one_line_once(writer, tmp_path, capsys):
    surface = {n for n, v in inspect.getmembers(SummaryWriter) if not n.startswith("_") and callable(v)}
    assert surface == logger_media.summary_writer_methods()  # the upstream's surface, read from the class
    answered = {n for n in surface if callable(getattr(writer, n))}
    assert answered == surface
    writer.add_histogram("w", torch.rand(10), 0)
    writer.add_histogram("w", torch.rand(10), 1)
    writer.add_graph(torch.nn.Linear(2, 2), torch.rand(1, 2))
    writer.add_image("samples", torch.rand(3, 8, 8), 3)  # TensorBoard's logger keeps it
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and err[0].startswith("lit-gpu: the CSV logger keeps no add_histogram (tag 'w')")
    assert "tensorboard --logdir" in err[0]
    assert not (tmp_path / "run" / "media").exists()
    with pytest.raises(AttributeError):
        writer.add_nothing  # noqa: B018 - not SummaryWriter's: a real AttributeError
