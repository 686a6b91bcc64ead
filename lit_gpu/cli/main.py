"""``lit-gpu``: the tool commands, else LitGpuCLI; known failures as one line and exit 2."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from lit_gpu import messages
from lit_gpu.callbacks.interrupt import INTERRUPT_EXIT_CODE, forget_interrupts, interrupt_exit_code
from lit_gpu.cli import quiet
from lit_gpu.cli.lightning_cli import LitGpuCLI
from lit_gpu.commands import COMMANDS
from lit_gpu.errors import explain


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``lit-gpu`` and ``python -m lit_gpu``; exits with the command's status."""
    quiet.install()  # here only: importing lit_gpu leaves warning and logging filters alone
    args = list(sys.argv[1:] if argv is None else argv)
    forget_interrupts()
    try:
        if args and args[0] in COMMANDS:
            sys.exit(int(COMMANDS[args[0]](args[1:]) or 0))
        LitGpuCLI(args=None if argv is None else args)
    except BrokenPipeError:  # `lit-gpu env --json | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except SystemExit:
        code = interrupt_exit_code()  # SIGINT/SIGTERM during a run: last.ckpt saved; 130 / 143
        if code is not None:
            sys.exit(code)
        raise
    except KeyboardInterrupt:  # Ctrl+C outside a run (parsing, setup): nothing to save
        messages.tell(messages.INTERRUPTED_OUTSIDE_RUN)
        sys.exit(INTERRUPT_EXIT_CODE)
    except Exception as err:
        message = explain(err)
        if message is None:
            raise
        messages.tell_error(message)
        sys.exit(2)
