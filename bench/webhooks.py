"""bench/webhooks: from a change's commit to its webhook's arrival (issue 33.1's target:
p95 <= 1 s with the receiver up).

A query service (in this process, with its sender) and an HTTP receiver on loopback;
N memories are stored through the one writer, one transaction each, at a steady rate;
the receiver notes when each event arrives, against the event's own time (taken in
the transaction, just before its commit).

    python -m bench.webhooks [--n 500] [--rate 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import datetime

import httpx

from bench.common import bench_stack, percentiles, table, write_result
from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.apikeys import create_key
from shared.db import create_pool
from shared.memory.writer import NewItem, insert_items
from tests.query.test_webhooks import Receiver


async def run(settings: QuerySettings, n: int, rate: float) -> dict[str, object]:
    rx = Receiver()
    await rx.start()
    app = create_app(settings)
    pool = await create_pool(settings.require_database_url(), max_size=2)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://b") as c:
                _, secret = await create_key(pool, user_id="hooked")
                r = await c.post(
                    "/v1/webhooks",
                    json={"url": rx.url, "events": ["memory.learned"]},
                    headers={"Authorization": f"Bearer {secret}"},
                )
                r.raise_for_status()
                for i in range(n):
                    async with pool.acquire() as conn:
                        await insert_items(
                            conn, "hooked", [NewItem(type="fact", content=f"fact {i}")], actor="b"
                        )
                    await asyncio.sleep(1 / rate)
                deadline = time.monotonic() + 60
                while len(rx.delivered()) < n and time.monotonic() < deadline:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
    finally:
        await pool.close()
        await rx.stop()
    lags = []
    for _headers, body, at in rx.received:
        sent = datetime.fromisoformat(json.loads(body)["created_at"]).timestamp()
        lags.append(at - sent)
    return {"n": n, "rate": rate, "delivered": len(rx.delivered()), "lag": percentiles(lags)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--rate", type=float, default=50.0, help="changes per second")
    args = parser.parse_args()
    with bench_stack("webhooks") as common:
        settings = QuerySettings(
            **{**common.model_dump(), "webhook_endpoint_allow": "127.0.0.0/8", "warm_up": False}
        )
        out = asyncio.run(run(settings, args.n, args.rate))
    lag = out["lag"]
    assert isinstance(lag, dict)
    print(
        table(
            [(str(out["n"]), str(out["delivered"]), *(f"{lag[k]:.0f}" for k in
              ("p50_ms", "p95_ms", "p99_ms")))],
            ("changes", "delivered", "p50 ms", "p95 ms", "p99 ms"),
        )
    )  # fmt: skip
    print(f"written to {write_result('webhooks', out)}")


if __name__ == "__main__":
    main()
