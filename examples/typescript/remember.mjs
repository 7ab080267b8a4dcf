// engram from TypeScript: remember something, find it, and build the context an agent
// would put in its prompt. ENGRAM_URL and ENGRAM_KEY name the service and a user's key.
//   node examples/typescript/remember.mjs
import { Engram, NotFound } from "../../clients/typescript/src/index.js";

const engram = new Engram(process.env.ENGRAM_URL ?? "http://127.0.0.1:8000", process.env.ENGRAM_KEY);

await engram.remember({ content: "Sam is allergic to peanuts and loves Thai food" });
const { results } = await engram.memory.search({ query: "peanuts", limit: 3 });
console.log("found:", results.map((r) => r.content_snippet));

const context = await engram.context({ message: "Where should we take Sam for dinner?", policy: "sections" });
console.log("context:", JSON.stringify(context).slice(0, 200));

// A thread's short-term state, with its lineage.
const first = await engram.checkpoints.save("dinner-plans", { state: { step: "ask" } });
const next = await engram.checkpoints.save("dinner-plans", { state: { step: "book" } });
const { lineage } = await engram.checkpoints.lineage("dinner-plans", next.checkpoint_id);
console.log("lineage:", lineage.map((c) => c.state.step).join(" <- "), `(root ${first.checkpoint_id})`);

try {
  await engram.memory.get("00000000-0000-0000-0000-000000000000");
} catch (e) {
  if (!(e instanceof NotFound)) throw e;
  console.log("missing memory:", e.status, e.code);
}
