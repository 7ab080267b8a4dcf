"""The alert rules under promtool's rule tests (issue 29.6, 29.13): the dead-letter
alert sees the first dead letters after a start, whether the series starts at 0 (the
consumers initialise it) or first shows up at 1; the unhandled-error alert fires on
the first 500; the replica alerts fire for the replica that stays behind (or that a
query process cannot reach), not for one that lagged once. Skipped without
``promtool`` on PATH (Debian: prometheus)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT

PROMTOOL = shutil.which("promtool")
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"

pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")


def _alert(name: str, labels: dict[str, str], summary: str) -> dict[str, object]:
    rules = [r for g in _load(RULES)["groups"] for r in g["rules"] if r.get("alert") == name]
    [rule] = rules
    return {"exp_labels": {**rule["labels"], **labels}, "exp_annotations": {"summary": summary}}


def _load(path: Path) -> dict[str, object]:
    import yaml

    loaded: dict[str, object] = yaml.safe_load(path.read_text())
    return loaded


def test_alert_rules_fire_on_the_first_event_after_a_start(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    ingest = {"job": "engram-ingest", "instance": "i:1"}
    query = {"job": "engram-query", "instance": "q:1"}

    def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
        inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return {"series": f"{name}{{{inner}}}", "values": values}

    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    # the first dead letter before the first scrape: the series starts at 1
                    series("engram_dead_lettered_total", {**ingest, "stream": "turns"}, "_ _ 1x5"),
                    # initialised at 0, then two dead letters
                    series("engram_dead_lettered_total", {**ingest, "stream": "embed"}, "0x2 2x3"),
                    # initialised at 0 and nothing dead: no alert
                    series("engram_dead_lettered_total", {**ingest, "stream": "episodes"}, "0x5"),
                    series(
                        "engram_http_server_errors_total", {**query, "route": "unmatched"}, "0x5"
                    ),
                    series("engram_http_server_errors_total", {**query, "route": "/v1/x"}, "_ 1x4"),
                    # replica r1 falls behind and stays there; r2 lags once, briefly
                    series("engram_db_replica_lag_seconds", {**query, "replica": "r1"}, "0 45x6"),
                    series("engram_db_replica_lag_seconds", {**query, "replica": "r2"}, "0 45 0x5"),
                    series(
                        "engram_db_replica_lag_bytes",
                        {**query, "replica": "r1"},
                        f"0 {300 * 2**20}x8",
                    ),
                    series("engram_db_replica_lag_bytes", {**query, "replica": "r2"}, "0x8"),
                    # one query process cannot reach its replica, the other can
                    series("engram_db_read_replica_up", query, "1 0x4"),
                    series("engram_db_read_replica_up", {**query, "instance": "q:2"}, "1x5"),
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "4m",
                        "alertname": "EngramDeadLetters",
                        "exp_alerts": [
                            _alert(
                                "EngramDeadLetters",
                                {"job": "engram-ingest", "stream": s},
                                f"engram-ingest dead-lettered {n} {s} entries in 15 min "
                                "(engram dead)",
                            )
                            for s, n in (("embed", 2), ("turns", 1))
                        ],
                    },
                    {
                        "eval_time": "3m",
                        "alertname": "EngramApiUnhandledErrors",
                        "exp_alerts": [
                            _alert(
                                "EngramApiUnhandledErrors",
                                {"job": "engram-query", "route": "/v1/x"},
                                "/v1/x answered 500 on an unhandled error (see the query "
                                "service's log)",
                            )
                        ],
                    },
                    {
                        "eval_time": "4m",
                        "alertname": "EngramReplicaLag",
                        "exp_alerts": [
                            _alert(
                                "EngramReplicaLag",
                                {"replica": "r1"},
                                "PostgreSQL replica r1 replays 45 s behind the primary",
                            )
                        ],
                    },
                    {
                        "eval_time": "7m",
                        "alertname": "EngramReplicaFarBehind",
                        "exp_alerts": [
                            _alert(
                                "EngramReplicaFarBehind",
                                {"replica": "r1"},
                                "PostgreSQL replica r1 is 300MiB of WAL behind the primary",
                            )
                        ],
                    },
                    {
                        "eval_time": "3m",
                        "alertname": "EngramReadReplicaDown",
                        "exp_alerts": [
                            _alert(
                                "EngramReadReplicaDown",
                                {"job": "engram-query", "instance": "q:1"},
                                "q:1 cannot read its replica; every read goes to the primary",
                            )
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "rules_test.yml"
    path.write_text(json.dumps(tests))  # JSON is YAML
    out = subprocess.run(
        [PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
