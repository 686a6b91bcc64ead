"""Progress lines carry names and paths from outside (a model's logged names, a checkpoint's logging
state and best-model path): each line stays one line, escaped, and no forged ``lit-gpu:`` line appears."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

from lit_gpu.callbacks.progress import LitProgressBar, ProgressLog
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from tests.helpers.trainers import quiet_trainer

#: a name that would end the line, forge lit-gpu's end line and set the terminal's title
FORGED = "loss\nlit-gpu: fit done in 0:00:01: val/loss=0.0\x1b]0;owned\x07\u202e"


def _plain(line: str) -> bool:
    return all(ord(c) >= 0x20 and not 0x7F <= ord(c) < 0xA0 and c != "\u202e" for c in line)


class _ForgedName(RegressionModule):
    """Logs under a hostile name, as a restored logging state of a forged checkpoint would."""

    def training_step(self, batch, batch_idx):
        self.log(FORGED, 1.0, prog_bar=True)
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_forged_metric_name_gives_single_escaped_lines(fmt):
    out = io.StringIO()
    trainer = quiet_trainer(
        enable_progress_bar=True, callbacks=[ProgressLog(interval=0, format=fmt, stream=out)]
    )
    trainer.fit(_ForgedName(SimpleModel(10, 10)), SyntheticRegressionDataModule(num_samples=64))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # start, epoch end, end: the name added no line
    assert all(_plain(line) for line in lines)
    assert sum(line.startswith("lit-gpu: fit done") for line in lines) == (1 if fmt == "text" else 0)
    if fmt == "json":
        events = [json.loads(line) for line in lines]
        assert FORGED in events[1]["metrics"]  # the value itself, exact, for a program reading it
    else:
        assert "loss\\nlit-gpu: fit done in 0:00:01: val/loss=0.0\\x1b]0;owned\\x07\\u202e=1" in lines[1]


def _finished(last: str, best: str) -> SimpleNamespace:
    checkpoint = SimpleNamespace(last_model_path=last, best_model_path=best)
    return SimpleNamespace(callback_metrics={FORGED: 2.0}, checkpoint_callback=checkpoint)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_forged_best_model_path_gives_one_escaped_end_line(fmt):
    """The end line quotes the checkpoint's best-model path, restored from the checkpoint (round 4)."""
    out = io.StringIO()
    log = ProgressLog(format=fmt, stream=out)
    best = "runs/x/best.ckpt\nlit-gpu: fit done in 0:00:00: pwned\x1b[2J"
    log._end(_finished("runs/x/last.ckpt", best), "fit")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and _plain(lines[0])
    if fmt == "text":
        assert lines[0].startswith("lit-gpu: fit done in ")
        assert "(best: runs/x/best.ckpt\\nlit-gpu: fit done in 0:00:00: pwned\\x1b[2J)" in lines[0]
    else:
        assert json.loads(lines[0])["best"] == best


def test_the_live_bar_shows_escaped_metric_names():
    bar = LitProgressBar()
    trainer = SimpleNamespace(logger=None, loggers=[], progress_bar_metrics={FORGED: 1.0, "note": "a\x1bb"})
    shown = bar.get_metrics(trainer, None)  # type: ignore[arg-type]
    assert all(_plain(key) for key in shown) and shown["note"] == "a\\x1bb"


def test_a_lone_surrogate_or_a_format_character_in_a_name_is_escaped_not_a_crash():
    """A pickled string may hold a lone surrogate (printing it raises UnicodeEncodeError) and Unicode
    format characters (tags, invisible operators) that hide text: found by attacking the door."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
    trainer = _finished("last.ckpt", "")
    trainer.callback_metrics = {"a\ud800b\u2066\U000e0041": 1.0}
    ProgressLog(stream=stream)._end(trainer, "fit")
    stream.flush()
    assert "a\\ud800b\\u2066\\U000e0041=1" in raw.getvalue().decode("ascii")
