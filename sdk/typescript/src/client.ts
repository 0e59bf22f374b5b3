// Airlock: the orchestrator's client of the control plane, and the sandbox's calls, on fetch.
//
// Every method names the api/openapi.yaml operations it implements with an `@operationId` tag;
// TestClientsCoverEveryOperation (internal/httpapi/spec_clients_test.go) reads them.

import { AirlockError, WaitTimeout, errorFor } from "./errors.js";
import { hostOf, sessionEnv } from "./env.js";

export const DEFAULT_ADDR = "http://127.0.0.1:8701";
export const DEFAULT_SANDBOX_ADDR = "http://127.0.0.1:8700";
const USER_AGENT = "airlock-typescript/0.1.0";

/** An action in one of these states will not change again. */
export const FINAL_STATUSES: ReadonlySet<string> = new Set(["denied", "expired", "executed", "failed"]);

const ACTION_LOCATION = /^\/v1\/actions\/([A-Za-z0-9_-]+)$/;

export type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };
export type JSONObject = { [key: string]: any };
type Query = Record<string, string | number | boolean | Date | undefined | null>;

export interface AirlockOptions {
  /** The control plane; default $AIRLOCK_ADDR, else http://127.0.0.1:8701. */
  addr?: string;
  /** An API token; default $AIRLOCK_TOKEN. */
  token?: string;
  /** The sandbox plane; default $AIRLOCK_SANDBOX_ADDR, else http://127.0.0.1:8700. */
  sandboxAddr?: string;
  /** A fetch of yours (a proxy agent, a test double); default the global fetch. */
  fetch?: typeof globalThis.fetch;
  /** Each request's timeout (AbortSignal.timeout), in milliseconds; default 30000. */
  timeoutMs?: number;
  /** Where the defaults are read; default process.env. */
  env?: Record<string, string | undefined>;
}

export interface RequestOptions {
  /** A JSON body (sent with Content-Type: application/json). */
  json?: unknown;
  /** A raw body. */
  body?: RequestInit["body"];
  headers?: Record<string, string>;
  query?: Query;
  /** Seconds (≤ 60) to hold a gated call for the decision (Prefer: wait=N). */
  wait?: number;
  signal?: AbortSignal;
  timeoutMs?: number;
}

function normalize(a: string): string {
  a = a.trim();
  if (!a.includes("://")) a = "http://" + a;
  return a.replace(/\/+$/, "");
}

function timeText(t: string | Date): string {
  return t instanceof Date ? t.toISOString() : t;
}

function withQuery(url: string, q?: Query): string {
  if (!q) return url;
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined && v !== null) p.set(k, v instanceof Date ? v.toISOString() : String(v));
  const s = p.toString();
  return s ? `${url}?${s}` : url;
}

function compact<T extends Record<string, unknown>>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

async function raiseFor(r: Response): Promise<Response> {
  if (r.status >= 400) throw errorFor(r.status, r.headers, await r.text());
  return r;
}

async function readJSON(r: Response): Promise<any> {
  await raiseFor(r);
  const text = await r.text();
  return r.status === 204 || !text ? null : JSON.parse(text);
}

async function readItems(r: Response): Promise<any[]> {
  return ((await readJSON(r)) ?? {}).items ?? [];
}

interface Call {
  method: string;
  url: string;
  headers?: Record<string, string>;
  json?: unknown;
  body?: RequestInit["body"];
  signal?: AbortSignal;
  timeoutMs?: number | null; // null: no timeout (streams)
}

/** A page of sessions; `next` is the cursor of the following page (undefined at the end). */
export interface Page {
  items: Session[];
  next?: string;
}

export class Airlock {
  readonly addr: string;
  readonly token: string;
  readonly sandboxAddr: string;
  readonly sessions: Sessions;
  readonly grants: Grants;
  readonly tokens: Tokens;
  readonly approvals: Approvals;
  readonly killswitch: Killswitch;
  readonly audit: Audit;
  readonly #fetch: typeof globalThis.fetch;
  readonly #timeoutMs: number;

  constructor(opts: AirlockOptions = {}) {
    const env = opts.env ?? process.env;
    this.addr = normalize(opts.addr || env.AIRLOCK_ADDR || DEFAULT_ADDR);
    this.token = opts.token ?? env.AIRLOCK_TOKEN ?? "";
    this.sandboxAddr = normalize(opts.sandboxAddr || env.AIRLOCK_SANDBOX_ADDR || DEFAULT_SANDBOX_ADDR);
    this.#fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.#timeoutMs = opts.timeoutMs ?? 30_000;
    this.sessions = new Sessions(this);
    this.grants = new Grants(this);
    this.tokens = new Tokens(this);
    this.approvals = new Approvals(this);
    this.killswitch = new Killswitch(this);
    this.audit = new Audit(this);
  }

  /** @internal Sends one request with its timeout and the caller's signal. */
  async send(c: Call): Promise<Response> {
    const headers: Record<string, string> = { "User-Agent": USER_AGENT, ...(c.headers ?? {}) };
    let body = c.body;
    if (c.json !== undefined) {
      body = JSON.stringify(c.json);
      headers["Content-Type"] = "application/json";
    }
    const signals: AbortSignal[] = [];
    const ms = c.timeoutMs === undefined ? this.#timeoutMs : c.timeoutMs;
    if (ms !== null) signals.push(AbortSignal.timeout(ms));
    if (c.signal) signals.push(c.signal);
    const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
    return this.#fetch(c.url, { method: c.method, headers, body, signal });
  }

  /** @internal A control-plane request with the API token. */
  control(method: string, path: string, rest: Omit<Call, "method" | "url"> = {}): Promise<Response> {
    const headers: Record<string, string> = { ...(rest.headers ?? {}) };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    return this.send({ ...rest, method, url: this.addr + path, headers });
  }

  /** A Session for a sandbox that holds only its token (for `request`; `env` needs a session answer). */
  attach(token: string, sessionId = ""): Session {
    return new Session({ id: sessionId, token }, this);
  }

  /**
   * GET /healthz on the control plane, or the sandbox plane with plane "sandbox".
   * @operationId getHealth
   */
  async health(plane: "control" | "sandbox" = "control"): Promise<JSONObject> {
    return readJSON(await this.send({ method: "GET", url: (plane === "sandbox" ? this.sandboxAddr : this.addr) + "/healthz" }));
  }

  /**
   * GET /readyz: {status: "ready" | "not_ready", checks}; a 503 is returned, not thrown.
   * @operationId getReadiness
   */
  async ready(): Promise<JSONObject> {
    const r = await this.control("GET", "/readyz");
    if (r.status === 503 && !r.headers.has("x-airlock-code")) return (await r.json()) as JSONObject;
    return readJSON(r);
  }

  /**
   * The Prometheus text of /metrics.
   * @operationId getMetrics
   */
  async metrics(): Promise<string> {
    return (await raiseFor(await this.control("GET", "/metrics"))).text();
  }

  /**
   * Go's profiler (`debug: {pprof: true}`, admin): profile("heap"), profile("profile", {seconds: 5}).
   * @operationId getProfile
   */
  async profile(path: string, query?: Query): Promise<Uint8Array> {
    const r = await raiseFor(await this.control("GET", withQuery("/debug/pprof/" + path.replace(/^\/+/, ""), query), { timeoutMs: null }));
    return new Uint8Array(await r.arrayBuffer());
  }
}

/** A session answer (`data`, as api/openapi.yaml's Session) and the sandbox's side of it. */
export class Session {
  /** Only known from the creation answer (or given to `Airlock.attach`). */
  readonly token?: string;
  constructor(readonly data: JSONObject, readonly client: Airlock, token?: string) {
    this.token = data.token || token;
  }

  get id(): string {
    return this.data.id;
  }

  get status(): string | undefined {
    return this.data.status;
  }

  /**
   * The sandbox's call through the REST door (`/v1/proxy/{upstream}{path}` on the sandbox plane).
   * Resolves to the upstream's Response (whatever its status), or an Action when the call waits for a
   * human (202); rejects with the problem's class when the broker refused it (X-Airlock-Code).
   * @operationId proxyRootGet proxyRootHead proxyRootOptions proxyRootPost proxyRootPut proxyRootPatch proxyRootDelete
   * @operationId proxyGet proxyHead proxyOptions proxyPost proxyPut proxyPatch proxyDelete
   */
  async request(upstream: string, method: string, path = "", opts: RequestOptions = {}): Promise<Response | Action> {
    if (!this.token) throw new AirlockError("the session token is unknown (it is shown only at creation; give it to attach())");
    if (path && !path.startsWith("/")) path = "/" + path;
    const headers: Record<string, string> = { ...(opts.headers ?? {}), Authorization: `Bearer ${this.token}` };
    let timeoutMs = opts.timeoutMs;
    if (opts.wait) {
      headers.Prefer = `wait=${Math.floor(opts.wait)}`;
      timeoutMs = Math.max(timeoutMs ?? 0, (opts.wait + 30) * 1000);
    }
    const url = withQuery(`${this.client.sandboxAddr}/v1/proxy/${encodeURIComponent(upstream)}${path}`, opts.query);
    const r = await this.client.send({ method: method.toUpperCase(), url, headers, json: opts.json, body: opts.body, signal: opts.signal, timeoutMs });
    return this.answer(r);
  }

  /** @internal */
  async answer(r: Response): Promise<Response | Action> {
    if (r.headers.has("x-airlock-code")) throw errorFor(r.status, r.headers, await r.text());
    const m = ACTION_LOCATION.exec(r.headers.get("location") ?? "");
    // The broker's pending answer carries X-Airlock-Action-Id; an upstream's own 202 never does.
    if (r.status === 202 && m && r.headers.get("x-airlock-action-id") === m[1]) {
      const text = await r.clone().text();
      try {
        const data = JSON.parse(text);
        if (data && data.id === m[1]) return new Action(data, this);
      } catch {
        // the upstream's own 202
      }
    }
    return r;
  }

  /**
   * What `broker session env ID --format env --ca-path CA_FILE` prints, as an object (order kept).
   * `caFile` is where the sandbox finds the session CA (write `caPem()` there).
   */
  env(caFile: string, opts: { token?: string } = {}): Record<string, string> {
    return sessionEnv(this.data, { caFile, token: opts.token || this.token, noProxy: [hostOf(this.client.addr)] });
  }

  /** The session CA certificate, PEM (GET /v1/sessions/{id}/ca.pem). */
  caPem(): Promise<string> {
    return this.client.sessions.caPem(this.id);
  }

  /**
   * The environment with which the stock AWS SDK or CLI calls the AWS door (`/v1/aws/{upstream}`):
   * the AWS SDK signs each request (SigV4) with the session's aws_credentials, which only the creation
   * answer of a session with a grant on an aws upstream holds.
   * @operationId awsRootGet awsRootHead awsRootOptions awsRootPost awsRootPut awsRootPatch awsRootDelete
   * @operationId awsGet awsHead awsOptions awsPost awsPut awsPatch awsDelete
   */
  /**
   * What a stock MCP client needs to call the MCP door (`/v1/mcp/{upstream}`) for an upstream of
   * type mcp: the Streamable HTTP endpoint and the header carrying the session token (the shape of
   * an `mcpServers` entry; the client speaks MCP itself, see docs/mcp.md).
   * @operationId mcpPost mcpGet mcpDelete
   */
  mcpServer(upstream: string): { url: string; headers: Record<string, string> } {
    if (!this.token) throw new AirlockError("the session token is unknown (it is shown only at creation; give it to attach())");
    return { url: `${this.client.sandboxAddr}/v1/mcp/${encodeURIComponent(upstream)}`, headers: { Authorization: `Bearer ${this.token}` } };
  }

  awsEnv(upstream: string, region = "us-east-1"): Record<string, string> {
    const c = this.data.aws_credentials;
    if (!c) throw new AirlockError("the session answer has no aws_credentials (only the creation answer of a session with an aws grant)");
    return {
      AWS_ENDPOINT_URL: `${this.client.sandboxAddr}/v1/aws/${encodeURIComponent(upstream)}`,
      AWS_ACCESS_KEY_ID: c.access_key_id, AWS_SECRET_ACCESS_KEY: c.secret_access_key,
      AWS_REGION: region, AWS_DEFAULT_REGION: region,
    };
  }

  /** Kills the session (sessions.revoke). */
  revoke(): Promise<Session> {
    return this.client.sessions.revoke(this.id);
  }
}

/** A gated call waiting for, or past, a human decision (`data` as api/openapi.yaml's ActionStatus). */
export class Action {
  constructor(public data: JSONObject, readonly session: Session) {}

  get id(): string {
    return this.data.id;
  }

  get status(): string {
    return this.data.status;
  }

  get done(): boolean {
    return FINAL_STATUSES.has(this.status);
  }

  #get(path: string, wait?: number): Promise<Response> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.session.token ?? ""}` };
    let timeoutMs: number | undefined;
    if (wait) {
      headers.Prefer = `wait=${wait}`;
      timeoutMs = (wait + 30) * 1000;
    }
    const url = `${this.session.client.sandboxAddr}/v1/actions/${encodeURIComponent(this.id)}${path}`;
    return this.session.client.send({ method: "GET", url, headers, timeoutMs });
  }

  /**
   * Reads the action's state again; `wait` (seconds, ≤ 60) long-polls with Prefer: wait=N.
   * @operationId getAction
   */
  async refresh(wait?: number): Promise<Action> {
    this.data = await readJSON(await this.#get("", wait));
    return this;
  }

  /**
   * Waits (Prefer: wait, waking on the decision) until the action is final (executed, denied, expired,
   * failed) and resolves to it; rejects with WaitTimeout when `timeoutSeconds` pass first.
   */
  async wait(timeoutSeconds = 60): Promise<Action> {
    const deadline = performance.now() + timeoutSeconds * 1000;
    while (!this.done) {
      const left = (deadline - performance.now()) / 1000;
      if (left <= 0) throw new WaitTimeout(this);
      await this.refresh(Math.max(1, Math.min(60, Math.ceil(left))));
    }
    return this;
  }

  /**
   * The executed upstream answer; a broker refusal rejects (409 Conflict: not executed yet).
   * @operationId getActionResult
   */
  async result(): Promise<Response> {
    return (await this.session.answer(await this.#get("/result"))) as Response;
  }
}

class Resource {
  constructor(protected readonly c: Airlock) {}
}

const seg = encodeURIComponent;

export class Sessions extends Resource {
  /**
   * Creates a session from the JSON shape of POST /v1/sessions; the answer holds its token.
   * @operationId createSession
   */
  async create(request: JSONObject): Promise<Session> {
    return new Session(await readJSON(await this.c.control("POST", "/v1/sessions", { json: request })), this.c);
  }

  /**
   * A page of sessions in creation order.
   * @operationId listSessions
   */
  async list(opts: { cursor?: string; limit?: number } = {}): Promise<Page> {
    const d = (await readJSON(await this.c.control("GET", withQuery("/v1/sessions", opts)))) ?? {};
    return { items: (d.items ?? []).map((s: JSONObject) => new Session(s, this.c)), next: d.next || undefined };
  }

  /**
   * A session (its token is not in the answer; `token` attaches a known one).
   * @operationId getSession
   */
  async get(id: string, token?: string): Promise<Session> {
    return new Session(await readJSON(await this.c.control("GET", "/v1/sessions/" + seg(id))), this.c, token);
  }

  /**
   * Kills a session at once: its token dies, its grants are revoked, in-flight calls cancelled.
   * @operationId killSession
   */
  async revoke(id: string): Promise<Session> {
    return new Session(await readJSON(await this.c.control("DELETE", "/v1/sessions/" + seg(id))), this.c);
  }

  /**
   * The PEM of the session's proxy CA certificate.
   * @operationId getSessionCA
   */
  async caPem(id: string): Promise<string> {
    return (await raiseFor(await this.c.control("GET", `/v1/sessions/${seg(id)}/ca.pem`))).text();
  }
}

export class Grants extends Resource {
  /**
   * Adds a grant (the JSON shape of GrantRequest) to an active session.
   * @operationId addGrant
   */
  async add(sessionId: string, grant: JSONObject): Promise<JSONObject> {
    return readJSON(await this.c.control("POST", `/v1/sessions/${seg(sessionId)}/grants`, { json: grant }));
  }

  /** @operationId getGrant */
  async get(id: string): Promise<JSONObject> {
    return readJSON(await this.c.control("GET", "/v1/grants/" + seg(id)));
  }

  /** @operationId revokeGrant */
  async revoke(id: string): Promise<JSONObject> {
    return readJSON(await this.c.control("DELETE", "/v1/grants/" + seg(id)));
  }
}

export class Tokens extends Resource {
  /**
   * Creates an API token (admin); its secret `token` is in this answer only.
   * @operationId createToken
   */
  async create(role: string, name: string, ttl?: string | number): Promise<JSONObject> {
    return readJSON(await this.c.control("POST", "/v1/tokens", { json: compact({ role, name, ttl }) }));
  }

  /** @operationId listTokens */
  async list(): Promise<JSONObject[]> {
    return readItems(await this.c.control("GET", "/v1/tokens"));
  }

  /** @operationId revokeToken */
  async revoke(id: string): Promise<void> {
    await readJSON(await this.c.control("DELETE", "/v1/tokens/" + seg(id)));
  }
}

export class Approvals extends Resource {
  /**
   * Actions, newest first (reviewer or admin), each as api/openapi.yaml's Action.
   * @operationId listApprovals
   */
  async list(opts: { status?: string; limit?: number } = {}): Promise<JSONObject[]> {
    return readItems(await this.c.control("GET", withQuery("/v1/approvals", opts)));
  }

  /** @operationId getApproval */
  async get(id: string): Promise<JSONObject> {
    return readJSON(await this.c.control("GET", "/v1/approvals/" + seg(id)));
  }

  /** @operationId approveAction */
  async approve(id: string, comment?: string): Promise<JSONObject> {
    return readJSON(await this.c.control("POST", `/v1/approvals/${seg(id)}/approve`, { json: compact({ comment }) }));
  }

  /** @operationId denyAction */
  async deny(id: string, comment?: string): Promise<JSONObject> {
    return readJSON(await this.c.control("POST", `/v1/approvals/${seg(id)}/deny`, { json: compact({ comment }) }));
  }
}

export class Killswitch extends Resource {
  /** @operationId getKillswitch */
  async status(): Promise<JSONObject> {
    return readJSON(await this.c.control("GET", "/v1/killswitch"));
  }

  /**
   * Every sandbox call is refused (503 killswitch_engaged) until an admin releases it.
   * @operationId engageKillswitch
   */
  async engage(reason?: string): Promise<JSONObject> {
    return readJSON(await this.c.control("POST", "/v1/killswitch", { json: compact({ reason }) }));
  }

  /** @operationId releaseKillswitch */
  async release(): Promise<JSONObject> {
    return readJSON(await this.c.control("DELETE", "/v1/killswitch"));
  }
}

export interface ExportOptions {
  format?: "jsonl" | "csv" | "ocsf";
  since?: string | Date;
  until?: string | Date;
  session_id?: string;
  task_id?: string;
  grant_id?: string;
  type?: string;
  from_seq?: number;
  signal?: AbortSignal;
}

export class Audit extends Resource {
  /**
   * Streams the audit log, record by record: jsonl and ocsf yield one object per record, csv the lines
   * (the header first). Read in constant memory; no timeout but `signal`.
   * @operationId exportAudit
   */
  async *export(opts: ExportOptions = {}): AsyncGenerator<any, void, undefined> {
    const { signal, ...q } = opts;
    const r = await raiseFor(await this.c.control("GET", withQuery("/v1/audit", q as Query), { signal, timeoutMs: null }));
    const csv = opts.format === "csv";
    const decoder = new TextDecoder();
    let buf = "";
    const emit = (line: string) => (csv ? line : JSON.parse(line));
    if (!r.body) return;
    for await (const chunk of r.body as unknown as AsyncIterable<Uint8Array>) {
      buf += decoder.decode(chunk, { stream: true });
      let i: number;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i).replace(/\r$/, "");
        buf = buf.slice(i + 1);
        if (line) yield emit(line);
      }
    }
    buf += decoder.decode();
    if (buf.trim()) yield emit(buf.replace(/\r$/, ""));
  }

  /** @operationId pruneAudit */
  async prune(before: string | Date): Promise<JSONObject> {
    return readJSON(await this.c.control("DELETE", withQuery("/v1/audit", { before: timeText(before) })));
  }

  /** @operationId verifyAudit */
  async verify(): Promise<JSONObject> {
    return readJSON(await this.c.control("GET", "/v1/audit/verify", { timeoutMs: null }));
  }

  /** @operationId listCheckpoints */
  async checkpoints(): Promise<JSONObject[]> {
    return readItems(await this.c.control("GET", "/v1/audit/checkpoints"));
  }

  /** @operationId getAuditPublicKey */
  async publicKey(): Promise<JSONObject> {
    return readJSON(await this.c.control("GET", "/v1/audit/public-key"));
  }
}
