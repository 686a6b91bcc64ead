"""Shell words for completion: the words of a line as typed, and a candidate quoted for where it goes.

A candidate from the folder (a file name) may hold any character: ``$(...)``, backticks, quotes, spaces,
newlines. What a TAB inserts is quoted for the shell and for the quote the user opened, so the completed
line names that file and runs nothing. Standard library only: each TAB is one small Python start.
"""

from __future__ import annotations

import os

#: characters that mean something to bash (or zsh) in a word: a backslash before them makes them plain
SPECIAL = frozenset(" \t\\'\"$`;&|<>()*?[]{}#~!")
#: bash's default COMP_WORDBREAKS (readline starts the replaced text after the last one)
WORD_BREAKS = " \t\n\"'><=;|&(:"


def split_line(line: str) -> tuple[list[str], str]:
    """The words of ``line`` (up to the cursor) with the shell's quoting removed, and the last one as typed.

    Quotes (``'...'``, ``"..."``) and backslashes are read as bash reads them; an unclosed quote at the end
    is the word being typed. The last word is ``""`` when the line ends with a space.
    """
    words: list[str] = []
    value: list[str] = []
    raw: list[str] = []
    quote = ""
    escaped = in_word = False
    for char in line:
        if escaped:  # after a backslash (inside "...": only $ ` " \\ and a newline are escaped)
            escaped = False
            raw.append(char)
            if quote == '"' and char not in '$`"\\\n':
                value.append("\\")
            if char != "\n":  # backslash-newline: a continued line
                value.append(char)
            continue
        if quote:
            raw.append(char)
            if char == quote:
                quote = ""
            elif char == "\\" and quote == '"':
                escaped = True
            else:
                value.append(char)
            continue
        if char in " \t\n":
            if in_word:
                words.append("".join(value))
                value, raw, in_word = [], [], False
            continue
        in_word = True
        raw.append(char)
        if char == "\\":
            escaped = True
        elif char in "'\"":
            quote = char
        else:
            value.append(char)
    words.append("".join(value))
    return words, "".join(raw)


def _replaced(typed: str, breaks: str) -> tuple[int, str]:
    """Where readline's replaced text starts in the word ``typed``, and the quote open at its end.

    Inside an open quote the text starts after that quote; else after the last word-break character that
    is neither escaped nor quoted (``:`` of ``lit_gpu:NAME``, ``=`` of ``--config=FILE``).
    """
    quote, opened, start, escaped = "", 0, 0, False
    for index, char in enumerate(typed):
        if escaped:
            escaped = False
        elif quote:
            if char == quote:
                quote = ""
            elif char == "\\" and quote == '"':
                escaped = True
        elif char == "\\":
            escaped = True
        elif char in "'\"":
            quote, opened = char, index + 1
        elif char in breaks:
            start = index + 1
    return (opened, quote) if quote else (start, "")


def _control(char: str) -> bool:
    """A control character, or a byte of a file name that is not UTF-8 (a lone surrogate in Python)."""
    code = ord(char)
    return code < 0x20 or 0x7F <= code < 0xA0 or 0xD800 <= code < 0xE000


def _name_bytes(char: str) -> bytes:
    """The bytes ``char`` stands for in a file name (``U+0085`` is two bytes; ``\\udce9`` the byte 0xe9)."""
    try:
        return os.fsencode(char)
    except UnicodeEncodeError:
        return char.encode("utf-8", "surrogatepass")


def _ansi_c(text: str) -> str:
    """``text`` as bash's ``$'...'``: a quote and a backslash escaped, every control character written as
    the bytes of the name (``\\xc2\\x85``, not ``\\x85``: bash puts one raw byte for each ``\\xHH``)."""
    out = []
    for char in text:
        if char in "\\'":
            out.append("\\" + char)
        elif _control(char):
            out.append("".join(f"\\x{byte:02x}" for byte in _name_bytes(char)))
        else:
            out.append(char)
    return "$'" + "".join(out) + "'"


def quoted(text: str, quote: str = "") -> str:
    """``text`` quoted for a bash word, inside the open ``quote`` (``'``, ``"``) or none.

    Outside quotes every special character gets a backslash (a control character, which a backslash cannot
    quote, is written ``$'\\x0a'``); inside ``'...'`` a ``'`` closes, is escaped and reopens; inside
    ``"..."`` the characters that expand there get a backslash (``!`` is closed out as ``"'!'"``). A control
    character inside quotes is closed out as ``$'\\x0a'``.
    """
    if not quote:
        if text.endswith("/"):  # a folder: the slash stays last, so the next TAB goes on inside it
            return quoted(text[:-1]) + "/" if text[:-1] else "/"
        return "".join(
            _ansi_c(char) if _control(char) else "\\" + char if char in SPECIAL else char for char in text
        )
    out = []
    for char in text:
        if char == quote and quote == "'":
            out.append("'\\''")
        elif _control(char):
            out.append(quote + _ansi_c(char) + quote)
        elif quote == '"' and char == "!":  # a backslash would stay before it: out of the quotes
            out.append("\"'!'\"")
        elif quote == '"' and char in '\\$`"':
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def bash_replies(typed: str, found: list[str], breaks: str = WORD_BREAKS) -> list[str]:
    """What bash puts in place of readline's text for each candidate ``found`` of the word ``typed``.

    Each candidate is the whole word it completes (``--config=x.yaml``); the part before readline's text
    is dropped and the rest quoted for the quote open there.
    """
    start, quote = _replaced(typed, breaks)
    before = split_line(typed[: start - 1 if quote else start])[0][-1]
    home = typed[: typed.find("/") + 1] if typed.startswith("~") and "/" in typed else ""
    if home and (quote or start or not all(c.isalnum() or c in "~/._-" for c in home)):
        home = ""  # ~ and ~user expand only unquoted, at the start of the word
    replies = []
    for candidate in found:
        if not candidate.startswith(before):
            continue
        rest = candidate[len(before) :]
        if home and rest.startswith(home):
            replies.append(home + quoted(rest[len(home) :]))
        else:
            replies.append(quoted(rest, quote))
    return replies
