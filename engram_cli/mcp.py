"""``engram mcp``: the memory tools over MCP on stdio, for one API key."""

from __future__ import annotations

import argparse
import os
import sys


def _run(args: argparse.Namespace) -> int:
    from engram_cli.mcp_stdio import run
    from engram_client import EngramError

    key = args.key or os.environ.get("ENGRAM_API_KEY")
    if not key:
        print("engram mcp: give --key or set ENGRAM_API_KEY", file=sys.stderr)
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
    p.add_argument("--key", help="API key (default: $ENGRAM_API_KEY)")
    p.add_argument(
        "--url",
        help="query service address (default: http://127.0.0.1:$ENGRAM_QUERY_PORT, port 8000)",
    )
    p.add_argument("--user", help="with an admin key: the user to act for")
    p.set_defaults(func=_run)
