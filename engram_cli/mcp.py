"""``engram mcp``: the memory tools over MCP on stdio, for one API key."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _run(args: argparse.Namespace) -> int:
    from engram_cli.mcp_stdio import run
    from engram_client import EngramError

    key = os.environ.get("ENGRAM_API_KEY")
    if args.key_file:
        try:
            key = Path(args.key_file).read_text().strip()
        except OSError as exc:
            print(f"engram mcp: --key-file: {exc}", file=sys.stderr)
            return 2
    elif args.key:
        # anyone on the machine reads argv (ps, /proc); stdin is the MCP channel
        print(
            "engram mcp: warning: --key shows the key in the process list; "
            "set ENGRAM_API_KEY or use --key-file",
            file=sys.stderr,
        )
        key = args.key
    if not key:
        print("engram mcp: set ENGRAM_API_KEY or give --key-file", file=sys.stderr)
        return 2
    url = args.url or f"http://127.0.0.1:{os.environ.get('ENGRAM_QUERY_PORT', '8000')}"
    try:
        run(url, key, user=args.user)
    except EngramError as exc:
        print(f"engram mcp: {url}: {exc}", file=sys.stderr)
        return 1
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "mcp",
        help="serve the memory tools over MCP on stdio (for Claude Desktop, IDEs, agents)",
        description="Serve engram's memory tools over MCP on stdin/stdout. Each call goes to "
        "the query service's /v1/tools/call with the key, so it sees only the key's user.",
    )
    p.add_argument(
        "--key-file",
        metavar="PATH",
        help="read the API key from this file (default: $ENGRAM_API_KEY)",
    )
    p.add_argument(
        "--key",
        help="the API key itself (deprecated: visible in the process list; "
        "prefer $ENGRAM_API_KEY or --key-file)",
    )
    p.add_argument(
        "--url",
        help="query service address (default: http://127.0.0.1:$ENGRAM_QUERY_PORT, port 8000)",
    )
    p.add_argument("--user", help="with an admin key: the user to act for")
    p.set_defaults(func=_run)
