"""What a module sends to a logger's ``experiment`` (TensorBoard ``SummaryWriter`` calls), kept in the run.

Modules write media through ``logger.experiment`` of every logger in ``self.loggers`` (Lightning's GAN
example: ``add_image``). :class:`MediaWriter` gives the experiment of lit_gpu's CSV logger the whole
surface of ``torch.utils.tensorboard.SummaryWriter`` (the upstream's definition of it, read from the class),
so no such call crashes a run:

* ``add_image``, ``add_images``, ``add_figure``: PNG files in the run's ``media/`` folder
  (``<tag>-step<N>.png``; images encoded by TensorBoard's own ``summary.image``, same scaling and layouts);
* ``add_text``: appended to ``media/<tag>.jsonl``; ``add_scalar``, ``add_scalars``: rows of ``metrics.csv``;
  ``add_hparams``: ``hparams.yaml`` and a row; ``flush``, ``close``: save; ``get_logdir``: the folder;
* the rest (histograms, graphs, embeddings, audio, video, meshes, PR curves, custom layouts): ignored, with
  one line per method and run (the TensorBoard logger, on by default, keeps them).

Tags name files only after :func:`media_name` (no folder, no dot file, no Windows device name; a tag that
had to change keeps a short hash of itself, so two tags never share a file): a tag cannot write outside
``media/``. The folder is bounded (:data:`MEDIA_MAX_BYTES`, :data:`MEDIA_MAX_FILES`; past either, one line
and no more media) and an image over PIL's own bound of pixels (``PIL.Image.MAX_IMAGE_PIXELS``, its
decompression-bomb limit) is one line, not an encoding that takes the memory.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lit_gpu.messages import LOGGER_CALL_IGNORED, MEDIA_FULL, MEDIA_TOO_BIG, shown, tell

MEDIA_DIR = "media"
#: the bytes and files one run's media folder may hold (what is past them is dropped with one line)
MEDIA_MAX_BYTES = 1 << 30
MEDIA_MAX_FILES = 100_000
#: names Windows keeps for devices, with any extension (a run folder may be copied to Windows)
_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)), *(f"LPT{i}" for i in range(10))}
)


@functools.cache
def summary_writer_methods() -> frozenset[str]:
    """The public methods of TensorBoard's ``SummaryWriter`` (imported when first needed)."""
    from torch.utils.tensorboard import SummaryWriter

    names = (n for n in dir(SummaryWriter) if not n.startswith("_"))
    return frozenset(n for n in names if callable(getattr(SummaryWriter, n)))


def media_name(tag: object) -> str:
    """``tag`` as one plain file name: letters, digits, ``.``, ``_``, ``-`` (others ``_``), no leading dot."""
    text = str(tag)
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")[:100] or "media"
    if name != text or name.split(".")[0].upper() in _RESERVED:  # a changed tag: its own hash, no collision
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        name = f"{name[:80]}-{digest}"
    return "_" + name if name.split(".")[0].upper() in _RESERVED else name  # Windows: the part before a dot


class MediaWriter:
    """Mixin for an experiment object with a ``log_dir`` and ``log_metrics``/``log_hparams``/``save``:
    answers ``SummaryWriter``'s calls (see the module docstring)."""

    log_dir: str
    log_metrics: Callable[..., None]
    log_hparams: Callable[..., None]
    save: Callable[[], None]

    def _media_path(self, tag: object, step: int | None, suffix: str) -> Path:
        folder = Path(self.log_dir) / MEDIA_DIR
        folder.mkdir(parents=True, exist_ok=True)
        name = media_name(tag)
        if step is None:  # numbered in call order, as TensorBoard shows them (counted once per name)
            counts: dict[str, int] = vars(self).setdefault("media_counts", {})
            if name not in counts:
                pattern = re.compile(re.escape(name) + r"-step\d+" + re.escape(suffix))
                counts[name] = sum(1 for p in folder.iterdir() if pattern.fullmatch(p.name))
            step = counts[name]
            counts[name] += 1
        return folder / f"{name}-step{int(step):06d}{suffix}"

    def _room_for(self, size: int, new_file: bool) -> bool:
        """Whether the media folder takes ``size`` more bytes (and a new file); past a bound, one line."""
        used = vars(self).get("media_used")
        if used is None:  # a continued run's folder counts what it holds
            folder = Path(self.log_dir) / MEDIA_DIR
            files = [p for p in folder.iterdir() if p.is_file()] if folder.is_dir() else []
            used = self.media_used = [sum(p.stat().st_size for p in files), len(files), False]
        if used[0] + size <= MEDIA_MAX_BYTES and used[1] + new_file <= MEDIA_MAX_FILES:
            used[0] += size
            used[1] += new_file
            return True
        if not used[2]:
            used[2] = True
            limit = f"{MEDIA_MAX_BYTES >> 20} MiB or {MEDIA_MAX_FILES} files"
            tell(MEDIA_FULL.format(folder=shown(Path(self.log_dir) / MEDIA_DIR), limit=limit))
        return False

    def _write_media(self, tag: object, step: int | None, data: bytes) -> None:
        if self._room_for(len(data), new_file=True):
            self._media_path(tag, step, ".png").write_bytes(data)

    def add_image(self, tag: str, img_tensor: Any, global_step: int | None = None, walltime: Any = None,
                  dataformats: str = "CHW") -> None:  # fmt: skip
        """One image as ``media/<tag>-step<N>.png`` (TensorBoard's encoding)."""
        from PIL import Image
        from torch.utils.tensorboard.summary import image

        shape = tuple(getattr(img_tensor, "shape", ()))
        letters = dataformats.upper()
        pixels = math.prod(
            n for n, c in zip(shape, letters, strict=False) if c != "C" or len(shape) != len(letters)
        )
        if Image.MAX_IMAGE_PIXELS and pixels > Image.MAX_IMAGE_PIXELS:
            said: set[str] = vars(self).setdefault("ignored_methods", set())
            if "image over the bound" not in said:  # once per writer: a flood of them is one line
                said.add("image over the bound")
                tell(MEDIA_TOO_BIG.format(tag=shown(tag), pixels=pixels, bound=Image.MAX_IMAGE_PIXELS))
            return
        if self._room_for(0, new_file=False):  # a full folder: nothing encoded
            self._write_media(
                tag,
                global_step,
                image(tag, img_tensor, dataformats=dataformats).value[0].image.encoded_image_string,
            )

    def add_images(self, tag: str, img_tensor: Any, global_step: int | None = None, walltime: Any = None,
                   dataformats: str = "NCHW") -> None:  # fmt: skip
        """A batch of images as one grid PNG (TensorBoard's layout)."""
        self.add_image(tag, img_tensor, global_step, walltime, dataformats=dataformats)

    def add_figure(self, tag: str, figure: Any, global_step: int | None = None, close: bool = True,
                   walltime: Any = None) -> None:  # fmt: skip
        """A matplotlib figure (or a list of them) as PNG; closed afterwards unless ``close=False``."""
        figures = figure if isinstance(figure, list) else [figure]
        for index, fig in enumerate(figures):
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png")
            self._write_media(tag if len(figures) == 1 else f"{tag}_{index}", global_step, buffer.getvalue())
            if close:
                import matplotlib.pyplot as plt

                plt.close(fig)

    def add_text(self, tag: str, text_string: str, global_step: int | None = None, walltime: Any = None
                 ) -> None:  # fmt: skip
        """Appended to ``media/<tag>.jsonl`` as ``{"step": N, "text": ...}`` (control characters escaped)."""
        folder = Path(self.log_dir) / MEDIA_DIR
        folder.mkdir(parents=True, exist_ok=True)
        record = json.dumps({"step": global_step, "text": str(text_string)}) + "\n"
        path = folder / f"{media_name(tag)}.jsonl"
        if self._room_for(len(record), new_file=not path.exists()):
            with open(path, "a", encoding="utf-8") as f:
                f.write(record)

    def add_scalar(self, tag: str, scalar_value: Any, global_step: int | None = None, walltime: Any = None,
                   new_style: bool = False, double_precision: bool = False) -> None:  # fmt: skip
        """A row of ``metrics.csv``: ``tag`` at ``global_step``."""
        self.log_metrics({tag: _number(scalar_value)}, global_step)

    def add_scalars(self, main_tag: str, tag_scalar_dict: Mapping[str, Any], global_step: int | None = None,
                    walltime: Any = None) -> None:  # fmt: skip
        """A row of ``metrics.csv`` with ``main_tag/key`` columns."""
        self.log_metrics({f"{main_tag}/{k}": _number(v) for k, v in tag_scalar_dict.items()}, global_step)

    def add_hparams(self, hparam_dict: Mapping[str, Any], metric_dict: Mapping[str, Any], *args: Any,
                    **kwargs: Any) -> None:  # fmt: skip
        """``hparams.yaml``, and the metrics as a row."""
        self.log_hparams(dict(hparam_dict))
        if metric_dict:
            self.log_metrics({k: _number(v) for k, v in metric_dict.items()}, kwargs.get("global_step"))

    def flush(self) -> None:
        """Write the rows recorded so far."""
        self.save()

    def close(self) -> None:
        """Write the rows recorded so far (the writer stays usable, as Lightning's logger expects)."""
        self.save()

    def get_logdir(self) -> str:
        """The run folder."""
        return self.log_dir

    def __getattr__(self, name: str) -> Any:
        """The rest of ``SummaryWriter``'s methods: ignored, one line per method and writer (run)."""
        if name.startswith("_") or name not in summary_writer_methods():
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

        said: set[str] = vars(self).setdefault("ignored_methods", set())

        def ignored(*args: Any, **kwargs: Any) -> None:
            if name not in said:
                said.add(name)
                tag = args[0] if args and isinstance(args[0], str) else kwargs.get("tag", "")
                tell(LOGGER_CALL_IGNORED.format(method=name, tag=shown(tag), folder=self.log_dir))

        return ignored


def _number(value: Any) -> Any:
    """A tensor or NumPy scalar as a Python number (what ``metrics.csv`` holds)."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value
