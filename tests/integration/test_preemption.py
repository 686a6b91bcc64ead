"""Preemption and faults lose nothing.

A signal to the whole process group (Slurm, Kubernetes, Ctrl+C) mid-epoch, DataLoader workers included:
one line, exit 128 + signal, a loadable ``last.ckpt`` at the step reached, no temp files, and a resume.
A full disk: one line, the previous checkpoint intact, no temp file.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lit_gpu.cli import main
from tests.helpers.forked_cli import ForkedRun, popen, run_cli
from tests.helpers.paths import CONFIGS, REPO_ROOT
from tests.helpers.robustness import HOLD_ENV

RUN = Path("runs") / "lit_gpu"
LIMIT = 12  # training batches of the (only) epoch


def _mnist_argv(data_dir: Path) -> list[str]:
    """configs/mnist.yaml (num_workers: 2, dropout) made small: fake MNIST, tiny net, 12 steps."""
    return [
        "fit",
        "--config", str(CONFIGS / "mnist.yaml"),
        "--data.data_dir", str(data_dir), "--data.download", "false",
        "--data.val_size", "100", "--data.batch_size", "16",
        "--model.init_args.net.init_args.channels", "4", "--model.init_args.net.init_args.hidden", "16",
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", str(LIMIT),
        "--trainer.limit_val_batches", "2", "--trainer.accelerator", "cpu",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.deterministic", "true",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def reference(tmp_path_factory, fake_mnist_dir) -> dict:
    """last.ckpt of the same run, uninterrupted."""
    root = tmp_path_factory.mktemp("reference")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = run_cli(_mnist_argv(fake_mnist_dir), root, env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(root / RUN / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)


def _assert_bit_identical(got: dict, want: dict) -> None:
    assert got["global_step"] == want["global_step"]
    for key, value in want["state_dict"].items():
        assert torch.equal(got["state_dict"][key], value), key
    for index, state in want["optimizer_states"][0]["state"].items():
        for name, value in state.items():
            got_value = got["optimizer_states"][0]["state"][index][name]
            assert torch.equal(torch.as_tensor(got_value), torch.as_tensor(value)), (index, name)


def _held(env: dict[str, str], step: int) -> dict[str, str]:
    """``env`` with ``SlowSteps`` told to wait at ``step`` until the job's signal has arrived."""
    return {**env, HOLD_ENV: str(step)}


def _start_group_job(argv: list[str], tmp_path: Path, env: dict[str, str], step: int = 3) -> ForkedRun:
    """Start ``lit_gpu ARGV`` in its own process group (like a batch job); return once it reached ``step``.

    ``tests.helpers.robustness.SlowSteps`` in ``argv`` writes the step reached to ``progress.txt`` and waits
    there for the test's signal (:data:`~tests.helpers.robustness.HOLD_ENV`): the run cannot end first.
    """
    proc = popen(argv, tmp_path, _held(env, step), stdout=subprocess.DEVNULL)  # forked, own process group
    progress = tmp_path / "progress.txt"
    deadline = time.monotonic() + 240  # a loaded machine; the run waits there anyway
    while time.monotonic() < deadline and proc.poll() is None:
        if progress.exists() and int(progress.read_text() or 0) >= step:
            break
        time.sleep(0.05)
    return proc


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.parametrize(
    "sig, code",
    # SIGTERM to the group is also the plain chain's sample below: the full tier runs it here too
    [pytest.param(signal.SIGTERM, 143, marks=pytest.mark.full), (signal.SIGINT, 130)],
    ids=["SIGTERM", "SIGINT"],
)
def test_signal_to_process_group_saves_last_ckpt_and_resumes(
    sig, code, tmp_path, cli_env, fake_mnist_dir, reference
):
    argv = _mnist_argv(fake_mnist_dir)
    slow = ["--trainer.callbacks+=tests.helpers.robustness.SlowSteps", "--trainer.callbacks.seconds", "0"]
    proc = _start_group_job(argv + slow, tmp_path, cli_env)
    workers = _children(proc.pid)
    assert proc.poll() is None and len(workers) >= 2, "training did not reach step 3 with its workers"
    os.killpg(proc.pid, sig)  # main process and DataLoader workers alike
    _, err = proc.communicate(timeout=60)
    err = err.decode()
    assert proc.returncode == code, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("lit-gpu:")]
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"lit-gpu: stopped by {sig.name} at step "), lines
    assert lines[0].endswith(f"--ckpt_path {RUN / 'version_0' / 'checkpoints' / 'last.ckpt'}")  # this run's
    assert "DataLoader worker" not in err and "Traceback" not in err and "Received SIGTERM" not in err

    ckpt_dir = tmp_path / RUN / "version_0" / "checkpoints"
    assert [p.name for p in ckpt_dir.iterdir()] == ["last.ckpt"]  # no temp files, no other saves
    assert not list(tmp_path.rglob("*.tmp"))
    ckpt = torch.load(ckpt_dir / "last.ckpt", weights_only=True)
    stopped_at = ckpt["global_step"]
    # the run waited at step 3 for it; the line names metrics.csv's step (global step - 1)
    assert stopped_at == 3 and f"at step {stopped_at - 1} " in lines[0]
    progress_state = ckpt["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]
    assert progress_state["completed"] == progress_state["ready"] == stopped_at  # a step boundary

    # a run that was preempted before its first save must not hide where the resume comes from
    (tmp_path / RUN / "version_1").mkdir()
    resumed = run_cli(argv + ["--ckpt_path", "last"], tmp_path, cli_env, timeout=120)
    out = resumed.stderr
    assert resumed.returncode == 0, out[-3000:]
    last = RUN / "version_0" / "checkpoints" / "last.ckpt"
    assert f"lit-gpu: resuming from {last} (step {stopped_at - 1}, " in out
    assert "passed over newer version_1: no config.yaml" in out
    assert f"lit-gpu: continuing the run in {RUN / 'version_0'} from step {stopped_at};" in out
    assert sorted(p.name for p in ckpt_dir.glob("last*")) == ["last.ckpt"]
    final = torch.load(ckpt_dir / "last.ckpt", weights_only=True)  # the run went on in its own folder
    assert final["global_step"] == LIMIT
    _assert_bit_identical(final, reference)  # dropout, 2 workers: the resume continues exactly


def test_disk_full_during_fit_is_one_line_and_keeps_the_previous_checkpoint(
    tiny_tmpfs, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    argv = ["fit", "--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]
    argv += [
        "--checkpoint.dirpath",
        str(tiny_tmpfs),
        "--checkpoint.monitor",
        "null",
        "--checkpoint.save_top_k",
        "0",
    ]
    main([*argv, "--trainer.max_epochs", "1"])  # a good run: last.ckpt on the small disk
    last = tiny_tmpfs / "last.ckpt"
    good = last.read_bytes()
    filler = tiny_tmpfs / "filler"
    filler.write_bytes(b"\0" * (shutil.disk_usage(tiny_tmpfs).free - 4096))  # leaves one page
    capsys.readouterr()

    with pytest.raises(SystemExit) as info:
        main([*argv, "--trainer.max_epochs", "2", "--ckpt_path", str(last)])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("lit-gpu: error:")]
    assert info.value.code == 2 and len(lines) == 1, err[-3000:]
    assert re.match(
        rf"lit-gpu: error: disk full: could not save checkpoint {tiny_tmpfs}/\S+\.ckpt \(about ", lines[0]
    )
    assert "Traceback" not in err and "inline_container" not in err
    assert last.read_bytes() == good and torch.load(last, weights_only=True)["epoch"] == 0
    assert not [p.name for p in tiny_tmpfs.iterdir() if p.name.endswith(".tmp")]  # no temp file


def test_sigterm_to_a_ddp_group_stops_every_rank_at_the_same_step(tmp_path, cli_env):
    """2 processes (gloo) with a worker each: all ranks stop together, rank 0 saves, nobody hangs."""
    argv = [
        "fit",
        "--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml"),
        "--trainer.devices", "2", "--trainer.strategy", "ddp", "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "30", "--data.num_workers", "1",
        "--trainer.callbacks+=tests.helpers.robustness.SlowSteps", "--trainer.callbacks.seconds", "0",
    ]  # fmt: skip
    proc = _start_group_job(argv, tmp_path, cli_env)
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("a rank hung after SIGTERM")
    err = err.decode()
    assert proc.returncode == 143, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("lit-gpu:")]
    assert len(lines) == 1 and lines[0].startswith("lit-gpu: stopped by SIGTERM at step "), err[-3000:]
    assert "Traceback" not in err
    ckpt = torch.load(tmp_path / RUN / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    # held at step 3 until the signal came: stopped there, or at the next batch end where the ranks agree
    assert ckpt["global_step"] in (3, 4) and f"at step {ckpt['global_step'] - 1} " in lines[0]
    assert not list(tmp_path.rglob("*.tmp"))


def test_next_fit_removes_the_temp_file_of_a_save_killed_in_an_earlier_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    folder = tmp_path / RUN / "version_0" / "checkpoints"
    folder.mkdir(parents=True)
    code = (
        "import os, signal, sys; from lit_gpu.checkpoints.io import atomic_write\n"
        "def write(f):\n    f.write(b'x' * 4096); f.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
        "atomic_write(sys.argv[1], write)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(folder / "last.ckpt")], check=False)  # SIGKILL mid-save
    (litter,) = folder.glob(".last.ckpt.*.tmp")
    hours_ago = time.time() - 2 * 3600  # a temp is stale once unwritten for an hour (a live save writes on)
    os.utime(litter, (hours_ago, hours_ago))
    main(["fit", "--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")])
    err = capsys.readouterr().err
    assert (
        f"lit-gpu: removed {RUN / 'version_0' / 'checkpoints' / litter.name} (4.1 KB), left by a killed save"
        in err
    )
    assert not litter.exists() and (tmp_path / RUN / "version_1" / "checkpoints" / "last.ckpt").is_file()


def _descendants(pid: int) -> list[int]:
    found = []
    for child in _children(pid):
        found += [child, *_descendants(child)]
    return found


def _torchrun_agents(argv: list[str], cwd: Path, env: dict[str, str], port: int) -> list[subprocess.Popen]:
    """Two torchrun agents on loopback (two "nodes" of one process each), each in its own session."""
    agents = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1"]
        cmd += ["--node_rank", str(node), "--master_addr", "127.0.0.1", "--master_port", str(port)]
        log = open(cwd / f"node{node}.log", "wb")  # noqa: SIM115 - closed when the test reads it
        agents.append(
            subprocess.Popen(
                [*cmd, "-m", "lit_gpu", *argv],
                cwd=cwd,
                env=env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        )
        log.close()
    return agents


# ---- the signal at many points of a step, at full speed ------------------------------------------------
# A stop's signal reaches the main process and its DataLoader workers in any order; a worker that dies of it
# must be part of the stop (save at the last finished step, one line, 130/143), never a crash. Each case
# below is a chain of starts of one run (``--ckpt_path last``), each stopped after a different number of
# steps and a different offset within a step (before, during, after a fetch), with nothing slowed; the
# last start runs to the end and must equal the uninterrupted run bit for bit. Each start waits at the step
# after its target until its signal came (``HOLD_ENV``): a signal lands anywhere up to there, never after the
# run's end (each start moves the run on by at most 5 steps: 12 starts stay far below the 64 steps).
FULL_SPEED = ["--trainer.callbacks+=tests.helpers.robustness.SlowSteps", "--trainer.callbacks.seconds", "0"]
OFFSETS = (0.0, 0.002, 0.005, 0.009, 0.014, 0.02, 0.03, 0.045, 0.001, 0.07, 0.0, 0.012)  # s after a step
EPOCHS = 4  # 16 steps each: stops land in every phase (steps, epoch ends, validation)


def _progress(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0


def _wait_step(progress: Path, step: int, alive, timeout: float = 120) -> int:
    """Poll ``progress`` until it reaches ``step`` (or the run ended); the step seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive() and _progress(progress) < step:
        time.sleep(0.002)
    return _progress(progress)


def _assert_one_stop_line(text: str, sig: signal.Signals) -> int:
    lines = [ln for ln in text.splitlines() if ln.startswith("lit-gpu:") and "stopped" in ln]
    assert len(lines) == 1, text[-3000:]
    assert lines[0].startswith(f"lit-gpu: stopped by {sig.name} "), lines
    for bad in ("DataLoader worker", "lit-gpu: error", "shared memory", "killed by signal"):
        assert bad not in text, text[-3000:]
    match = re.search(r"at step (\d+) ", lines[0])  # metrics.csv's step of the last step: global step - 1
    return int(match.group(1)) + 1 if match else 0


def _check_stop(ckpt_dir: Path, reached: int, said: int, hold: int) -> None:
    """``last.ckpt`` is at the step the line names, at or after the step reached when the signal was sent,
    at most one past the step the run waited at for it (ranks agree at a batch end), at a step boundary,
    and loadable; no temp files."""
    assert not list(ckpt_dir.parent.parent.rglob("*.tmp"))
    if said == 0:  # stopped before its first step (e.g. in the sanity check): the previous save stays
        return
    ckpt = torch.load(ckpt_dir / "last.ckpt", weights_only=True)
    assert hold + 1 >= ckpt["global_step"] == said >= reached, (ckpt["global_step"], said, reached, hold)
    total = ckpt["loops"]["fit_loop"]["epoch_loop.batch_progress"]["total"]
    assert total["completed"] == total["ready"], total  # a step boundary


def _processes_in(folder: Path) -> list[int]:
    """Processes whose working folder is inside ``folder`` (a run and its DataLoader workers), after a
    second's grace for the exiting ones."""
    deadline = time.monotonic() + 1.0
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and Path(os.readlink(entry / "cwd")).is_relative_to(folder):
                    found.append(int(entry.name))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _mnist_chain_argv(data_dir: Path) -> list[str]:
    argv = _mnist_argv(data_dir) + ["--trainer.max_epochs", str(EPOCHS)]
    argv += ["--trainer.limit_train_batches", "16"]
    return argv + ["--checkpoint.every_n_train_steps", "5", "--checkpoint.save_top_k", "0"]


#: the default tier's sample of the chains: each kind of stop once (SIGTERM after a step, SIGTERM while
#: the workers start; SIGINT: test_signal_to_process_group_saves_last_ckpt_and_resumes); torchrun's (one
#: stop, node 0's process group signalled and node 1's agent alone) and the full chains (12 and 10 starts,
#: ~5 min on 2 idle cores) are marked ``full``, run by ``.ci/run``
PLAIN_SAMPLE = OFFSETS[:2]
TORCHRUN_SAMPLE = OFFSETS[:1]


@pytest.mark.integration
def test_signals_at_a_sample_of_points_of_a_step_stop_a_plain_run_and_resume_exactly(
    tmp_path, cli_env, fake_mnist_dir
):
    """The plain chain below, 2 starts: each kind of SIGTERM once."""
    _plain_chain(tmp_path, cli_env, fake_mnist_dir, PLAIN_SAMPLE)


@pytest.mark.full
def test_signals_at_many_points_of_a_step_stop_a_plain_run_and_resume_exactly(
    tmp_path, cli_env, fake_mnist_dir
):
    """A plain process (no launcher) with 2 DataLoader workers, its process group signalled 12 times at
    full speed (a quarter of them while the workers start): each start stops with one line and 143/130
    and saves at the step reached."""
    _plain_chain(tmp_path, cli_env, fake_mnist_dir, OFFSETS)


def _plain_chain(tmp_path: Path, cli_env: dict[str, str], fake_mnist_dir: Path, offsets) -> None:
    argv = _mnist_chain_argv(fake_mnist_dir)
    reference = tmp_path / "reference"
    reference.mkdir()
    done = run_cli(argv, reference, cli_env, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    want = torch.load(reference / RUN / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    total = want["global_step"]

    ckpt_dir = tmp_path / RUN / "version_0" / "checkpoints"
    progress = tmp_path / "progress.txt"
    reached = 0
    for attempt, offset in enumerate(offsets):
        sig = signal.SIGINT if attempt % 4 == 3 else signal.SIGTERM
        resume = ["--ckpt_path", "last"] if attempt else []
        progress.write_text("0")
        target = min(reached + 1 + attempt % 3, total - 2)
        hold = reached + 2 if attempt % 4 == 1 else target + 1
        proc = popen(argv + FULL_SPEED + resume, tmp_path, _held(cli_env, hold))
        if attempt % 4 == 1:  # while the DataLoader workers start (the sanity check's, then the epoch's)
            deadline = time.monotonic() + 120
            while proc.poll() is None and not _children(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.001)
            reached = 0
        else:
            reached = _wait_step(progress, target, lambda p=proc: p.poll() is None)
        time.sleep(offset)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)  # main process and workers alike
        _, err = proc.communicate(timeout=90)
        err = err.decode()
        assert proc.returncode == 128 + sig, (attempt, err[-3000:])
        said = _assert_one_stop_line(err, sig)
        if said or attempt:  # a first start stopped before its first step has nothing to check
            _check_stop(ckpt_dir, reached, said, hold)
        assert not _processes_in(tmp_path), "a DataLoader worker outlived its run"
        reached = max(reached, said)
    final = run_cli(argv + ["--ckpt_path", "last"], tmp_path, cli_env, timeout=180)
    assert final.returncode == 0, final.stderr[-3000:]
    _assert_bit_identical(torch.load(ckpt_dir / "last.ckpt", weights_only=True), want)


@pytest.mark.full  # torchrun's own start is sampled by tests/integration/test_ddp.py
def test_sigterm_to_two_torchrun_agents_once_both_ways_stops_and_resumes_exactly(
    tmp_path, cli_env, fake_mnist_dir
):
    """The torchrun chain below, one stop: node 0's process group signalled (as a scheduler does), node 1's
    agent alone (it forwards to its training process's group)."""
    _torchrun_chain(
        tmp_path, cli_env, fake_mnist_dir, TORCHRUN_SAMPLE, to_group=lambda attempt, node: node == 0
    )


@pytest.mark.full
@pytest.mark.timeout(1800)  # 12 torchrun starts: ~3 min on an idle 2-core machine, far more under load
def test_sigterm_to_two_torchrun_agents_at_many_points_stops_and_resumes_exactly(
    tmp_path, cli_env, fake_mnist_dir
):
    """Two torchrun agents (2 "nodes" of one process, 2 DataLoader workers each), at full speed, SIGTERMed
    10 times: to each agent's process group (as Slurm/Kubernetes do) or to the agents alone (torchrun
    forwards it to its training process's group). Every stop: one line, ``last.ckpt`` at the step reached
    (after the periodic one), no worker crash; the last start finishes equal to an uninterrupted run."""
    _torchrun_chain(
        tmp_path, cli_env, fake_mnist_dir, OFFSETS[:10], to_group=lambda attempt, node: attempt % 2 == 0
    )


def _torchrun_chain(tmp_path: Path, cli_env: dict[str, str], fake_mnist_dir: Path, offsets, to_group) -> None:
    """Start the two agents once per offset, SIGTERM them there (``to_group(attempt, node)``: the node's
    process group, else its agent alone), check each stop, then run to the end and compare."""
    from tests.helpers.ports import free_port

    two_nodes = ["--trainer.devices", "1", "--trainer.num_nodes", "2", "--trainer.strategy", "ddp"]
    argv = _mnist_chain_argv(fake_mnist_dir) + two_nodes
    env = {k: v for k, v in cli_env.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    # the uninterrupted reference: the same 2 ranks as one node with 2 devices (Lightning's launcher, forked)
    reference = tmp_path / "reference"
    reference.mkdir()
    one_node = [*_mnist_chain_argv(fake_mnist_dir), "--trainer.devices", "2", "--trainer.strategy", "ddp"]
    done = run_cli(one_node, reference, cli_env, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    want = torch.load(reference / RUN / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    total = want["global_step"]

    ckpt_dir = tmp_path / RUN / "version_0" / "checkpoints"
    progress = tmp_path / "progress.txt"
    reached = 0
    for attempt, offset in enumerate(offsets):
        resume = ["--ckpt_path", "last"] if attempt else []
        progress.write_text("0")
        target = min(reached + 1 + attempt % 3, total - 2)
        hold = target + 1
        agents = _torchrun_agents(argv + FULL_SPEED + resume, tmp_path, _held(env, hold), free_port())
        try:
            reached = _wait_step(progress, target, lambda a=agents: all(x.poll() is None for x in a))
            time.sleep(offset)
            for node, agent in enumerate(agents):
                if to_group(attempt, node):
                    os.killpg(agent.pid, signal.SIGTERM)  # each node's process group, as a scheduler does
                else:
                    agent.send_signal(signal.SIGTERM)  # the agent alone: it forwards to its training process
            codes = [agent.wait(timeout=90) for agent in agents]
        except BaseException:  # a hang, or the test's timeout: leave no job behind
            for pid in [a.pid for a in agents] + [c for a in agents for c in _children(a.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            raise
        logs = "\n".join((tmp_path / f"node{n}.log").read_text() for n in (0, 1))
        assert all(code != 0 for code in codes), (attempt, codes, logs[-3000:])  # the agents' SignalException
        said = _assert_one_stop_line(logs, signal.SIGTERM)
        _check_stop(ckpt_dir, reached, said, hold)
        assert not _processes_in(tmp_path), "a training process or DataLoader worker outlived its agent"
        reached = max(reached, said)
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["last.ckpt"]  # no temp files, no other saves

    for agent in _torchrun_agents(argv + ["--ckpt_path", "last"], tmp_path, env, free_port()):
        assert agent.wait(timeout=180) == 0, (tmp_path / "node0.log").read_text()[-3000:]
    assert sorted(p.name for p in (tmp_path / RUN).iterdir()) == ["version_0"]  # one folder for the run
    _assert_bit_identical(torch.load(ckpt_dir / "last.ckpt", weights_only=True), want)
