"""The ``%tpu`` line and ``%%tpu`` cell magic: read the line, find the subcommand in the table,
call its handler. Also what handlers share: running a cell as IPython runs one, and looking a
variable of the notebook up. Imported once every subcommand is declared (its help lists them)."""

from __future__ import annotations

import ast

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, kwds, magic_arguments
from IPython.utils.process import arg_split

from .parsing import error, glue_numbers, overview, parser, unknown
from .table import COMMANDS, cell_commands


@magics_class
class TpuMagics(Magics):
    """The ``%tpu`` magics. ``%tpu --help`` lists the subcommands."""

    @magic_arguments()
    @kwds(description=overview())
    @argument("subcommand", nargs="?", default="status", help="one of: " + ", ".join(COMMANDS))
    @argument("options", nargs="*", help="the subcommand's arguments (%%tpu SUBCOMMAND --help)")
    @line_cell_magic
    def tpu(self, line: str, cell: str | None = None):
        __tracebackhide__ = True  # noqa: F841
        try:
            tokens = arg_split(line, strict=True)
        except ValueError as exc:
            raise UsageError(f"%tpu: cannot read {line!r}: {exc}; check the quotes.") from None
        cells = ", ".join(cell_commands())
        if cell is not None and not tokens:
            raise UsageError(f"%%tpu needs a subcommand: {cells}.")
        name = tokens[0] if tokens else "status"
        if name in ("-h", "--help", "help"):
            print(self.tpu.__doc__.removeprefix("::\n\n"))  # the docstring is reST
            return None
        command = COMMANDS.get(name)
        if command is None:
            raise UsageError(unknown(name))
        if "-h" in tokens[1:] or "--help" in tokens[1:]:
            print(parser(name).format_help())
            return None
        if cell is not None and not command.cell:
            raise UsageError(
                f"%%tpu {name} does not run a cell: write %tpu {name} on a line of its own. "
                f"Cell subcommands: {cells}."
            )
        if cell is None and not command.line:
            raise UsageError(
                f"%tpu {name} needs a cell: put %%tpu {name} on the first line of the cell."
            )
        try:
            args = parser(name).parse_args(glue_numbers(name, tokens[1:]))
        except UsageError as exc:
            raise error(name, str(exc)) from None
        if any(isinstance(value, list) for value in vars(args).values()):
            raise error(name, "'--' is not a value")  # argparse hands [] where "--" stood
        return command.handler(self, args, cell)

    def run_cell(self, cell: str):
        """Run ``cell`` in the user's namespace like a cell: IPython syntax, its lines in
        tracebacks, the value of a last expression returned (shown as ``Out[N]``)."""
        __tracebackhide__ = True  # noqa: F841 - IPython leaves this frame out of tracebacks
        from ..events.context import ipython_cell

        shell = self.shell
        source = shell.transform_cell(cell)
        tree = shell.transform_ast(shell.compile.ast_parse(source))
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        number = ipython_cell()
        filename = shell.compile.cache(
            source, shell.execution_count if number is None else number, raw_code=cell
        )
        exec(shell.compile(tree, filename, "exec"), shell.user_global_ns, shell.user_ns)
        if last is None:
            return None
        value = eval(shell.compile(last, filename, "eval"), shell.user_global_ns, shell.user_ns)
        return None if cell.rstrip().endswith(";") else value

    def lookup(self, name: str, command: str):
        """The value of variable ``name`` (``a.b`` for an attribute) in the user namespace."""
        parts = name.split(".")
        if not all(p.isidentifier() for p in parts):
            raise error(command, f"{name!r} is not a variable name")
        if any(p.startswith("__") for p in parts[1:]):
            raise error(command, f"{name!r}: special attributes (__name__) are not looked up")
        namespace = self.shell.user_ns
        if parts[0] not in namespace:
            raise UsageError(
                f"%tpu {command}: no variable named {parts[0]!r} in the notebook; run the cell "
                "that defines it first, or check the spelling."
            )
        value = namespace[parts[0]]
        for i, part in enumerate(parts[1:], 1):
            if not hasattr(value, part):
                raise UsageError(
                    f"%tpu {command}: {'.'.join(parts[:i])} has no attribute {part!r}."
                )
            value = getattr(value, part)
        return value
