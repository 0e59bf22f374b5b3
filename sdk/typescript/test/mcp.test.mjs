// The MCP door with the official TypeScript MCP SDK (@modelcontextprotocol/sdk) as the sandbox's client,
// against a real `broker dev` (broker.mjs) and its demo MCP server (upstream demo-mcp). The session is
// created with this SDK; the MCP client holds only its token.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { startBroker } from "./broker.mjs";
import { Airlock } from "../dist/index.js";

let broker;
let session;
let mcp;

// connect is a stock MCP client on the broker's endpoint for demo-mcp, with token as its bearer.
async function connect(token) {
  const client = new Client({ name: "sdk-ts-mcp-test", version: "1" });
  const transport = new StreamableHTTPClientTransport(new URL(`${broker.sandbox}/v1/mcp/demo-mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return client;
}

before(async () => {
  broker = await startBroker();
  const airlock = new Airlock({ addr: broker.control, token: broker.admin, sandboxAddr: broker.sandbox });
  // Trusted input: not gated, so create_issue runs at once (the gate is docs/mcp.md's walk-through).
  session = await airlock.sessions.create({
    task_id: "sdk-ts-mcp-" + randomUUID().slice(0, 8), ttl: "10m", untrusted_input: false, isolation: "microvm",
    grants: [{ upstream: "demo-mcp", rules: [
      { tool: "create_issue", deny_unknown: true, constraints: {
        "args.repo": { pin: "acme/web" }, "args.title": { max_length: 40 }, "args.labels.*": { one_of: ["bug", "triage"] } } },
      { tool: "whoami", irreversible: false },
    ] }],
  });
  mcp = await connect(session.token);
});
after(async () => {
  await mcp?.close();
  await broker?.stop();
});

function assertNoDemoKey(...texts) {
  const k = broker.demoKey;
  for (const t of texts) {
    for (const f of [k, Buffer.from(k).toString("base64"), encodeURIComponent(k), Buffer.from(k).toString("hex")]) {
      assert.ok(!t.includes(f), "the demo key reached the MCP client");
    }
  }
}

test("the broker speaks 2025-11-25 with the SDK, in a session of its own, and names itself", () => {
  assert.equal(mcp.transport.protocolVersion, "2025-11-25");
  assert.match(mcp.transport.sessionId, /^mcs_/); // the broker's Mcp-Session-Id, never the server's
  assert.deepEqual(mcp.getServerVersion(), { name: "airlock", version: "1" });
  assert.ok(mcp.getServerCapabilities().tools);
  assert.equal(mcp.getServerCapabilities().sampling, undefined);
});

test("listTools shows only the allowed tools, their schemas narrowed", async () => {
  const { tools } = await mcp.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), ["create_issue", "whoami"]); // list_issues: no rule names it
  const create = tools.find((t) => t.name === "create_issue");
  const props = create.inputSchema.properties;
  assert.deepEqual(Object.keys(props).sort(), ["labels", "repo", "title"]);
  assert.equal(props.repo.const, "acme/web");
  assert.deepEqual(props.labels.items.enum, ["bug", "triage"]);
  assert.equal(props.title.maxLength, 40);
  assert.ok(!(create.inputSchema.required ?? []).includes("repo"), "a pinned argument is no longer required");
});

test("callTool create_issue without repo gets the pinned repo", async () => {
  const res = await mcp.callTool({ name: "create_issue", arguments: { title: "Login page crashes", labels: ["bug"] } });
  assert.notEqual(res.isError, true);
  assert.match(res.content[0].text, /^created issue #\d+ in acme\/web: Login page crashes$/);
});

test("a wrong repo, a label not allowed, an unknown argument: McpError -32602 constraint_violated", async () => {
  for (const [args, param, constraint] of [
    [{ repo: "mallory/web", title: "x" }, "args.repo", "pin"],
    [{ title: "x", labels: ["wontfix"] }, "args.labels.*", "one_of"],
    [{ title: "x", assignee: "mallory" }, "args.assignee", "deny_unknown"],
  ]) {
    const err = await mcp.callTool({ name: "create_issue", arguments: args }).then(
      () => assert.fail(`${param} was accepted`), (e) => e);
    assert.ok(err instanceof McpError, String(err));
    assert.equal(err.code, -32602);
    assert.equal(err.data.code, "constraint_violated");
    assert.deepEqual([err.data.param, err.data.constraint], [param, constraint]);
    assert.match(err.data.request_id, /^req_/);
  }
  const hidden = await mcp.callTool({ name: "list_issues", arguments: { repo: "acme/web" } }).then(
    () => assert.fail("a tool no rule names was called"), (e) => e);
  assert.ok(hidden instanceof McpError);
  assert.deepEqual([hidden.code, hidden.data.code], [-32010, "no_matching_grant"]);
});

test("whoami's echo of the credential comes back scrubbed", async () => {
  const res = await mcp.callTool({ name: "whoami", arguments: {} });
  const text = JSON.stringify(res);
  assert.match(res.content[0].text, /^authorization received: \[REDACTED\]$/);
  assertNoDemoKey(text);
});

test("a bad token: the transport's 401", async () => {
  const err = await connect("not-a-session-token").then(() => assert.fail("a bad token connected"), (e) => e);
  assert.ok(err instanceof StreamableHTTPError, String(err));
  assert.equal(err.code, 401);
  assert.match(err.message, /invalid_token/);
});
