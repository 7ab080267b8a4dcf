"""Which vector index: exact scan vs HNSW on vector vs HNSW on a halfvec expression.

Synthetic clustered unit vectors (384 dims) spread over many users plus one small
user, the shape of the ``messages`` table. For each variant: build time, index
size, top-10 latency for one user's search (with pgvector 0.8 iterative scans),
recall@10 against the exact answer, and whether the small user still gets 10
rows (the DESIGN.md trap). Run: ``python -m bench.vector_index [rows]``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import asyncpg
import numpy as np
from pgvector.asyncpg import register_vector

from bench.common import stack

DIM = 384
K = 10
RESULTS = Path(__file__).parent / "results" / "vector_index.json"

QUERY = {
    "exact": "SELECT id FROM items WHERE user_id = $1 ORDER BY embedding <=> $2 LIMIT 10",
    "hnsw_vector": "SELECT id FROM items WHERE user_id = $1 ORDER BY embedding <=> $2 LIMIT 10",
    "hnsw_halfvec": f"""SELECT id FROM items WHERE user_id = $1
                        ORDER BY embedding::halfvec({DIM}) <=> $2::halfvec({DIM}) LIMIT 10""",
}
INDEX = {
    "exact": None,
    "hnsw_vector": "CREATE INDEX items_idx ON items USING hnsw (embedding vector_cosine_ops)",
    "hnsw_halfvec": f"""CREATE INDEX items_idx ON items
                        USING hnsw ((embedding::halfvec({DIM})) halfvec_cosine_ops)""",
}


def vectors(n: int, rng: np.random.Generator, centers: np.ndarray) -> np.ndarray:
    picks = centers[rng.integers(0, len(centers), n)]
    v = picks + 0.35 * rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


async def main(rows: int) -> None:
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((200, DIM)).astype(np.float32)
    users = 200
    with stack(redis=False) as (db_url, _, _):
        conn = await asyncpg.connect(db_url)
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        await register_vector(conn)
        await conn.execute(f"""CREATE TABLE items (id bigint PRIMARY KEY, user_id text NOT NULL,
                              embedding vector({DIM}))""")
        data = vectors(rows, rng, centers)
        big = int(rows * 0.4)
        owners = ["big"] * big + [f"u{i % users}" for i in range(rows - 50 - big)] + ["small"] * 50
        t0 = time.perf_counter()
        await conn.copy_records_to_table(
            "items",
            records=[(i, owners[i], data[i]) for i in range(rows)],
            columns=["id", "user_id", "embedding"],
        )
        await conn.execute("CREATE INDEX items_user_idx ON items (user_id)")
        await conn.execute("ANALYZE items")
        print(f"loaded {rows} rows in {time.perf_counter() - t0:.1f} s")
        queries = vectors(60, rng, centers)
        groups = {
            "spread": [f"u{i}" for i in range(0, users, 10)],
            "small": ["small"] * 10,
            "big": ["big"] * 20,
        }
        probe_users = [u for g in groups.values() for u in g]
        group_of = [g for g, us in groups.items() for _ in us]
        truth = {}
        for i, u in enumerate(probe_users):
            truth[i] = [r["id"] for r in await conn.fetch(QUERY["exact"], u, queries[i])]
        out: dict[str, dict[str, float]] = {}
        await conn.execute("SET maintenance_work_mem = '512MB'")
        for name, ddl in INDEX.items():
            await conn.execute("DROP INDEX IF EXISTS items_idx")
            build = 0.0
            if ddl:
                t0 = time.perf_counter()
                await conn.execute(ddl)
                build = time.perf_counter() - t0
            size = (
                await conn.fetchval("SELECT coalesce(pg_relation_size('items_idx'::regclass), 0)")
                if ddl
                else 0
            )
            await conn.execute("SET hnsw.ef_search = 40")
            await conn.execute("SET hnsw.iterative_scan = relaxed_order")
            per: dict[str, dict[str, list[float]]] = {
                g: {"lat": [], "recall": [], "short": []} for g in groups
            }
            for i, u in enumerate(probe_users):
                t0 = time.perf_counter()
                got = [r["id"] for r in await conn.fetch(QUERY[name], u, queries[i])]
                g = per[group_of[i]]
                g["lat"].append((time.perf_counter() - t0) * 1000)
                g["recall"].append(len(set(got) & set(truth[i])) / K)
                g["short"].append(float(len(got) < K))
            out[name] = {"build_s": round(build, 2), "index_mb": round(size / 2**20, 1)}
            for gname, g in per.items():
                plan = await conn.fetchval(
                    "EXPLAIN (FORMAT JSON) " + QUERY[name], groups[gname][0], queries[0]
                )
                out[name][gname] = {
                    "p50_ms": round(statistics.median(g["lat"]), 2),
                    "max_ms": round(max(g["lat"]), 2),
                    "recall_at_10": round(statistics.mean(g["recall"]), 3),
                    "searches_short_of_10": int(sum(g["short"])),
                    "plan_uses_hnsw": "items_idx" in json.dumps(plan),
                }
            print(name, json.dumps(out[name]))
        await conn.close()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps({"rows": rows, "users": users + 1, "dim": DIM, "variants": out}, indent=2) + "\n"
    )
    print(
        f"{'variant':<14}{'user':<8}{'build s':>9}{'MB':>8}{'p50 ms':>9}{'max ms':>9}"
        f"{'recall':>8}{'short':>7}{'hnsw':>6}"
    )
    for name, r in out.items():
        for gname in groups:
            g = r[gname]
            print(
                f"{name:<14}{gname:<8}{r['build_s']:>9}{r['index_mb']:>8}{g['p50_ms']:>9}"
                f"{g['max_ms']:>9}{g['recall_at_10']:>8}{g['searches_short_of_10']:>7}"
                f"{'yes' if g['plan_uses_hnsw'] else 'no':>6}"
            )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
