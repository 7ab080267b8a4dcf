"""``engram run``: the whole stack in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse

from engram_cli.stack import SERVICES, run_stack
from shared.errors import ConfigError
from shared.serve import setup_logging
from shared.settings import CommonSettings


def run(args: argparse.Namespace) -> int:
    unknown = [s for s in args.services if s not in SERVICES]
    if unknown:
        raise ConfigError(f"unknown service(s) {unknown}; choose from {SERVICES}")
    settings = CommonSettings()
    setup_logging(settings.log_level)
    return run_stack(settings, args.services or None)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run", help="start embedded PostgreSQL and Redis (unless URLs are set) and all services"
    )
    p.add_argument(
        "services",
        nargs="*",
        metavar="SERVICE",
        help=f"only these services (default: all of {', '.join(SERVICES)})",
    )
    p.set_defaults(func=run)
