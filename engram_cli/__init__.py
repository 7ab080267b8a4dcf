"""The ``engram`` command: run the stack, migrate, publish events, inspect what is stored.

Each subcommand lives in its own module with ``add_parser(subparsers)``; the
module registers a ``func(args) -> int`` on its parser. A new subcommand is one
more name in :func:`build_parser`.
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    # Imported here, not at the package's import: ``engram_cli.embedded`` and the
    # other helpers stay light for the tests and the bench that import them.
    from engram_cli import (
        archive,
        embeddings,
        inspect,
        keys,
        mcp,
        migrate,
        publish,
        run,
        structure,
        users,
    )

    parser = argparse.ArgumentParser(prog="engram", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    # in help order
    for command in (
        run,
        migrate,
        publish,
        inspect,
        embeddings,
        keys,
        users,
        mcp,
        archive,
        structure,
    ):
        command.add_parser(sub)
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
