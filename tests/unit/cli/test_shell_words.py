"""Shell words for completion: a hostile file name, quoted for where the TAB puts it, is that name in bash."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from lit_gpu.cli.shell_words import WORD_BREAKS, bash_replies, quoted, split_line

HOSTILE = [
    "x$(touch pwned).yaml",
    "x`touch pwned`.yaml",
    "x'q $(touch pwned).yaml",
    'x"q\\$HOME.yaml',
    "x y;touch pwned&.yaml",
    "x\ntouch pwned\n.yaml",
    "x\x1b]0;title\x07.yaml",
    "x!!*?[a]{b,c}~#|<>.yaml",
    "x\u202e.yaml",
    "dir $(touch pwned)/",
]


def test_split_line_reads_quotes_and_backslashes_as_bash_does():
    assert split_line("lit-gpu fit --config 'a b' c\\ d \"e$f\" ") == (
        ["lit-gpu", "fit", "--config", "a b", "c d", "e$f", ""],
        "",
    )
    assert split_line("lit-gpu fit --config 'x$(") == (["lit-gpu", "fit", "--config", "x$("], "'x$(")
    assert split_line('a "b\\"c\\d') == (["a", 'b"c\\d'], '"b\\"c\\d')


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_each_reply_is_the_file_name_in_bash_and_runs_nothing(tmp_path):
    """Every hostile name, typed from its first letter unquoted, after ``'`` or ``"`` and after
    ``--config=``: the line with the reply in place of readline's text gives bash that exact word."""
    lines, expected = [], []
    for name in HOSTILE:
        for typed in ("x" if name.startswith("x") else "d", "'x", '"x', "--config=x", "--config='x"):
            if not name.startswith(typed.lstrip("'\"").removeprefix("--config=").lstrip("'")):
                continue
            candidate = ("--config=" if typed.startswith("--config=") else "") + name
            (reply,) = bash_replies(typed, [candidate], WORD_BREAKS)
            start = typed.rfind("=") + 1 if typed.startswith("--config=") else 0
            start = max(start, typed.rfind("'") + 1, typed.rfind('"') + 1)  # readline's text starts there
            quote = typed[start - 1] if start and typed[start - 1] in "'\"" else ""
            lines.append(f"printf '%s\\0' {typed[:start]}{reply}{quote}")  # readline closes the quote
            expected.append(candidate)
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", "\n".join(lines)],
        cwd=tmp_path,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().split("\0")[:-1] == expected
    assert list(tmp_path.iterdir()) == []  # nothing ran


def test_quoted_text_holds_no_control_character():
    for name in HOSTILE:
        for quote in ("", "'", '"'):
            assert all(ord(c) >= 0x20 and c != "\x7f" for c in quoted(name, quote)), (name, quote)
    assert quoted("configs/") == "configs/" and quoted("a b/") == "a\\ b/"  # a folder ends in its slash
