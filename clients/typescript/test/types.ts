// Compiled (not run) by `npm run typecheck`: the client's types follow the service's
// OpenAPI, so a renamed field or a removed endpoint fails here.
import { Engram, NotFound, type AnswerOf } from "../src/index.js";

export async function typed(client: Engram): Promise<string[]> {
  const added = await client.memory.add({ content: "Prefers tea", type: "preference" });
  const found: AnswerOf<"/v1/memory/search", "post"> = await client.memory.search({
    query: "tea",
    limit: 5,
  });
  const saved = await client.checkpoints.save("thread-1", { state: { step: 1 } });
  const lineage = await client.checkpoints.lineage("thread-1", saved.checkpoint_id);
  const context = await client.context({ message: "what do I drink?", policy: "auto" });
  // @ts-expect-error: limit is a number
  await client.memory.search({ query: "tea", limit: "5" });
  try {
    await client.memory.get(added.id);
  } catch (e) {
    if (e instanceof NotFound) return [];
  }
  return [...found.results.map((r) => r.id), ...lineage.lineage.map((c) => c.checkpoint_id), context.policy];
}
