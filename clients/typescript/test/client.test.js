// The client against a running engram (ENGRAM_URL, ENGRAM_KEY: a user's key), and its
// retry policy against a scripted local HTTP server. tests/integrations/test_typescript.py
// starts the service and runs `node --test` here.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import {
  AuthenticationError,
  ConnectionFailed,
  ENDPOINTS,
  Engram,
  NotFound,
  RateLimited,
  RetryPolicy,
  ValidationFailed,
} from "../src/index.js";

const URL_ = process.env.ENGRAM_URL;
const KEY = process.env.ENGRAM_KEY;
const live = { skip: !URL_ || !KEY ? "ENGRAM_URL and ENGRAM_KEY name a running engram" : false };
const marker = `T${Math.random().toString(36).slice(2, 8)}`;
const fast = new RetryPolicy({ attempts: 3, backoffS: 0.01, maxBackoffS: 0.05 });

test("every endpoint the client calls is in the service's OpenAPI", live, async () => {
  const spec = await (await fetch(`${URL_}/openapi.json`)).json();
  for (const [name, [method, path]] of Object.entries(ENDPOINTS)) {
    assert.ok(spec.paths[path]?.[method.toLowerCase()], `${name}: ${method} ${path}`);
  }
});

test("src/openapi.d.ts is what openapi-typescript makes of the live /openapi.json", live, async () => {
  const out = join(await mkdtemp(join(tmpdir(), "engram-ts-")), "openapi.d.ts");
  const bin = new URL("../node_modules/.bin/openapi-typescript", import.meta.url).pathname;
  await promisify(execFile)(bin, [`${URL_}/openapi.json`, "--default-non-nullable", "false", "-o", out]);
  const committed = await readFile(new URL("../src/openapi.d.ts", import.meta.url), "utf8");
  assert.equal(await readFile(out, "utf8"), committed, "run `npm run types` against this engram");
});

test("memory: add, search, get, archive, delete; a missing item is NotFound", live, async () => {
  const client = new Engram(URL_, KEY);
  const added = await client.memory.add({ content: `${marker} collects stamps`, type: "fact" });
  const found = await client.memory.search({ query: "stamps" });
  assert.deepEqual(
    found.results.map((r) => r.id),
    [added.id],
  );
  assert.equal((await client.memory.get(added.id)).status, "active");
  await client.memory.archive(added.id);
  assert.equal((await client.memory.get(added.id)).status, "archived");
  await client.memory.delete(added.id);
  await assert.rejects(client.memory.get(added.id), (e) => e instanceof NotFound && e.status === 404);
});

test("remember, recall, context", live, async () => {
  const client = new Engram(URL_, KEY);
  await client.remember({ content: `${marker} drinks oolong tea every morning` });
  const recalled = await client.recall({ query: "oolong" });
  assert.ok(JSON.stringify(recalled).includes(marker));
  const context = await client.context({ message: "what tea do I drink?", policy: "sections" });
  assert.equal(context.policy, "sections");
});

test("checkpoints: save, lineage, latest, put with a parent, query, delete", live, async () => {
  const client = new Engram(URL_, KEY);
  const thread = `ts-${marker}`;
  const first = await client.checkpoints.save(thread, { state: { n: 1 } });
  const second = await client.checkpoints.save(thread, { state: { n: 2 } });
  assert.equal(second.parent_id, first.checkpoint_id);
  const lineage = await client.checkpoints.lineage(thread, second.checkpoint_id);
  assert.deepEqual(
    lineage.lineage.map((c) => c.state.n),
    [2, 1],
  );
  const forked = await client.checkpoints.put(thread, "fork", { state: { n: 3 }, parent_id: first.checkpoint_id });
  assert.equal(forked.parent_id, first.checkpoint_id);
  assert.equal((await client.checkpoints.latest(thread)).checkpoint_id, "fork");
  await client.checkpoints.putWrites(thread, "fork", { task_id: "t1", writes: [{ idx: 0, channel: "c", value: 7 }] });
  const queried = await client.checkpoints.query({ thread_id: thread, contains: { n: 2 } });
  const withWrites = await client.checkpoints.query({ thread_id: thread, checkpoint_id: "fork", writes: true });
  assert.deepEqual(
    withWrites.checkpoints[0].writes.map((w) => [w.task_id, w.channel, w.value]),
    [["t1", "c", 7]],
  );
  assert.deepEqual(
    queried.checkpoints.map((c) => c.checkpoint_id),
    [second.checkpoint_id],
  );
  assert.equal((await client.checkpoints.deleteThread(thread)).deleted, 3);
});

test("store: put, get, search by prefix and filter, namespaces, delete", live, async () => {
  const client = new Engram(URL_, KEY);
  await client.store.put({ namespace: ["ts", marker], key: "k1", value: { text: "likes jasmine tea", n: 1 } });
  await client.store.put({ namespace: ["ts", marker], key: "k2", value: { text: "plays chess", n: 2 } });
  assert.equal((await client.store.get({ namespace: ["ts", marker], key: "k1" })).value.n, 1);
  const found = await client.store.search({ namespace_prefix: ["ts"], query: "jasmine", filter: { n: { $lt: 5 } } });
  assert.deepEqual(
    found.items.map((i) => i.key),
    ["k1", "k2"],
  );
  assert.ok(found.items[0].score > 0 && found.items[1].score === null);
  assert.deepEqual((await client.store.namespaces({ prefix: ["ts"] })).namespaces, [["ts", marker]]);
  assert.equal((await client.store.delete({ namespace: ["ts", marker], key: "k1" })).deleted, 1);
  await assert.rejects(client.store.get({ namespace: ["ts", marker], key: "k1" }), NotFound);
});

test("errors: a bad field is ValidationFailed naming it; a wrong key is AuthenticationError", live, async () => {
  const client = new Engram(URL_, KEY);
  await assert.rejects(client.memory.search({ query: "x", limit: 0 }), (e) => {
    assert.ok(e instanceof ValidationFailed);
    assert.match(e.detail, /limit/);
    return true;
  });
  await assert.rejects(new Engram(URL_, "eng_wrong").me(), AuthenticationError);
});

/** A local server answering with `script` in turn (then 200 {"ok": true}). */
async function scripted(script) {
  const seen = [];
  const server = createServer((req, res) => {
    seen.push(req.headers);
    const [status, headers] = script.shift() ?? [200, {}];
    res.writeHead(status, { "Content-Type": "application/json", ...headers });
    res.end(JSON.stringify(status === 200 ? { ok: true } : { error: "busy", detail: "try later" }));
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, seen, close: () => server.close() };
}

test("503 and 429 are retried (Retry-After honoured), then answered", async () => {
  const s = await scripted([
    [503, { "Retry-After": "0" }],
    [429, {}],
  ]);
  try {
    const client = new Engram(s.url, "eng_k", { retry: fast, user: "alice" });
    assert.deepEqual(await client.me(), { ok: true });
    assert.equal(s.seen.length, 3);
    assert.equal(s.seen[0]["x-engram-user"], "alice");
    assert.equal(s.seen[0].authorization, "Bearer eng_k");
  } finally {
    s.close();
  }
});

test("429 on every attempt is RateLimited after the policy's attempts", async () => {
  const s = await scripted([
    [429, {}],
    [429, {}],
    [429, {}],
  ]);
  try {
    const client = new Engram(s.url, "eng_k", { retry: fast });
    await assert.rejects(client.me(), (e) => e instanceof RateLimited && e.code === "busy");
    assert.equal(s.seen.length, 3);
  } finally {
    s.close();
  }
});

test("no server is ConnectionFailed after the retries", async () => {
  const s = await scripted([]);
  s.close();
  await new Promise((resolve) => setTimeout(resolve, 50));
  const client = new Engram(s.url, "eng_k", { retry: fast });
  await assert.rejects(client.me(), ConnectionFailed);
});

test("the retry delay doubles, is capped, has jitter, and honours Retry-After", () => {
  const p = new RetryPolicy({ backoffS: 0.5, maxBackoffS: 10 });
  for (let i = 0; i < 50; i++) {
    const d = p.delay(2, null);
    assert.ok(d >= 1 && d <= 2, String(d));
    assert.ok(p.delay(10, null) <= 10);
  }
  assert.equal(p.delay(0, "3"), 3);
  assert.equal(p.delay(0, "60"), 10);
});
