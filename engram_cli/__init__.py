"""The ``engram`` command: run the stack, migrate, publish events, inspect what is stored.

Each subcommand lives in its own module with ``add_parser(subparsers)``; the
module registers a ``func(args) -> int`` on its parser.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that contribute subcommands, in help order.
COMMANDS = [
    "engram_cli.run",
    "engram_cli.migrate",
    "engram_cli.publish",
    "engram_cli.inspect",
    "engram_cli.embeddings",
    "engram_cli.keys",
    "engram_cli.users",
    "engram_cli.mcp",
    "engram_cli.archive",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="engram", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from shared.errors import EngramError

        if isinstance(exc, EngramError):
            print(f"engram: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
