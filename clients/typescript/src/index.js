// engram's TypeScript client: ESM, nothing but `fetch`. The same errors and retry
// policy as the Python client (engram_client): 429 and 503 and connection failures
// are retried with exponential backoff and jitter, honouring Retry-After; any other
// failure raises an EngramError subclass named for its status.

/** A call that did not succeed. `status` is the HTTP status (0: no answer). */
export class EngramError extends Error {
  constructor(detail, { status = 0, code = "", body = undefined } = {}) {
    super(detail ? `${status || "error"}: ${detail}` : code);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.body = body;
  }
}
/** The service could not be reached (or did not answer in time). */
export class ConnectionFailed extends EngramError {}
/** 400: the request was understood but not accepted. */
export class BadRequest extends EngramError {}
/** 401: no API key, or an unknown or revoked one. */
export class AuthenticationError extends EngramError {}
/** 403: the key may not do this. */
export class PermissionDenied extends EngramError {}
/** 404: no such item for this user. */
export class NotFound extends EngramError {}
/** 413: the request body is over the service's limit. */
export class PayloadTooLarge extends EngramError {}
/** 422: a field is missing or invalid; `detail` names it. */
export class ValidationFailed extends EngramError {}
/** 429: too many requests (retried with backoff before this is thrown). */
export class RateLimited extends EngramError {}
/** 503: a dependency is down (retried with backoff before this is thrown). */
export class Unavailable extends EngramError {}
/** Any other 5xx. */
export class ServerError extends EngramError {}

export const BY_STATUS = {
  400: BadRequest,
  401: AuthenticationError,
  403: PermissionDenied,
  404: NotFound,
  413: PayloadTooLarge,
  422: ValidationFailed,
  429: RateLimited,
  503: Unavailable,
};

/** The error for an answer `{"error": code, "detail": message}` with this status. */
export function errorFor(status, body) {
  let code = "";
  let detail = "";
  if (body && typeof body === "object" && !Array.isArray(body)) {
    code = String(body.error ?? "");
    detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail ?? "");
  } else if (body) {
    detail = String(body).slice(0, 500);
  }
  const Cls = BY_STATUS[status] ?? (status >= 500 ? ServerError : EngramError);
  return new Cls(detail, { status, code, body });
}

export const RETRY_STATUSES = new Set([429, 503]);

/** How often and how patiently to retry 429/503 and connection failures. */
export class RetryPolicy {
  constructor({ attempts = 4, backoffS = 0.5, maxBackoffS = 10 } = {}) {
    this.attempts = attempts;
    this.backoffS = backoffS;
    this.maxBackoffS = maxBackoffS;
  }

  /** Seconds to wait before attempt `attempt + 1`. */
  delay(attempt, retryAfter) {
    if (retryAfter) {
      const s = Number(retryAfter);
      if (Number.isFinite(s)) return Math.min(s, this.maxBackoffS);
    }
    const base = Math.min(this.backoffS * 2 ** attempt, this.maxBackoffS);
    return base * (0.5 + Math.random() / 2);
  }
}

// Every endpoint the client calls, once: [method, path template]. A test checks each
// against the service's /openapi.json; src/index.d.ts types them from it.
export const ENDPOINTS = {
  me: ["GET", "/v1/me"],
  "memory.search": ["POST", "/v1/memory/search"],
  "memory.add": ["POST", "/v1/memory/add"],
  "memory.get": ["GET", "/v1/memory/items/{item_id}"],
  "memory.archive": ["POST", "/v1/memory/items/{item_id}/archive"],
  "memory.delete": ["DELETE", "/v1/memory/items/{item_id}"],
  "memory.themes": ["GET", "/v1/memory/themes"],
  remember: ["POST", "/v1/remember"],
  recall: ["POST", "/v1/recall"],
  context: ["POST", "/v1/context"],
  "facts.save": ["POST", "/v1/facts"],
  "facts.search": ["POST", "/v1/facts/search"],
  "facts.forget": ["POST", "/v1/facts/forget"],
  "facts.list": ["GET", "/v1/facts"],
  "episodes.recall": ["POST", "/v1/episodes/search"],
  "episodes.list": ["GET", "/v1/episodes"],
  "episodes.get": ["GET", "/v1/episodes/{episode_id}"],
  "messages.search": ["POST", "/v1/messages/search"],
  "people.list": ["GET", "/v1/people"],
  "people.resolve": ["POST", "/v1/people"],
  "tools.list": ["GET", "/v1/tools"],
  "tools.call": ["POST", "/v1/tools/call"],
  "checkpoints.save": ["POST", "/v1/threads/{thread_id}/checkpoints"],
  "checkpoints.put": ["PUT", "/v1/threads/{thread_id}/checkpoints/{checkpoint_id}"],
  "checkpoints.latest": ["GET", "/v1/threads/{thread_id}/checkpoints/latest"],
  "checkpoints.list": ["GET", "/v1/threads/{thread_id}/checkpoints"],
  "checkpoints.lineage": ["GET", "/v1/threads/{thread_id}/checkpoints/{checkpoint_id}/lineage"],
  "checkpoints.query": ["POST", "/v1/checkpoints/query"],
  "checkpoints.deleteThread": ["DELETE", "/v1/threads/{thread_id}/checkpoints"],
  "checkpoints.putWrites": ["PUT", "/v1/threads/{thread_id}/checkpoints/{checkpoint_id}/writes"],
  "checkpoints.copy": ["POST", "/v1/threads/{thread_id}/checkpoints/copy"],
  "checkpoints.deleteMatching": ["POST", "/v1/checkpoints/delete"],
  "checkpoints.prune": ["POST", "/v1/checkpoints/prune"],
  "store.put": ["PUT", "/v1/store/items"],
  "store.get": ["POST", "/v1/store/items/get"],
  "store.delete": ["POST", "/v1/store/items/delete"],
  "store.search": ["POST", "/v1/store/search"],
  "store.namespaces": ["POST", "/v1/store/namespaces"],
  "turns.publish": ["POST", "/v1/turns"],
  "turns.list": ["POST", "/v1/turns/list"],
  "turns.delete": ["POST", "/v1/turns/delete"],
};

const sleep = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));

function fill(template, ids) {
  return template.replace(/\{(\w+)\}/g, (_, name) => encodeURIComponent(String(ids[name])));
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params ?? {})) {
    if (v !== undefined && v !== null) q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

/**
 * `new Engram("http://127.0.0.1:8000", "eng_...")`; an admin key acts for `user`.
 * Every method returns the endpoint's JSON answer.
 */
export class Engram {
  constructor(baseUrl, apiKey, { user, timeoutS = 30, retry, fetch: fetchImpl } = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.headers = { Authorization: `Bearer ${apiKey}`, "User-Agent": "engram-client-ts/0.1" };
    if (user) this.headers["X-Engram-User"] = user;
    this.timeoutS = timeoutS;
    this.retry = retry ?? new RetryPolicy();
    this.fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);

    const call = (name) => (ids, body, params) => this.call(name, { ids, body, params });
    this.memory = {
      search: (body) => call("memory.search")({}, body),
      add: (body) => call("memory.add")({}, body),
      get: (itemId) => call("memory.get")({ item_id: itemId }),
      archive: (itemId) => call("memory.archive")({ item_id: itemId }),
      delete: (itemId) => call("memory.delete")({ item_id: itemId }),
      themes: () => call("memory.themes")({}),
    };
    this.facts = {
      save: (body) => call("facts.save")({}, body),
      search: (body) => call("facts.search")({}, body),
      forget: (body) => call("facts.forget")({}, body),
      list: (params) => call("facts.list")({}, undefined, params),
    };
    this.episodes = {
      recall: (body) => call("episodes.recall")({}, body),
      list: (params) => call("episodes.list")({}, undefined, params),
      get: (episodeId, params) => call("episodes.get")({ episode_id: episodeId }, undefined, params),
    };
    this.messages = { search: (body) => call("messages.search")({}, body) };
    this.people = {
      list: () => call("people.list")({}),
      resolve: (body) => call("people.resolve")({}, body),
    };
    this.tools = {
      list: (params) => call("tools.list")({}, undefined, params),
      call: (body) => call("tools.call")({}, body),
    };
    this.checkpoints = {
      save: (threadId, body) => call("checkpoints.save")({ thread_id: threadId }, body),
      put: (threadId, checkpointId, body) =>
        call("checkpoints.put")({ thread_id: threadId, checkpoint_id: checkpointId }, body),
      latest: (threadId) => call("checkpoints.latest")({ thread_id: threadId }),
      list: (threadId, params) => call("checkpoints.list")({ thread_id: threadId }, undefined, params),
      lineage: (threadId, checkpointId) =>
        call("checkpoints.lineage")({ thread_id: threadId, checkpoint_id: checkpointId }),
      query: (body) => call("checkpoints.query")({}, body),
      deleteThread: (threadId) => call("checkpoints.deleteThread")({ thread_id: threadId }),
      putWrites: (threadId, checkpointId, body) =>
        call("checkpoints.putWrites")({ thread_id: threadId, checkpoint_id: checkpointId }, body),
      copy: (threadId, body) => call("checkpoints.copy")({ thread_id: threadId }, body),
      deleteMatching: (body) => call("checkpoints.deleteMatching")({}, body),
      prune: (body) => call("checkpoints.prune")({}, body),
    };
    this.store = {
      put: (body) => call("store.put")({}, body),
      get: (body) => call("store.get")({}, body),
      delete: (body) => call("store.delete")({}, body),
      search: (body) => call("store.search")({}, body),
      namespaces: (body) => call("store.namespaces")({}, body),
    };
    this.turns = {
      publish: (body) => call("turns.publish")({}, body),
      list: (body) => call("turns.list")({}, body),
      delete: (body) => call("turns.delete")({}, body),
    };
  }

  me() {
    return this.call("me", {});
  }

  remember(body) {
    return this.call("remember", { body });
  }

  recall(body) {
    return this.call("recall", { body });
  }

  context(body) {
    return this.call("context", { body });
  }

  /** One endpoint of ENDPOINTS by name, with its path ids, JSON body and query. */
  call(name, { ids = {}, body, params } = {}) {
    const [method, template] = ENDPOINTS[name];
    return this.request(method, fill(template, ids) + query(params), body);
  }

  /** Any path: retried like every call; the answer's JSON, or an EngramError. */
  async request(method, path, body) {
    const init = { method, headers: { ...this.headers } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    for (let attempt = 0; attempt < this.retry.attempts; attempt++) {
      const last = attempt === this.retry.attempts - 1;
      let response;
      try {
        response = await this.fetch(this.baseUrl + path, {
          ...init,
          signal: AbortSignal.timeout(this.timeoutS * 1000),
        });
      } catch (exc) {
        if (last) throw new ConnectionFailed(`${exc?.name ?? "Error"}: ${exc?.message ?? exc}`);
        await sleep(this.retry.delay(attempt, null));
        continue;
      }
      if (RETRY_STATUSES.has(response.status) && !last) {
        await response.body?.cancel();
        await sleep(this.retry.delay(attempt, response.headers.get("retry-after")));
        continue;
      }
      const text = await response.text();
      let answer = text;
      try {
        answer = text ? JSON.parse(text) : null;
      } catch {
        // not JSON: keep the text
      }
      if (response.ok) return answer;
      throw errorFor(response.status, answer);
    }
    throw new EngramError("no attempts configured");
  }
}
