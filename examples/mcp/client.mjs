// A stock MCP client as the sandbox: the official TypeScript SDK (@modelcontextprotocol/sdk), its
// Streamable HTTP transport pointed at the broker's MCP endpoint, with nothing but the Airlock
// session token. docs/mcp.md walks through it.
//
//   AIRLOCK_SESSION_TOKEN=<token> node examples/mcp/client.mjs <url> list
//   AIRLOCK_SESSION_TOKEN=<token> node examples/mcp/client.mjs <url> call <tool> ['<arguments as JSON>']
//
// <url> is <sandbox plane>/v1/mcp/<upstream>. It prints each tool with its input schema, or a
// call's result (its text, "isError" first when the result is a tool error), or the JSON-RPC
// error of a refused call with the Airlock code from error.data.code.
//
// The SDK is imported from sdk/typescript/node_modules (`npm ci` in sdk/typescript puts it there);
// in a project of your own, `npm install @modelcontextprotocol/sdk` and import it by name:
//   import { Client } from "@modelcontextprotocol/sdk/client/index.js";
const sdk = new URL("../../sdk/typescript/node_modules/@modelcontextprotocol/sdk/dist/esm/", import.meta.url);
const { Client } = await import(new URL("client/index.js", sdk));
const { StreamableHTTPClientTransport } = await import(new URL("client/streamableHttp.js", sdk));
const { McpError } = await import(new URL("types.js", sdk));

const [url, command, tool, args] = process.argv.slice(2);
const token = process.env.AIRLOCK_SESSION_TOKEN;
if (!url || !token || !(command === "list" || (command === "call" && tool))) {
  console.error("usage: AIRLOCK_SESSION_TOKEN=<token> node client.mjs <url> list | call <tool> ['<arguments as JSON>']");
  process.exit(2);
}

const client = new Client({ name: "airlock-example", version: "1" });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
try {
  await client.connect(transport);
  if (command === "list") {
    const { tools } = await client.listTools();
    for (const t of tools) console.log(`${t.name} ${JSON.stringify(t.inputSchema.properties ?? {})}`);
  } else {
    const result = await client.callTool({ name: tool, arguments: args ? JSON.parse(args) : {} });
    const text = result.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
    console.log(result.isError ? `isError: ${text}` : text);
  }
} catch (err) {
  if (!(err instanceof McpError)) throw err;
  console.log(`error ${err.code} ${err.data?.code ?? ""}: ${err.message}`);
  process.exitCode = 1;
} finally {
  await client.close();
}
