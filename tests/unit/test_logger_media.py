"""The CSV logger's experiment takes TensorBoard ``SummaryWriter``'s calls (lit_gpu/run/loggers.py)."""

from __future__ import annotations

import inspect
import json

import pytest
import torch
from torch.utils.tensorboard import SummaryWriter

from lit_gpu.run import loggers as logger_media
from lit_gpu.run.loggers import MetricsWriter


@pytest.fixture
def writer(tmp_path):
    return MetricsWriter(str(tmp_path / "run"))


def test_images_and_figures_are_pngs_in_the_runs_media_folder(writer, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    media = tmp_path / "run" / "media"
    writer.add_image("samples", torch.rand(3, 8, 8), 3)
    writer.add_image("hwc", (torch.rand(8, 6, 1) * 255).to(torch.uint8), 4, dataformats="HWC")
    writer.add_images("grid", torch.rand(4, 1, 8, 8), 5)
    writer.add_image("no_step", torch.rand(1, 4, 4))
    writer.add_image("no_step", torch.rand(1, 4, 4))
    figure = plt.figure()
    writer.add_figure("curve", figure, 6)
    assert not plt.fignum_exists(figure.number)  # closed, as SummaryWriter does
    names = sorted(p.name for p in media.iterdir())
    assert names == [
        "curve-step000006.png", "grid-step000005.png", "hwc-step000004.png",
        "no_step-step000000.png", "no_step-step000001.png", "samples-step000003.png",
    ]  # fmt: skip
    assert all((media / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for name in names)


def test_a_tag_names_a_file_inside_media_and_nowhere_else(writer, tmp_path):
    for tag in ("../../escape", "/etc/passwd", "..", "a/b\\c\n", ""):
        writer.add_image(tag, torch.rand(1, 2, 2), 0)
        writer.add_text(tag, "x", 0)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and all(p.parent == tmp_path / "run" / "media" for p in written), written
    assert all(not p.name.startswith(".") for p in written)


def test_text_scalars_and_hparams_are_kept(writer, tmp_path):
    writer.add_text("note", "first", 1)
    writer.add_text("note", "second", 2)
    writer.add_text("note", "\x1b[31mred\nline", None)
    lines = (tmp_path / "run" / "media" / "note.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"step": 1, "text": "first"},
        {"step": 2, "text": "second"},
        {"step": None, "text": "\x1b[31mred\nline"},
    ]
    assert "\x1b" not in lines[2]  # escaped in the file
    writer.add_scalar("lr", torch.tensor(0.5), 3)
    writer.add_scalars("loss", {"a": 1.0, "b": torch.tensor(2.0)}, 4)
    writer.add_hparams({"lr": 0.1}, {"hp/metric": 0.25})
    writer.flush()
    text = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert text[0] == "hp/metric,loss/a,loss/b,lr,step"
    assert text[1:] == [",,,0.5,3", ",1.0,2.0,,4", "0.25,,,,2"]
    assert "lr: 0.1" in (tmp_path / "run" / "hparams.yaml").read_text()
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
    writer.add_video("v", torch.rand(1, 2, 3, 4, 4))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and err[0].startswith("lit-gpu: the CSV logger keeps no add_histogram (tag 'w')")
    assert "tensorboard --logdir" in err[0]
    assert not (tmp_path / "run" / "media").exists()
    with pytest.raises(AttributeError):
        writer.add_nothing  # noqa: B018 - not SummaryWriter's: a real AttributeError


def test_tags_that_change_as_names_never_share_a_file_nor_name_a_windows_device(writer, tmp_path):
    tags = ["a/b", "a_b", "a b", "损失", "精度", "CON", "nul.txt", "x" * 5000, "x" * 5001, "a\0b"]
    for tag in tags:
        writer.add_image(tag, torch.rand(1, 2, 2), 0)
        writer.add_text(tag, "t", 0)
    media = tmp_path / "run" / "media"
    names = [p.name for p in media.iterdir()]
    assert len(names) == 2 * len(tags)  # each tag its own files
    assert all(p.parent == media for p in tmp_path.rglob("*") if p.is_file())
    assert all(len(name) < 128 and name.split(".")[0].upper() not in {"CON", "NUL"} for name in names)
    assert "a_b-step000000.png" in names  # a tag that is a plain name keeps it


def test_images_numbered_in_call_order_per_tag_also_with_a_prefix_tag(writer, tmp_path):
    for tag in ("a", "a/", "a", "a/", "a"):
        writer.add_image(tag, torch.rand(1, 2, 2))
    names = sorted(p.name for p in (tmp_path / "run" / "media").iterdir())
    assert [n for n in names if n.startswith("a-step")] == [f"a-step00000{i}.png" for i in range(3)]
    assert len(names) == 5


def test_a_flood_of_media_stops_at_the_bound_with_one_line(writer, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(logger_media, "MEDIA_MAX_FILES", 5)
    monkeypatch.setattr(logger_media, "MEDIA_MAX_BYTES", 4000)
    for step in range(50):
        writer.add_image("x", torch.rand(1, 4, 4), step)
        writer.add_text("log", "y" * 100, step)
    media = tmp_path / "run" / "media"
    assert sum(p.stat().st_size for p in media.iterdir()) <= 4000 and len(list(media.iterdir())) <= 5
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("lit-gpu:")]
    assert len(err) == 1 and "keeps no more images, figures or text" in err[0]


def test_an_image_over_pils_pixel_bound_is_one_line_not_an_encoding(writer, tmp_path, capsys, monkeypatch):
    from PIL import Image

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    big = torch.zeros(3, 40, 40).expand(3, 40, 40)
    for _ in range(3):
        writer.add_image("big", big, 0)
    writer.add_images("grid", torch.zeros(2, 1, 20, 20), 0)  # 800 pixels: under
    writer.add_image("hwc", torch.zeros(40, 20, 3), 0, dataformats="HWC")  # 800: under
    names = sorted(p.name for p in (tmp_path / "run" / "media").iterdir())
    assert names == ["grid-step000000.png", "hwc-step000000.png"]
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("lit-gpu:")]
    assert len(err) == 1 and "'big': 1600 pixels, over PIL's bound of 1000" in err[0]
