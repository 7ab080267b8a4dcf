"""Schemathesis against the running query service, with a user key and with an
admin key: no input may produce a 5xx (issue 17.6), and every answer matches the
OpenAPI (status codes and bodies). 5xx are counted from the service's own request
metrics, so one that schemathesis's checks would miss is counted too; each
conformance finding is listed (operation, check, status) from the JUnit report."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import httpx

from shared.apikeys import create_key
from shared.db import connect
from tests.chaos.conftest import SCALE, record

MAX_TIME_S = 20 * SCALE
EXAMPLES = 8 * SCALE
# Erasing a user would end the run's own key; the erasure has its own tests.
EXCLUDE = r"^/v1/users/"


async def _key(url: str, user_id: str | None, admin: bool) -> str:
    conn = await connect(url)
    try:
        if user_id is not None:
            await conn.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)
        _, secret = await create_key(conn, user_id=user_id, is_admin=admin)
        return secret
    finally:
        await conn.close()


def _server_errors(base: str) -> int:
    """5xx answers (the request histogram) plus unhandled errors (the error handler's
    own counter, ``engram_http_server_errors_total``; issue 29.6)."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        answered = line.startswith("engram_http_request_seconds_count") and 'status="5xx"' in line
        if answered or line.startswith("engram_http_server_errors_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def _schemathesis(base: str, key: str, report: Path, *extra: str) -> tuple[int, str]:
    cmd = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{base}/openapi.json",
        "-H",
        f"Authorization: Bearer {key}",
        "--checks",
        "not_a_server_error,response_schema_conformance,status_code_conformance",
        "--max-examples",
        str(EXAMPLES),
        "--max-time",
        str(MAX_TIME_S),
        "--exclude-path-regex",
        EXCLUDE,
        "--seed",
        "17",
        "--continue-on-failure",
        "--request-timeout",
        "20",
        "--report",
        "junit",
        "--report-junit-path",
        str(report),
        "--no-color",
        *extra,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=MAX_TIME_S * 4 + 120)
    return out.returncode, out.stdout + out.stderr


async def test_no_5xx_for_fuzzed_requests_with_user_and_admin_keys(
    stack: Any, tmp_path: Path
) -> None:
    query = next(i for i in stack.instances if i.service == "query")
    base = f"http://127.0.0.1:{query.port}"
    user_key = await _key(stack.database_url, "fuzz-user", admin=False)
    admin_key = await _key(stack.database_url, None, admin=True)
    before = _server_errors(base)
    results = {}
    runs: list[tuple[str, str, tuple[str, ...]]] = [
        ("user", user_key, ()),
        ("admin", admin_key, ("-H", "X-Engram-User: fuzz-user")),  # acting for a user
    ]
    for who, key, extra in runs:
        code, output = _schemathesis(base, key, tmp_path / f"{who}.xml", *extra)
        results[who] = (code, output)
        print(f"\n--- schemathesis with the {who} key (exit {code}) ---\n{output[-4000:]}")
    errors = _server_errors(base) - before
    cases = sum(_count(out, r"(\d+) (?:generated|test cases)") for _, out in results.values())
    findings = [f"{who}: {f}" for who in results for f in _findings(tmp_path / f"{who}.xml")]
    record("fuzzed requests", cases or "see log", "schemathesis, user and admin keys")
    record("5xx", errors, "server errors counted by the query service itself")
    record("conformance findings", len(findings), "answers that break the OpenAPI")
    print("\n".join(["conformance findings:", *findings]))
    assert errors == 0
    assert findings == []


def _findings(report: Path) -> list[str]:
    """One line per failed check in a schemathesis JUnit report: operation, check, status."""
    if not report.exists():
        return [f"no report at {report.name}"]
    found = []
    for case in ET.parse(report).iter("testcase"):
        for failure in case:
            if failure.tag not in ("failure", "error"):
                continue
            text = f"{failure.get('message') or ''}\n{failure.text or ''}"
            checks = sorted(set(re.findall(r"- (ST\d+ [^\n]+)", text))) or [text.strip()[:120]]
            status = re.findall(r"Received: (\d+)", text)
            found.append(f"{case.get('name')}: {'; '.join(checks)} {status[:1]}")
    return found


def _count(text: str, pattern: str) -> int:
    found = re.findall(pattern, text)
    return sum(int(n) for n in found[-1:]) if found else 0
