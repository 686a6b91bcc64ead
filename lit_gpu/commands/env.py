"""``lit-gpu env``: one screen on what this machine can train with, plus advice; ``--json`` for bug reports.

GPU facts come from NVML (no CUDA context is created); torch facts from its build metadata.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from importlib import metadata
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from lit_gpu import devices, messages

DIST = "lit-gpu"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def dependency_versions(dist: str = DIST) -> dict[str, Any]:
    """Each dependency's installed version against the range ``dist``'s metadata declares.

    ``{"source": "lit-gpu 0.1.0", "dependencies": [{"name", "found", "supported", "ok", "requirement"}]}``;
    ``source`` is None (and the list empty) when ``dist`` is not installed (a source tree on PYTHONPATH).
    """
    try:
        requires, source = metadata.requires(dist) or [], f"{dist} {metadata.version(dist)}"
    except metadata.PackageNotFoundError:
        return {"source": None, "dependencies": []}
    rows = []
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an extra's dependency (dev tools), or another platform's
        found = _version(req.name)
        try:
            ok = found is not None and req.specifier.contains(Version(found), prereleases=True)
        except InvalidVersion:
            ok = False
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        supported = ",".join(sorted(map(str, req.specifier), key=lambda s: not s.startswith((">", "=", "~"))))
        rows.append(
            {
                "name": req.name,
                "found": found,
                "supported": supported,
                "ok": ok,
                "requirement": f"{req.name}{extras}{supported}",
            }
        )
    return {"source": source, "dependencies": rows}


def _nvcc_version() -> str | None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release ([\d.]+)", out)
    return match.group(1) if match else None


def _torch_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cpu_only_build": torch.version.cuda is None and getattr(torch.version, "hip", None) is None,
        "cudnn": None,
        "nccl": None,
    }
    try:
        info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:
        info["cudnn"] = None
    try:
        info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version()) if torch.version.cuda else None
    except Exception:
        info["nccl"] = None
    return info


def _driver_info() -> dict[str, Any]:
    info: dict[str, Any] = {"driver": None, "driver_cuda": None, "nvml_error": None}
    try:
        with devices.nvml_session() as nvml:
            info["driver"] = devices.nvml_text(nvml.nvmlSystemGetDriverVersion())
            cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
            info["driver_cuda"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
    except devices.NvmlUnavailable as err:
        info["nvml_error"] = str(err)
    return info


def _gpus(env: dict[str, str]) -> tuple[list[dict[str, Any]], str | None]:
    """All physical GPUs (with their CUDA ordinal, or None when hidden) and an NVML error, if any."""
    try:
        gpus = devices.query_gpus()
    except devices.NvmlUnavailable as err:
        return [], str(err)
    try:
        order = devices.parse_visible_devices(env.get("CUDA_VISIBLE_DEVICES"), gpus)
    except Exception:
        order = []
    rows = []
    for gpu in gpus:
        row = gpu.as_dict()
        row["cuda_ordinal"] = order.index(gpu.index) if gpu.index in order else None
        rows.append(row)
    return rows, None


def _build_label(version: str) -> str | None:
    """The local label of an installed version (``cpu`` of ``2.14.1+cpu``), None for a plain release."""
    return version.partition("+")[2] or None


def other_build(torch_version: str, vision_version: str) -> str | None:
    """Why torchvision is another build than torch, read from the installed versions (not by importing it,
    which costs seconds): PyTorch's index labels each build (``+cpu``, ``+cu130``); a plain release (PyPI's)
    is a CUDA build on Linux. A pair of different builds fails at import (``operator torchvision::nms does
    not exist``)."""
    torch_label, vision_label = _build_label(torch_version), _build_label(vision_version)
    labels = (torch_label, vision_label)
    if torch_label == vision_label or (None in labels and "cpu" not in labels):  # a CUDA build beside PyPI's
        return None
    named = {None: "a PyPI build", "cpu": "the CPU-only build"}
    return (
        f"torch is {named.get(torch_label, f'the {torch_label} build')}, "
        f"torchvision {named.get(vision_label, f'the {vision_label} build')}"
    )


def torchvision_build(torch_version: str) -> dict[str, Any]:
    """torchvision's version, the one torch's release pairs with, and whether it is torch's build.

    The pairing is torchvision's own compatibility table: torch 2.N ships with torchvision 0.(N + 15)
    (2.5 with 0.20, 2.14 with 0.29). Read from the installed distributions' metadata: nothing is imported.
    """
    found = _version("torchvision")
    torch_mm = _major_minor(torch_version)
    paired = f"0.{torch_mm[1] + 15}" if torch_mm and torch_mm[0] == 2 else None
    return {
        "version": found,
        "paired": paired,
        "pairs": found is None or paired is None or _major_minor(found) == _major_minor(paired),
        "other_build": other_build(torch_version, found) if found is not None else None,
    }


def _torchvision_advice(report: dict[str, Any]) -> str | None:
    """One line naming a torch/torchvision mismatch and its fix, or None."""
    vision, torch_info = report["torchvision"], report["torch"]
    if vision["version"] is None or (vision["pairs"] and vision["other_build"] is None):
        return None
    torch_version = torch_info["version"]
    major, minor = _major_minor(torch_version) or (0, 0)
    why = vision["other_build"] or f"torch {major}.{minor} pairs with torchvision {vision['paired']}"
    if torch_info["cpu_only_build"]:
        index = " --index-url https://download.pytorch.org/whl/cpu"
    elif torch_info["cuda_build"]:
        index = f" --index-url https://download.pytorch.org/whl/cu{torch_info['cuda_build'].replace('.', '')}"
    else:
        index = ""
    base = torch_version.split("+")[0]
    wanted = f"torchvision=={vision['paired']}.*" if vision["paired"] else "torchvision"
    return messages.TORCHVISION_MISMATCH.format(
        vision=vision["version"], torch=torch_version, why=why, base=base, wanted=wanted, index=index
    )


def _cpu_info() -> dict[str, Any]:
    return {
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "bf16": devices.cpu_has_bf16(),
    }


def _major_minor(version: str | None) -> tuple[int, int] | None:
    if not version:
        return None
    parts = re.findall(r"\d+", version)
    return (int(parts[0]), int(parts[1])) if len(parts) >= 2 else None


def advice(report: dict[str, Any]) -> list[str]:
    """Actionable lines derived from a :func:`collect` report."""
    lines: list[str] = []
    torch_info, gpus = report["torch"], report["gpus"]
    mismatch = _torchvision_advice(report) if "torchvision" in report else None
    if mismatch:
        lines.append(mismatch)
    for dep in report["versions"]["dependencies"]:
        if not dep["ok"]:
            lines.append(
                messages.DEPENDENCY_OUT_OF_RANGE.format(
                    name=dep["name"],
                    found=dep["found"] or "not installed",
                    supported=dep["supported"] or "any version",
                    requirement=dep["requirement"],
                )
            )
    visible = [g for g in gpus if g["cuda_ordinal"] is not None]
    cvd = report["cuda_visible_devices"]
    if gpus and torch_info["cpu_only_build"]:
        cuda = report["driver"]["driver_cuda"]
        tag = f"cu{cuda.replace('.', '')}" if cuda else "cuXYZ"
        lines.append(
            "GPU present but CPU-only torch: install the wheel for your CUDA version, e.g. "
            f"pip install torch --index-url https://download.pytorch.org/whl/{tag} "
            f"(driver supports CUDA {cuda})"
        )
    if not gpus:
        lines.append(
            f"no GPU: training runs on CPU (lit_gpu:trainer/cpu; precision auto = {devices.cpu_precision()})"
        )
    elif not visible:
        slurm = " (slurmd's value for a job without GPUs: ask for them, e.g. sbatch --gpus=1)"
        lines.append(
            f"CUDA_VISIBLE_DEVICES={cvd!r} hides all GPUs{slurm if cvd == 'NoDevFiles' else ''}: "
            "unset it or list GPU indices"
        )
    if cvd is not None and not devices.read_whole(cvd):
        lines.append(messages.CUDA_READS_PART.format(value=repr(cvd), listed=devices.visible_entries(cvd)))
    lines += report.get("launch_env_problems", [])
    build, driver = _major_minor(torch_info["cuda_build"]), _major_minor(report["driver"]["driver_cuda"])
    if gpus and build and driver and build[0] > driver[0]:
        lines.append(
            f"torch is built for CUDA {torch_info['cuda_build']} but the driver supports only "
            f"{report['driver']['driver_cuda']}: update the driver or install a wheel for CUDA {driver[0]}"
        )
    old = [g for g in visible if not g["bf16"]]
    if old:
        names = ", ".join(f"cuda:{g['cuda_ordinal']} {g['name']}" for g in old)
        lines.append(f"no bf16 on {names}: precision auto uses 16-mixed (fp16 + GradScaler)")
    if len(visible) > 1:
        lines.append(
            f"{len(visible)} GPUs: prefer lit_gpu:trainer/ddp over dp (faster, see docs/gpu_modes.md); "
            "devices 'free:N' picks the N with most free memory"
        )
    if visible and not lines:
        lines.append(f"ready: {len(visible)} GPU, precision auto = {devices.auto_precision('gpu')}")
    return lines


def collect(env: dict[str, str] | None = None) -> dict[str, Any]:
    """Everything ``lit-gpu env`` shows, as plain JSON-able data."""
    env = dict(os.environ) if env is None else env
    gpus, nvml_error = _gpus(env)
    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": (torch_info := _torch_info()),
        "torchvision": torchvision_build(torch_info["version"]),
        "driver": _driver_info(),
        "nvcc": _nvcc_version(),
        "gpus": gpus,
        "nvml_error": nvml_error,
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
        "launch_env_problems": list(devices.problems(env).values()),
        "cpu": _cpu_info(),
        "packages": {name: _version(name) for name in ("lightning", "torchvision", "torchmetrics")},
        "versions": dependency_versions(),
    }
    report["advice"] = advice(report)
    return report


#: an advice line is printed whole up to this length (a pip command with its index URL is ~300)
ADVICE_MAX_CHARS = 2000


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def render(report: dict[str, Any]) -> None:
    """Print the report on one screen with rich; every fact read from the machine is an escaped cell."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    def cell(value: object, style: str = "") -> Text:  # from the machine: one safe line, never Rich markup
        return Text(messages.shown(value), style=style)

    console = Console()
    t, d = report["torch"], report["driver"]
    build = "CPU-only build" if t["cpu_only_build"] else f"CUDA {t['cuda_build']}"
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold cyan")
    facts.add_column()
    facts.add_row("Python", cell(report["python"]))
    facts.add_row("torch", cell(f"{t['version']} ({build})"))
    facts.add_row("cuDNN / NCCL", cell(f"{t['cudnn'] or '-'} / {t['nccl'] or '-'}"))
    driver = f"{d['driver']} (CUDA {d['driver_cuda']})" if d["driver"] else "not found"
    facts.add_row("NVIDIA driver", cell(driver))
    if d["driver"]:  # without a driver, the compiler says nothing about training here (--json has it)
        facts.add_row("CUDA toolkit (nvcc)", cell(report["nvcc"] or "not found"))
    cvd = report["cuda_visible_devices"]
    facts.add_row("CUDA_VISIBLE_DEVICES", cell("(unset)" if cvd is None else repr(cvd)))
    cpu = report["cpu"]
    facts.add_row(
        "CPU", cell(f"{cpu['machine']}, {cpu['cores']} cores, bf16 {'yes' if cpu['bf16'] else 'no'}")
    )
    console.print(facts)
    versions = report["versions"]
    if versions["source"] is None:
        console.print(cell(f"dependencies: {DIST} is not installed (no metadata), supported ranges unknown"))
    else:
        table = Table(title=cell(f"dependencies (supported: {versions['source']})"), title_justify="left")
        for col in ("package", "found", "supported", ""):
            table.add_column(col)
        for dep in versions["dependencies"]:
            found, supported = cell(dep["found"] or "-"), cell(dep["supported"] or "any")
            ok = cell("ok") if dep["ok"] else cell("OUT OF RANGE", "bold red")
            table.add_row(cell(dep["name"]), found, supported, ok)
        console.print(table)
    if report["gpus"]:
        table = Table(title="GPUs", title_justify="left")
        for col in ("cuda", "nvml", "name", "total", "free", "capability", "bf16"):
            table.add_column(col)
        for g in report["gpus"]:
            ordinal = "hidden" if g["cuda_ordinal"] is None else f"cuda:{g['cuda_ordinal']}"
            table.add_row(
                cell(ordinal),
                cell(g["index"]),
                cell(g["name"]),
                _gib(g["total_bytes"]),
                _gib(g["free_bytes"]),
                cell(g["capability"] or "?"),
                "yes" if g["bf16"] else "no",
            )
        console.print(table)
    else:
        # one line each, wrapped by the terminal, never cut mid-phrase by rich at 80 columns
        console.print(cell(f"GPUs: none ({report['nvml_error'] or 'NVML reports 0'})"), soft_wrap=True)
    for line in report["advice"]:  # whole: a fix line is a command to paste (its parts already shown())
        advice = Text("> ", "bold yellow") + Text(messages.shown(line, limit=ADVICE_MAX_CHARS))
        console.print(advice, highlight=False, soft_wrap=True)


def main(argv: list[str]) -> int:
    """``lit-gpu env [--json]``."""
    parser = argparse.ArgumentParser(
        prog="lit-gpu env", allow_abbrev=False, description="Report Python/torch/CUDA/GPU facts."
    )
    parser.add_argument("--json", action="store_true", help="print JSON (attach it to bug reports)")
    parser.add_argument(
        "--pick-free",
        type=int,
        metavar="N",
        help="print only a CUDA_VISIBLE_DEVICES value (UUIDs) for the N GPUs with most free memory, for "
        "launchers that start ranks themselves: GPUS=$(lit-gpu env --pick-free 2) && "
        "CUDA_VISIBLE_DEVICES=$GPUS torchrun ...",
    )
    args = parser.parse_args(argv)
    if args.pick_free is not None:
        chosen = [gpu for _, gpu in devices.most_free_gpus(args.pick_free, f"--pick-free {args.pick_free}")]
        for rank, gpu in enumerate(chosen):  # stderr: stays out of $(...)
            line = messages.FREE_GPU_OF_RANK.format(rank=rank, index=gpu.index, name=gpu.name, uuid=gpu.uuid)
            print(messages.one_line(f"lit-gpu env: {line}, {_gib(gpu.free_bytes)} free"), file=sys.stderr)
        print(
            messages.one_line(",".join(gpu.uuid for gpu in chosen))
        )  # UUIDs: exact whatever CUDA_DEVICE_ORDER is
        return 0
    report = collect()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return 0
