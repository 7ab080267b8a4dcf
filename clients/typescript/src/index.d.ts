// Types of src/index.js, taken from the service's OpenAPI (src/openapi.d.ts, made by
// `npm run types` with openapi-typescript): a request body or an answer is the
// schema the service documents for that path and method.
import type { paths } from "./openapi.js";

export type { paths, components } from "./openapi.js";

type Json<T> = T extends { content: { "application/json": infer B } } ? B : never;
/** The JSON body an operation takes. */
export type BodyOf<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  requestBody?: infer R;
}
  ? Json<NonNullable<R>>
  : never;
/** The JSON answer of an operation's 200. */
export type AnswerOf<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  responses: { 200: infer R };
}
  ? Json<R>
  : unknown;
/** An operation's query parameters. */
export type QueryOf<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  parameters: { query?: infer Q };
}
  ? NonNullable<Q>
  : never;

type Op<P extends keyof paths, M extends keyof paths[P]> = (
  body: BodyOf<P, M>,
) => Promise<AnswerOf<P, M>>;

export class EngramError extends Error {
  constructor(detail: string, init?: { status?: number; code?: string; body?: unknown });
  status: number;
  code: string;
  detail: string;
  body: unknown;
}
export class ConnectionFailed extends EngramError {}
export class BadRequest extends EngramError {}
export class AuthenticationError extends EngramError {}
export class PermissionDenied extends EngramError {}
export class NotFound extends EngramError {}
export class PayloadTooLarge extends EngramError {}
export class ValidationFailed extends EngramError {}
export class RateLimited extends EngramError {}
export class Unavailable extends EngramError {}
export class ServerError extends EngramError {}

export const BY_STATUS: Record<number, typeof EngramError>;
export const RETRY_STATUSES: Set<number>;
export function errorFor(status: number, body: unknown): EngramError;

export class RetryPolicy {
  constructor(init?: { attempts?: number; backoffS?: number; maxBackoffS?: number });
  attempts: number;
  backoffS: number;
  maxBackoffS: number;
  delay(attempt: number, retryAfter: string | null): number;
}

export type Method = "GET" | "POST" | "PUT" | "DELETE";
export const ENDPOINTS: Record<string, [Method, keyof paths]>;

export interface EngramOptions {
  /** the user an admin key acts for */
  user?: string;
  timeoutS?: number;
  retry?: RetryPolicy;
  fetch?: typeof globalThis.fetch;
}

export class Engram {
  constructor(baseUrl: string, apiKey: string, options?: EngramOptions);
  retry: RetryPolicy;
  me(): Promise<AnswerOf<"/v1/me", "get">>;
  remember: Op<"/v1/remember", "post">;
  recall: Op<"/v1/recall", "post">;
  context: Op<"/v1/context", "post">;
  memory: {
    search: Op<"/v1/memory/search", "post">;
    add: Op<"/v1/memory/add", "post">;
    get(itemId: string): Promise<AnswerOf<"/v1/memory/items/{item_id}", "get">>;
    archive(itemId: string): Promise<AnswerOf<"/v1/memory/items/{item_id}/archive", "post">>;
    delete(itemId: string): Promise<AnswerOf<"/v1/memory/items/{item_id}", "delete">>;
    themes(): Promise<AnswerOf<"/v1/memory/themes", "get">>;
  };
  facts: {
    save: Op<"/v1/facts", "post">;
    search: Op<"/v1/facts/search", "post">;
    forget: Op<"/v1/facts/forget", "post">;
    list(params?: QueryOf<"/v1/facts", "get">): Promise<AnswerOf<"/v1/facts", "get">>;
  };
  episodes: {
    recall: Op<"/v1/episodes/search", "post">;
    list(params?: QueryOf<"/v1/episodes", "get">): Promise<AnswerOf<"/v1/episodes", "get">>;
    get(
      episodeId: string,
      params?: QueryOf<"/v1/episodes/{episode_id}", "get">,
    ): Promise<AnswerOf<"/v1/episodes/{episode_id}", "get">>;
  };
  messages: { search: Op<"/v1/messages/search", "post"> };
  people: {
    list(): Promise<AnswerOf<"/v1/people", "get">>;
    resolve: Op<"/v1/people", "post">;
  };
  tools: {
    list(params?: QueryOf<"/v1/tools", "get">): Promise<AnswerOf<"/v1/tools", "get">>;
    call: Op<"/v1/tools/call", "post">;
  };
  checkpoints: {
    save(
      threadId: string,
      body: BodyOf<"/v1/threads/{thread_id}/checkpoints", "post">,
    ): Promise<AnswerOf<"/v1/threads/{thread_id}/checkpoints", "post">>;
    put(
      threadId: string,
      checkpointId: string,
      body: BodyOf<"/v1/threads/{thread_id}/checkpoints/{checkpoint_id}", "put">,
    ): Promise<AnswerOf<"/v1/threads/{thread_id}/checkpoints/{checkpoint_id}", "put">>;
    latest(threadId: string): Promise<AnswerOf<"/v1/threads/{thread_id}/checkpoints/latest", "get">>;
    list(
      threadId: string,
      params?: QueryOf<"/v1/threads/{thread_id}/checkpoints", "get">,
    ): Promise<AnswerOf<"/v1/threads/{thread_id}/checkpoints", "get">>;
    lineage(
      threadId: string,
      checkpointId: string,
    ): Promise<AnswerOf<"/v1/threads/{thread_id}/checkpoints/{checkpoint_id}/lineage", "get">>;
    query: Op<"/v1/checkpoints/query", "post">;
    deleteThread(
      threadId: string,
    ): Promise<AnswerOf<"/v1/threads/{thread_id}/checkpoints", "delete">>;
    putWrites(
      threadId: string,
      checkpointId: string,
      body: BodyOf<"/v1/threads/{thread_id}/checkpoints/{checkpoint_id}/writes", "put">,
    ): Promise<AnswerOf<"/v1/threads/{thread_id}/checkpoints/{checkpoint_id}/writes", "put">>;
    copy(
      threadId: string,
      body: BodyOf<"/v1/threads/{thread_id}/checkpoints/copy", "post">,
    ): Promise<AnswerOf<"/v1/threads/{thread_id}/checkpoints/copy", "post">>;
    deleteMatching: Op<"/v1/checkpoints/delete", "post">;
    prune: Op<"/v1/checkpoints/prune", "post">;
  };
  /** LangGraph-style store: items by (namespace, key) that are engram memories. */
  store: {
    put(body: BodyOf<"/v1/store/items", "put">): Promise<AnswerOf<"/v1/store/items", "put">>;
    get: Op<"/v1/store/items/get", "post">;
    delete: Op<"/v1/store/items/delete", "post">;
    search: Op<"/v1/store/search", "post">;
    namespaces: Op<"/v1/store/namespaces", "post">;
  };
  /** Turns of the user's own chats, published to engram's pipeline. */
  turns: {
    publish: Op<"/v1/turns", "post">;
    list: Op<"/v1/turns/list", "post">;
    delete: Op<"/v1/turns/delete", "post">;
  };
  call(
    name: string,
    init?: { ids?: Record<string, string>; body?: unknown; params?: Record<string, unknown> },
  ): Promise<unknown>;
  request(method: Method, path: string, body?: unknown): Promise<unknown>;
}
