"""One way out for text (issue 50): every line lit_gpu prints, logs or draws escapes what came from outside.

``messages.tell`` and ``messages.tell_error`` escape their whole line (:func:`lit_gpu.messages.one_line`), so
whatever a line made with them quotes (a path, a metric name, a checkpoint's field) stays one line with no
control characters: they are the door. This test walks every module of the package (AST, nothing imported)
and fails on any other output call (``print``, a stream's ``write``, Lightning's ``rank_zero_*``, a Rich
console or table, a matplotlib label or title) whose text is not provably safe: a literal, a number (a numeric
format spec or a numeric function), a call of :func:`~lit_gpu.messages.shown` / ``one_line`` (or a
module's own escaping helper listed below), JSON (ASCII), or a value listed below as lit_gpu's own.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "lit_gpu"

#: calls that put text on a terminal, in a log, or in a figure: name (last part) -> positions checked
#: (``None``: every positional argument) and keywords checked
OUTPUTS: dict[str, tuple[tuple[int, ...] | None, tuple[str, ...]]] = {
    "print": (None, ()),
    "write": ((0,), ()),  # sys.stdout.write, stream.write (files written by lit_gpu are bytes or JSON)
    "rank_zero_info": ((0,), ()),
    "rank_zero_warn": ((0,), ()),
    "rank_zero_debug": ((0,), ()),
    "warn": ((0,), ()),  # warnings.warn(message, category)
    # logging: every positional argument (``%s`` arguments are put into the line by the logger)
    "info": (None, ()),
    "warning": (None, ()),
    "error": (None, ()),  # a logger's; argparse's parser.error(message) prints it with the usage
    "exception": (None, ()),
    "critical": (None, ()),
    "debug": (None, ()),
    "echo": (None, ()),  # click.echo, typer.echo
    "writelines": (None, ()),
    "add_row": (None, ()),
    "add_column": ((0,), ()),
    "Table": ((), ("title",)),
    "set_title": ((0,), ()),
    "set_xlabel": ((0,), ()),
    "set_ylabel": ((0,), ()),
    "suptitle": ((0,), ()),
    "text": ((2,), ()),  # Axes.text(x, y, s)
    "plot": ((), ("label",)),
    "scatter": ((), ("label",)),
    "step": ((), ("label",)),
}

#: the door and the functions that escape text (any module); a call of one of them is safe
ESCAPING = {"shown", "one_line", "tell", "tell_error", "dumps", "plain_label", "_label", "cell", "quoted"}

#: functions whose result is a number or lit_gpu's own formatting of numbers
NUMERIC = {"len", "int", "float", "round", "_number", "_clock", "_gib", "_fmt", "ceil"}

#: (module, source text of a value) -> why it is lit_gpu's own text, not text from outside
OWN: dict[tuple[str, str], str] = {
    ("lit_gpu/cli/main.py", "help_text()"): "the COMMANDS table's own help lines",
    ("lit_gpu/cli/main.py", "version_text()"): "lit_gpu's and its dependencies' version numbers",
    ("lit_gpu/cli/completion.py", "script(args.shell)"): "the script jsonargparse and shtab generate",
    ("lit_gpu/commands/configs.py", "recipes.describe(name)"): "the first comment line of a shipped recipe",
    ("lit_gpu/commands/configs.py", "recipes.PREFIX + name"): "a shipped recipe's name",
    ("lit_gpu/commands/configs.py", "path"): "the path of a shipped recipe inside the package",
    ("lit_gpu/commands/configs.py", "path.read_text()"): "a shipped recipe's text (the file is printed)",
    ("lit_gpu/commands/init.py", "text"): "a file of the project init writes (not a line to a terminal)",
    ("lit_gpu/commands/plot.py", "title"): "a panel title of plot's own (loss, accuracy, ...)",
    ("lit_gpu/commands/plot.py", "str(value)"): "a count of the confusion matrix (an int)",
    ("lit_gpu/commands/sweep/study.py", "why"): "lit_gpu's own sentence about why importances are missing",
    ("lit_gpu/commands/bench.py", "table"): "a Rich table whose cells are escaped where it is built",
    ("lit_gpu/commands/export.py", "blob"): "the bytes of the weights file export writes (a file)",
    (
        "lit_gpu/commands/export.py",
        "(json.dumps(meta, indent=2) + '\\n').encode()",
    ): "the JSON sidecar export writes (a file)",
    ("lit_gpu/cli/lightning_cli.py", "message"): "jsonargparse's own error, passed on only where it raises "
    "(exit_on_error=False) or under JSONARGPARSE_DEBUG (the user asked for its raw report)",
    ("lit_gpu/cli/lightning_cli.py", "ex"): "the exception of jsonargparse's own error (as for message)",
    ("lit_gpu/checkpoints/io.py", "f"): "atomic_write hands its file object to the writer (a file)",
    ("lit_gpu/commands/sweep/study.py", "table"): "a Rich table whose cells are escaped where it is built",
    ("lit_gpu/commands/env.py", "table"): "a Rich table whose cells are escaped where it is built",
    ("lit_gpu/commands/env.py", "facts"): "a Rich grid whose cells are escaped where it is built",
    ("lit_gpu/commands/env.py", "col"): "a column name of env's own",
    ("lit_gpu/commands/bench.py", "name"): "a column name of bench's own (table_rows' header)",
}


def _numeric_spec(spec: ast.JoinedStr | None) -> bool:
    """A format spec that only numbers accept (``.0f``, ``,d``, ``.1%``...): a string there raises."""
    if spec is None or not spec.values or not isinstance(spec.values[-1], ast.Constant):
        return False
    text = str(spec.values[-1].value)
    return bool(text) and text[-1] in "bcdeEfFgGnoxX%"


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _assignments(scope: ast.AST) -> dict[str, list[ast.expr]]:
    """Each plain name assigned in ``scope`` (a function, or a module) -> the values assigned to it."""
    found: dict[str, list[ast.expr]] = {}
    for node in ast.walk(scope):
        pairs: list[tuple[ast.expr, ast.expr]] = []
        if isinstance(node, ast.Assign):
            pairs = [(target, node.value) for target in node.targets]
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and node.value is not None:
            pairs = [(node.target, node.value)]
        for target, value in pairs:
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                pairs += list(zip(target.elts, value.elts, strict=False))
            elif isinstance(target, ast.Name):
                found.setdefault(target.id, []).append(value)
            elif isinstance(target, ast.Tuple):  # unpacked from something opaque: unknown
                for element in target.elts:
                    if isinstance(element, ast.Name):
                        found.setdefault(element.id, []).append(ast.Name("?"))
    return found


def _safe(node: ast.AST, module: str, names: dict[str, list[ast.expr]] | None = None) -> bool:
    """Whether ``node``'s text is provably escaped, a number, a literal, or listed as lit_gpu's own.

    A plain name is safe when every value assigned to it in its function is (a parameter or a loop variable
    has none: it is not).
    """
    names = names or {}
    if (module, ast.unparse(node)) in OWN:
        return True
    if isinstance(node, ast.Name) and node.id in names:
        values, names = names[node.id], {k: v for k, v in names.items() if k != node.id}  # no cycles
        return all(_safe(value, module, names) for value in values)
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name | ast.Attribute) and ast.unparse(node).split(".")[-1].isupper():
        return True  # a module constant (messages.PREFIX, a table of literals)
    if isinstance(node, ast.JoinedStr):
        return all(_safe(v, module, names) for v in node.values)
    if isinstance(node, ast.FormattedValue):
        return _numeric_spec(node.format_spec) or _safe(node.value, module, names)  # type: ignore[arg-type]
    if isinstance(node, ast.BinOp):
        return _safe(node.left, module, names) and _safe(node.right, module, names)
    if isinstance(node, ast.IfExp):
        return _safe(node.body, module, names) and _safe(node.orelse, module, names)
    if isinstance(node, ast.BoolOp):
        return all(_safe(v, module, names) for v in node.values)
    if isinstance(node, ast.Call):
        name = _callee(node)
        if name in ESCAPING or name in NUMERIC:
            return True
        if name == "Text":  # rich.text.Text: no markup; safe when its text is
            return all(_safe(a, module, names) for a in node.args[:1])
        if name in ("format", "join") and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            receiver_ok = isinstance(receiver, ast.Constant) or ast.unparse(receiver).split(".")[-1].isupper()
            args = [*node.args, *(k.value for k in node.keywords)]
            return receiver_ok and all(_safe(a, module, names) for a in args)
        return False
    if isinstance(node, ast.GeneratorExp | ast.ListComp):
        return _safe(node.elt, module, names)
    return False


#: output functions that print whatever they are given: used as a value (``out = print``,
#: ``map(print, names)``, ``partial(sys.stderr.write)``), their calls are out of the rule's sight
OUTPUT_VALUES = {
    "print",
    "sys.stdout.write",
    "sys.stderr.write",
    "sys.stdout.writelines",
    "sys.stderr.writelines",
}


def _unsafe_outputs(path: Path) -> list[str]:
    return _unsafe_source(path.read_text(encoding="utf-8"), path.relative_to(REPO_ROOT).as_posix())


def _unsafe_source(source: str, module: str) -> list[str]:
    tree = ast.parse(source)
    scopes: dict[ast.AST, ast.AST] = {}  # each call -> its innermost function (or the module)
    for scope in [
        tree,
        *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)),
    ]:
        for node in ast.walk(scope):
            scopes[node] = scope  # inner functions come later in the walk and win
    assigned = {scope: _assignments(scope) for scope in set(scopes.values())}
    found = []
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        value = isinstance(node, ast.Name | ast.Attribute) and id(node) not in called
        if value and ast.unparse(node) in OUTPUT_VALUES:
            found.append(
                f"{module}:{node.lineno}: {ast.unparse(node)} used as a value (call it on safe text)"
            )
        if not isinstance(node, ast.Call) or _callee(node) not in OUTPUTS:
            continue
        names = assigned[scopes[node]]
        positions, keywords = OUTPUTS[_callee(node)]
        args = node.args if positions is None else [node.args[i] for i in positions if i < len(node.args)]
        args += [k.value for k in node.keywords if k.arg in keywords]
        for arg in args:
            if isinstance(arg, ast.Starred):
                arg = arg.value
            if not _safe(arg, module, names):
                found.append(f"{module}:{node.lineno}: {ast.unparse(arg)[:90]}")
    return found


def test_every_output_line_escapes_text_from_outside():
    modules = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "messages.py")
    found = [line for path in modules for line in _unsafe_outputs(path)]
    assert not found, "text printed without messages.shown / one_line (or listed as lit_gpu's own):\n" + (
        "\n".join(found)
    )


def test_every_listed_value_is_still_printed():
    """A stale entry of OWN would hide a future value of the same text: each must still be in its module."""
    for module, text in OWN:
        source = (REPO_ROOT / module).read_text(encoding="utf-8")
        tree = ast.parse(source)
        assert any(ast.unparse(n) == text for n in ast.walk(tree) if isinstance(n, ast.expr)), (module, text)


def test_the_rule_catches_a_raw_value():
    """The rule itself: a raw interpolation, a raw name, Rich markup with a value and a str() fail."""
    bad = ["print(f'{name}')", "print(path)", "console.print(f'[b]{x}[/]')", "ax.set_title(str(x))"]
    good = ["print(f'{n:.2f} {shown(x)}')", "print(one_line(x))", "sys.stdout.write('a\\n')"]
    for text, expected in [*((b, False) for b in bad), *((g, True) for g in good)]:
        call = ast.parse(text).body[0].value  # type: ignore[attr-defined]
        assert all(_safe(a, "x.py") for a in call.args) is expected, text


def test_the_rule_sees_every_way_out():
    """Output calls that escaped the rule (found by attacking it): a logger's ``%s`` arguments, argparse's
    ``parser.error``, ``click.echo``, ``writelines``, and an output function used as a value."""
    ways = [
        "log.warning('%s', name)",
        "logging.error('bad %s', name)",
        "log.exception('x %r', name)",
        "parser.error(f'unknown {value}')",
        "click.echo(name)",
        "sys.stdout.writelines(names)",
        "out = print\nout(name)",
        "list(map(print, names))",
        "emit = functools.partial(sys.stderr.write)",
    ]
    for source in ways:
        assert _unsafe_source(source, "x.py"), source
    assert not _unsafe_source("log.warning('%s', shown(name))\nprint(one_line(x))", "x.py")
