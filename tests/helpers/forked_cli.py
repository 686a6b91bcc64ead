"""Run ``python -m lit_gpu ARGS`` as a fork of a process that has already imported Lightning.

Importing torch and Lightning costs about 4 s of CPU a process on the 2-core CI machine, and the
integration tests start well over a hundred CLI processes. Where a test needs a *process* (its own
pid and exit status, signals, a fresh Trainer, files left by a SIGKILL) but not a fresh *import*,
:func:`run_cli` forks one server per test worker that imported ``lit_gpu.cli`` once; the child runs
``lit_gpu`` exactly as ``python -m lit_gpu`` would (``runpy``, so Lightning's DDP launcher re-executes
``python -m lit_gpu ...``), in the given working folder and environment, with stdout/stderr in files.

The ranks Lightning's DDP launcher starts (``subprocess.Popen([python, -m, lit_gpu, ...])`` with
``LOCAL_RANK=N``) are forked from the same server too: the forked run's launcher hands the command, its
environment and its stdout/stderr descriptors to the server, and the rank joins the run's process group,
as a ``Popen`` child does. Each DDP run so saves one more import per extra rank.

Tests whose subject is start-up itself keep plain ``subprocess`` runs: entry points, import side
effects, ``-P``/working-folder safety, process groups signalled from outside, torchrun, and Lightning's
launcher re-executing the console script (``tests/integration/test_ddp.py``).

Protocol (one Unix socket, one connection per run): the client sends one JSON line
``{argv, cwd, env, stdout, stderr}`` (for a rank ``{argv, cwd, env, "inherit": pgid}``, with the run's
descriptors 0-2 passed along by ``SCM_RIGHTS``); a manager fork of the server forks the child, answers
``{"pid": N}``, waits for it and answers ``{"returncode": R}`` (``-signal`` when killed, as
:mod:`subprocess` reports it).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_SERVER: dict[str, Any] = {}
_SERVE = "import sys; from tests.helpers.forked_cli import serve; serve(sys.argv[1])"


# ---- the server (runs in its own process) ---------------------------------------------------------
def _child(request: dict, fds: list[int]) -> None:
    """The forked run: ``python -m lit_gpu ARGV`` in ``cwd`` with ``env``; never returns."""
    import runpy

    code: int = 1
    try:
        # its own process group, as a test's killpg(pid) expects; a rank joins its run's group
        os.setpgid(0, request.get("inherit") or 0)
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if fds:  # a rank: the run's own stdin/stdout/stderr, as Popen children inherit them
            for fd, inherited in enumerate(fds):
                os.dup2(inherited, fd)
                os.close(inherited)
        else:
            _open_outputs(request)
        # sys.path as `python -m` builds it: the working folder, PYTHONPATH, then the site paths
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [os.getcwd(), *extra, *_SERVER["site_path"]]
        sys.argv = ["lit_gpu", *request["argv"]]
        _fork_lightning_ranks()
        try:
            runpy.run_module("lit_gpu", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            if stop.code is None:
                code = 0
            elif isinstance(stop.code, int):
                code = stop.code
            else:
                print(stop.code, file=sys.stderr)
                code = 1
        except BaseException:  # a real interpreter prints the traceback and exits 1
            import traceback

            traceback.print_exc()
            code = 1
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        with contextlib.suppress(BaseException):
            import threading

            threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads, as at exit
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _open_outputs(request: dict) -> None:
    """stdin from ``/dev/null``; stdout and stderr to the files the request names."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, target in ((1, request["stdout"]), (2, request["stderr"])):
        if fd == 2 and target == request["stdout"]:
            os.dup2(1, 2)  # one open file, as stderr=STDOUT shares it
            continue
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if target["append"] else os.O_TRUNC)
        out = os.open(target["path"], flags, 0o644)
        os.dup2(out, fd)
        os.close(out)


class _LauncherSubprocess:
    """``subprocess`` as Lightning's DDP launcher sees it in a forked run: ranks of ``lit_gpu`` are forked."""

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    @staticmethod
    def Popen(command: Any, env: Any = None, cwd: Any = None, **kwargs: Any) -> Any:  # noqa: N802
        command = [str(c) for c in command]
        ours = command[:2] == [sys.executable, "-m"] and command[2] in ("lit_gpu", "lit_gpu.__main__")
        if ours and not kwargs:
            environ = dict(os.environ if env is None else env)
            return ForkedRun(command[3:], cwd or os.getcwd(), environ, inherit=True, server=_SERVER["path"])
        return subprocess.Popen(command, env=env, cwd=cwd, **kwargs)


def forked_here() -> bool:
    """Whether this process was forked from a server (a run, or one of its DDP ranks)."""
    return bool(_SERVER.get("path"))


def _fork_lightning_ranks() -> None:
    """Make this run's DDP launcher fork its ranks from the server (pinned in test_upstream_pins.py)."""
    from lightning.pytorch.strategies.launchers import subprocess_script

    subprocess_script.subprocess = _LauncherSubprocess()  # type: ignore[assignment]


def _manage(conn: socket.socket) -> None:
    """Fork the run, report its pid, wait for it, report its exit status; never returns."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # so waitpid sees the child
        data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        while not data.endswith(b"\n"):
            chunk = conn.recv(1 << 16)
            if not chunk:
                raise RuntimeError("the request ended before its newline")
            data += chunk
        request = json.loads(data)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            conn.close()
            _child(request, fds)
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):  # before the pid is known to the test (the child does it too)
            os.setpgid(pid, request.get("inherit") or pid)
        conn.sendall((json.dumps({"pid": pid}) + "\n").encode())
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        conn.sendall((json.dumps({"returncode": code}) + "\n").encode())
    finally:
        os._exit(0)


def serve(path: str) -> None:
    """Import the CLI once, then fork a manager per connection."""
    import lightning.pytorch  # noqa: F401  # the cost every run would pay

    import lit_gpu.cli  # noqa: F401

    with contextlib.suppress(ImportError):
        import optuna  # noqa: F401  # lit-gpu sweep imports it when it runs

    here = os.path.realpath(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    pythonpath = {os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    _SERVER["site_path"] = [
        p for p in sys.path[1:] if p and os.path.realpath(p) not in pythonpath and os.path.realpath(p) != here
    ]
    _SERVER["path"] = path  # where a forked run's launcher asks for its ranks
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # managers are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    print("ready", flush=True)
    server.settimeout(5.0)
    parent = os.getppid()
    while os.getppid() == parent:  # the test worker is gone: so is its server
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        if os.fork() == 0:
            server.close()
            _manage(conn)
        conn.close()


# ---- the client (in the test process) -------------------------------------------------------------
def _server(env: dict[str, str]) -> str:
    """The socket of this process's server, started on first use (its base env: ``env``)."""
    if _SERVER.get("pid") == os.getpid() and _SERVER["proc"].poll() is None:
        return _SERVER["socket"]
    folder = tempfile.mkdtemp(prefix="lit_gpu_forked_cli_")
    path = os.path.join(folder, "socket")
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE, path],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", f"forked-CLI server did not start ({line!r})"
    _SERVER.update(pid=os.getpid(), proc=proc, socket=path, folder=folder)
    atexit.register(stop_server)
    return path


def stop_server() -> None:
    """Stop this process's server (at exit)."""
    proc = _SERVER.pop("proc", None)
    if proc is not None and _SERVER.get("pid") == os.getpid():
        proc.kill()
        proc.wait()
        shutil.rmtree(_SERVER["folder"], ignore_errors=True)  # the socket and the runs' PIPE outputs


class ForkedRun:
    """A started ``python -m lit_gpu`` run with the part of :class:`subprocess.Popen` tests use.

    Args:
        argv: Arguments after ``python -m lit_gpu``.
        cwd: Working folder.
        env: The whole environment of the run.
        stdout: ``PIPE`` (read by :meth:`communicate`), ``DEVNULL``/``None``, or a path or file
            object to append to (readable while the run goes on).
        stderr: As ``stdout``, or ``STDOUT`` (merged into stdout).
        text: Decode what :meth:`communicate` returns.
        inherit: A DDP rank of the forked run this is called in: it shares this process's stdin,
            stdout, stderr and process group (``stdout``/``stderr`` are ignored).
        server: The server's socket (default: this process's server, started on first use).
    """

    def __init__(
        self,
        argv: list[str],
        cwd: str | os.PathLike,
        env: dict[str, str],
        stdout: Any = subprocess.PIPE,
        stderr: Any = subprocess.PIPE,
        text: bool = False,
        inherit: bool = False,
        server: str | None = None,
    ) -> None:
        self.args = [sys.executable, "-m", "lit_gpu", *argv]
        self.text = text
        self.returncode: int | None = None
        request: dict[str, Any] = {"argv": list(argv), "cwd": str(cwd), "env": dict(env)}
        server = server or _server(env)
        # PIPE outputs: in the server's folder, which stop_server removes even if communicate() never ran
        self._outdir = None if inherit else tempfile.mkdtemp(prefix="run_", dir=_SERVER["folder"])
        self._out_pipe = self._err_pipe = None
        if inherit:
            request["inherit"] = os.getpgid(0)
        else:
            request["stdout"], self._out_pipe = self._target(stdout, "stdout")
            request["stderr"], self._err_pipe = (
                (request["stdout"], None) if stderr == subprocess.STDOUT else self._target(stderr, "stderr")
            )
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn.connect(server)
        line = (json.dumps(request) + "\n").encode()
        sent = socket.send_fds(self._conn, [line], [0, 1, 2]) if inherit else 0
        self._conn.sendall(line[sent:])
        self._buffer = b""
        self.pid: int = self._message(None)["pid"]

    def _target(self, spec: Any, name: str) -> tuple[dict, str | None]:
        assert self._outdir is not None
        if spec == subprocess.PIPE:
            path = os.path.join(self._outdir, name)
            return {"path": path, "append": False}, path
        if spec is None or spec == subprocess.DEVNULL:
            return {"path": os.devnull, "append": True}, None
        return {"path": str(getattr(spec, "name", spec)), "append": True}, None

    def _message(self, timeout: float | None) -> dict:
        """The server's next JSON line; ``TimeoutError`` when none came within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if left is not None and not select.select([self._conn], [], [], left)[0]:
                raise TimeoutError
            chunk = self._conn.recv(4096)
            if not chunk:
                raise RuntimeError("the forked-CLI server closed the connection")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def poll(self) -> int | None:
        """The exit status if the run has ended, else ``None``."""
        if self.returncode is None:
            with contextlib.suppress(TimeoutError):
                self.returncode = self._message(0.0)["returncode"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; :class:`subprocess.TimeoutExpired` after ``timeout`` (the run goes on)."""
        if self.returncode is None:
            try:
                self.returncode = self._message(timeout)["returncode"]
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
        return self.returncode

    def _read(self, path: str | None) -> Any:
        if path is None:
            return None
        data = Path(path).read_bytes() if os.path.exists(path) else b""
        return data.decode(errors="replace") if self.text else data

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Wait for the end, then ``(stdout, stderr)`` of the ``PIPE`` ones (``None`` for the rest)."""
        self.wait(timeout)
        result = self._read(self._out_pipe), self._read(self._err_pipe)
        self._conn.close()
        if self._outdir is not None:
            shutil.rmtree(self._outdir, ignore_errors=True)
        return result

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def popen(argv: list[str], cwd: str | os.PathLike, env: dict[str, str], **kwargs: Any) -> ForkedRun:
    """``subprocess.Popen([python, -m, lit_gpu, *argv], ...)``, forked: see the module docstring."""
    return ForkedRun(argv, cwd, env, **kwargs)


def run_cli(
    argv: list[str], cwd: str | os.PathLike, env: dict[str, str], timeout: float = 400
) -> subprocess.CompletedProcess:
    """``subprocess.run([python, -m, lit_gpu, *argv], cwd=, env=, capture_output=True, text=True)``, forked.

    On ``timeout`` the run is killed and :class:`subprocess.TimeoutExpired` raised.
    """
    run = ForkedRun(argv, cwd, env, text=True)
    try:
        stdout, stderr = run.communicate(timeout)
    except subprocess.TimeoutExpired:
        run.kill()
        raise
    return subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr)
