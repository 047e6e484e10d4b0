"""The ``knee`` command line.

``knee`` alone opens the TUI; every screen has a headless twin here. Each subcommand lives in
its own module exposing ``register(subparsers)``; handlers return an exit code. Errors the
user can fix (:class:`core.errors.BadInput`) print one line and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules, in the order ``knee --help`` lists them.
COMMANDS = ["estimate", "recommend", "sweep", "results", "import_", "attach", "bench", "deploy", "catalog"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's default exits 2 with usage; keep it one line
        self.exit(2, f"knee: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="knee", description="Find the knee of the latency-throughput curve and ship it.")
    parser.add_argument("--version", action="version", version="knee 0.1.0")
    parser.add_argument("--web", action="store_true", help="serve the TUI in a browser on 127.0.0.1 (textual-serve)")
    parser.add_argument("--plan", help="open the TUI on this plan file")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"tui.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from pydantic import ValidationError

    from core.errors import KneeError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            from tui.cli.app import run_app

            return run_app(args)
        return int(args.func(args) or 0)
    except KneeError as e:
        print(f"knee: error: {e}", file=sys.stderr)
        return e.exit_code
    except ValidationError as e:
        # User input that reached a typed model unchecked: one line (field, allowed range,
        # value given), not pydantic's dump. Commands convert their own with better names.
        from core.errors import describe_validation

        print(f"knee: error: {describe_validation(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("knee: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `knee ... --json | head` closed the pipe: not an error worth a traceback.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
