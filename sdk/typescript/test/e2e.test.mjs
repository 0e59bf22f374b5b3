// The SDK end to end against a real `broker dev` (broker.mjs): orchestrator, sandbox, reviewer, auditor.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { writeFileSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { randomUUID } from "node:crypto";
import { startBroker } from "./broker.mjs";
import {
  Airlock, Action, APIError, AirlockError, ConstraintViolated, NoMatchingGrant, NotFound, KillswitchEngaged,
  SessionRevoked, ApprovalDenied, InvalidToken, Forbidden, BadRequest, WaitTimeout, TOKEN_PLACEHOLDER, formatEnv,
} from "../dist/index.js";

const run = promisify(execFile);
let broker;
let client;

before(async () => {
  broker = await startBroker();
  client = new Airlock({ addr: broker.control, token: broker.admin, sandboxAddr: broker.sandbox });
});
after(async () => { await broker?.stop(); });

const PAYMENTS = { method: "POST", path: "/payments", deny_unknown: true,
  constraints: { "body.to": { pin: "acme" }, "body.amount": { min: 1, max: 100, required: true } } };

function demoSession(c, { untrusted = false, rules } = {}) {
  rules ??= [{ method: "GET", path: "/hello" }, { method: "GET", path: "/whoami" }, { method: "GET", path: "/missing" }, PAYMENTS];
  return c.sessions.create({ task_id: "sdk-ts-" + randomUUID().slice(0, 8), ttl: "10m", untrusted_input: untrusted,
    isolation: "microvm", grants: [{ upstream: "demo", rules }] });
}

function assertNoCanary(...texts) {
  const k = broker.demoKey;
  for (const t of texts) {
    for (const f of [k, Buffer.from(k).toString("base64"), encodeURIComponent(k), Buffer.from(k).toString("hex")]) {
      assert.ok(!t.includes(f), "the demo key reached the client side");
    }
  }
}

test("a node sandbox subprocess reaches the demo API through the proxy door with session.env()", async () => {
  const session = await demoSession(client);
  const ca = join(broker.tmp, `ca-${session.id}.pem`);
  writeFileSync(ca, await session.caPem());
  const env = session.env(ca);
  assert.ok(env.HTTPS_PROXY.startsWith(`http://airlock:${session.token}@`));
  assert.match(env.DEMO_TOKEN, /^demo_/);
  const child = await run(process.execPath, [new URL("./sandbox-child.mjs", import.meta.url).pathname],
    { env: { PATH: process.env.PATH, ...env } });
  const out = JSON.parse(child.stdout);
  assert.deepEqual(out.envHasAirlock, []);
  assert.equal(out.hello.status, 200);
  assert.match(out.hello.body, /hello from the demo API/);
  assert.equal(out.hello.code, null);
  assert.deepEqual(JSON.parse(out.whoami.body), { authorization_received: "[REDACTED]" });
  assert.equal(out.pay.status, 201);
  assert.deepEqual(JSON.parse(out.pay.body).received, { amount: 5, to: "acme" });
  assert.equal(out.mallory.status, 403);
  assert.equal(out.mallory.code, "constraint_violated");
  assert.equal(out.elsewhere.status, 403);
  assert.equal(out.elsewhere.code, "egress_denied");
  assertNoCanary(child.stdout, child.stderr);
});

test("session.env() equals broker session env --format env", async () => {
  const session = await demoSession(client);
  const ca = join(broker.tmp, `cli-${session.id}.pem`);
  const base = { PATH: process.env.PATH, AIRLOCK_ADDR: broker.control, AIRLOCK_TOKEN: broker.admin };
  const cli = await run(broker.binary, ["session", "env", session.id, "--format", "env", "--ca-out", ca],
    { env: { ...base, AIRLOCK_SESSION_TOKEN: session.token } });
  const printed = cli.stdout.split("\n").filter(Boolean).map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]);
  assert.deepEqual(Object.entries(session.env(ca)), printed);
  assert.equal(formatEnv(session.env(ca), "env"), cli.stdout);
  assert.equal(readFileSync(ca, "utf8"), await session.caPem());
  assert.equal(await session.caPem(), session.data.proxy.ca_pem);
  const odd = "a'b(c)*!d:e@f/g?h$&+,;=~é";
  const cli2 = await run(broker.binary, ["session", "env", session.id, "--format", "env", "--ca-out", ca, "--token", odd], { env: base });
  assert.equal(formatEnv(session.env(ca, { token: odd }), "env"), cli2.stdout);
  const again = await client.sessions.get(session.id);
  assert.ok(again.env(ca).HTTPS_PROXY.includes(TOKEN_PLACEHOLDER));
});

test("the REST door: upstream answers and typed errors", async () => {
  const session = await demoSession(client);
  const hello = await session.request("demo", "GET", "/hello");
  assert.equal(hello.status, 200);
  const helloText = await hello.text();
  assert.match(helloText, /hello/);
  const paid = await session.request("demo", "POST", "/payments", { json: { amount: 9 } });
  assert.equal(paid.status, 201);
  assert.deepEqual((await paid.json()).received, { amount: 9, to: "acme" });

  const err = await session.request("demo", "POST", "/payments", { json: { to: "mallory", amount: 9 } }).then(
    () => assert.fail("a pinned value was accepted"), (e) => e);
  assert.ok(err instanceof ConstraintViolated && err instanceof APIError && err instanceof AirlockError);
  assert.deepEqual([err.status, err.code, err.param, err.constraint], [403, "constraint_violated", "body.to", "pin"]);
  assert.match(err.requestId, /^req_/);
  assert.ok(!err.message.includes("mallory"));

  await assert.rejects(session.request("demo", "DELETE", "/payments"), NoMatchingGrant);
  const missing = await session.request("demo", "GET", "/missing");
  assert.equal(missing.status, 404);
  assert.equal(missing.headers.get("x-airlock-code"), null);
  await assert.rejects(session.request("nosuch", "GET", "/x"), NotFound);
  assertNoCanary(helloText, await missing.text());
});

test("a gated call waits for a reviewer: approved, executed, its result; another denied", async () => {
  const session = await demoSession(client, { untrusted: true });
  assert.equal(session.data.rule_of_two.gated, true);
  const action = await session.request("demo", "POST", "/payments", { json: { amount: 7 } });
  assert.ok(action instanceof Action);
  assert.equal(action.status, "pending");
  await assert.rejects(action.wait(0), (e) => e instanceof WaitTimeout && e.action === action);

  const tok = await client.tokens.create("reviewer", "sdk-ts-reviewer-" + randomUUID().slice(0, 6));
  const reviewer = new Airlock({ addr: broker.control, token: tok.token });
  const pending = await reviewer.approvals.list({ status: "pending" });
  assert.ok(pending.some((a) => a.id === action.id));
  const shown = await reviewer.approvals.get(action.id);
  assert.deepEqual(JSON.parse(shown.request.body), { amount: 7, to: "acme" });
  await assert.rejects(client.approvals.approve(action.id), Forbidden);
  await reviewer.approvals.approve(action.id, "ok");
  assert.equal(await action.wait(120), action);
  assert.equal(action.status, "executed");
  const result = await action.result();
  assert.equal(result.status, 201);
  assert.deepEqual((await result.json()).received, { amount: 7, to: "acme" });

  const denied = await session.request("demo", "POST", "/payments", { json: { amount: 8 } });
  await reviewer.approvals.deny(denied.id, "no");
  assert.equal((await denied.wait(120)).status, "denied");
  await assert.rejects(denied.result(), ApprovalDenied);

  // Prefer: wait on the call itself: approved while it waits, it answers the upstream's response.
  const held = session.request("demo", "POST", "/payments", { json: { amount: 4 }, wait: 60 });
  let queued;
  while (!queued) { // until the broker has queued the call (a condition, not a time bound)
    queued = (await reviewer.approvals.list({ status: "pending" })).find((a) => a.session_id === session.id);
    if (!queued) await new Promise((r) => setTimeout(r, 10));
  }
  await reviewer.approvals.approve(queued.id);
  const answer = await held;
  assert.ok(!(answer instanceof Action));
  assert.equal(answer.status, 201);
  assert.deepEqual((await answer.json()).received, { amount: 4, to: "acme" });

  await client.tokens.revoke(tok.id);
  assert.ok(!(await client.tokens.list()).some((t) => t.id === tok.id));
  await assert.rejects(reviewer.approvals.list(), InvalidToken);
});

test("kill-switch and session kill", async () => {
  const session = await demoSession(client);
  try {
    assert.equal((await client.killswitch.engage("sdk ts")).engaged, true);
    assert.equal((await client.killswitch.status()).reason, "sdk ts");
    const e = await session.request("demo", "GET", "/hello").then(() => assert.fail("answered while engaged"), (x) => x);
    assert.ok(e instanceof KillswitchEngaged);
    assert.equal(e.status, 503);
  } finally {
    await client.killswitch.release();
  }
  assert.equal((await client.killswitch.status()).engaged, false);
  assert.equal((await session.request("demo", "GET", "/hello")).status, 200);
  assert.equal((await session.revoke()).status, "revoked");
  await assert.rejects(session.request("demo", "GET", "/hello"), SessionRevoked);
});

test("grants, session pages, operations", async () => {
  const session = await demoSession(client, { rules: [{ method: "GET", path: "/hello" }] });
  await assert.rejects(session.request("demo", "GET", "/whoami"), NoMatchingGrant);
  const grant = await client.grants.add(session.id, { upstream: "demo", rules: [{ method: "GET", path: "/whoami" }] });
  assert.equal((await session.request("demo", "GET", "/whoami")).status, 200);
  assert.equal((await client.grants.get(grant.id)).uses, 1);
  assert.equal((await client.grants.revoke(grant.id)).status, "revoked");
  await assert.rejects(session.request("demo", "GET", "/whoami"), NoMatchingGrant);
  const bad = await client.grants.add(session.id, { upstream: "demo", rules: [{ method: "GET", path: "no-slash" }] }).catch((e) => e);
  assert.ok(bad instanceof BadRequest && bad.field);

  const first = await client.sessions.list({ limit: 1 });
  assert.equal(first.items.length, 1);
  assert.ok(first.next);
  const rest = await client.sessions.list({ cursor: first.next, limit: 1000 });
  assert.ok([...first.items, ...rest.items].some((s) => s.id === session.id));
  assert.deepEqual(await client.health(), { status: "ok" });
  assert.deepEqual(await client.health("sandbox"), { status: "ok" });
  assert.equal((await client.ready()).status, "ready");
  assert.match(await client.metrics(), /airlock_calls_total/);
  assert.equal((await client.audit.verify()).ok, true);
  assert.equal((await client.audit.publicKey()).algorithm, "ed25519");
  assert.ok(Array.isArray(await client.audit.checkpoints()));
});

test("audit export streams records", async () => {
  const session = await demoSession(client);
  await session.request("demo", "GET", "/hello");
  await assert.rejects(session.request("demo", "POST", "/payments", { json: { to: "mallory", amount: 1 } }), ConstraintViolated);
  const records = [];
  for await (const r of client.audit.export({ session_id: session.id })) records.push(r);
  const types = records.map((r) => r.type);
  assert.equal(types[0], "session.created");
  assert.ok(types.includes("call.allowed") && types.includes("call.completed"));
  assert.ok(records.some((r) => r.type === "call.denied" && r.code === "constraint_violated"));
  assert.ok(records.every((r) => r.session_id === session.id));
  let prev;
  for await (const r of client.audit.export()) {
    if (prev) {
      assert.equal(r.seq, prev.seq + 1);
      assert.equal(r.prev_hash, prev.hash);
    }
    prev = r;
  }
  const lines = [];
  for await (const l of client.audit.export({ format: "csv", session_id: session.id })) lines.push(l);
  assert.match(lines[0], /^"?seq"?,/);
  assert.equal(lines.length, records.length + 1);
  assertNoCanary(JSON.stringify(records));
});

test("an injected fetch and the environment's defaults", async () => {
  const seen = [];
  const recording = (input, init) => { seen.push(`${init?.method ?? "GET"} ${new URL(input).pathname}`); return fetch(input, init); };
  const c = new Airlock({ addr: broker.control, token: broker.admin, sandboxAddr: broker.sandbox, fetch: recording });
  const s = await demoSession(c);
  await s.request("demo", "GET", "/hello");
  assert.ok(seen.includes("POST /v1/sessions") && seen.includes("GET /v1/proxy/demo/hello"));

  const fromEnv = new Airlock({ env: { AIRLOCK_ADDR: broker.control.replace("http://", ""), AIRLOCK_TOKEN: broker.admin, AIRLOCK_SANDBOX_ADDR: broker.sandbox } });
  assert.equal(fromEnv.addr, broker.control);
  assert.equal(fromEnv.sandboxAddr, broker.sandbox);
  const s2 = await demoSession(fromEnv);
  assert.equal((await fromEnv.attach(s2.token).request("demo", "GET", "/hello")).status, 200);
});

test("a caller's AbortSignal aborts a request", async () => {
  const session = await demoSession(client, { untrusted: true });
  const ac = new AbortController();
  ac.abort();
  await assert.rejects(session.request("demo", "POST", "/payments", { json: { amount: 1 }, signal: ac.signal }), { name: "AbortError" });
});
