// Real MCP client, TypeScript SDK @modelcontextprotocol/sdk (version pinned in package-lock.json):
// `Client` + `StreamableHTTPClientTransport`, initialize handshake (offers 2025-11-25). Runs on system Node 20.
//
// usage: node client_ts.mjs URL CALLS_JSON
//   URL         e.g. http://127.0.0.1:PORT/mcp, or https://... (a private CA: run node with
//               env NODE_EXTRA_CA_CERTS=ca.pem, which Node's fetch trusts besides the system's)
//   CALLS_JSON  JSON list of {"name": str, "arguments": {...}} (arguments optional). Optional per-call keys:
//                 "meta": {...}          sent as params._meta
//                 "progress": true       ask for progress (progressToken) and record the notifications
//                 "expect_error": true   a JSON-RPC error is expected: record it instead of failing
//
// Prints ONE JSON object on stdout:
//   {"client": "typescript-sdk-<version>", "protocolVersion": "...", "serverInfo": {...}, "tools": [names...],
//    "calls": [{"name": ..., "result": <CallToolResult>} | {"name": ..., "error": {"code","message","data"}}],
//    "logs": [notifications/message params]}
// Exits non-zero on any failure (reason on stderr); timeout CLIENT_TIMEOUT seconds (default 60).
// A CallToolResult with isError=true is a result, not a failure.
// Note: the SDK's zod schemas keep unknown top-level result keys but strip unknown keys inside
// content blocks, so check faithful forwarding of unknown fields with client_v1.py instead.
// Sampling, elicitation and roots are declared and answered with the same canned values as
// client_v1.py (sampling: the canned text plus " (asked: <last message text>)"; roots: file:///interop/root),
// and each such request is recorded in the output's "asked": [{"method", "text"}] as there.
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  McpError,
} from "@modelcontextprotocol/sdk/types.js";

const SAMPLING_REPLY = "canned sampling reply from mcp-edge interop client";

function sdkVersion() {
  try {
    const pkg = new URL("./node_modules/@modelcontextprotocol/sdk/package.json", import.meta.url);
    return JSON.parse(readFileSync(pkg, "utf8")).version ?? "unknown";
  } catch {
    return "unknown";
  }
}

function placeholder(schema) {
  if (schema && "default" in schema) return schema.default;
  if (schema?.enum?.length) return schema.enum[0];
  if (schema?.oneOf?.length) return schema.oneOf[0].const;
  return { string: "test", integer: 1, number: 1.0, boolean: true, array: [] }[schema?.type] ?? "test";
}

async function run(url, calls) {
  const version = sdkVersion();
  const logs = [];
  const asked = [];
  const client = new Client(
    { name: "mcp-edge-interop-client-ts", version },
    { capabilities: { sampling: {}, elicitation: {}, roots: {} } },
  );
  client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
    const messages = req.params?.messages ?? [];
    const prompt = messages.length ? (messages[messages.length - 1].content?.text ?? "") : "";
    asked.push({ method: "sampling/createMessage", text: prompt });
    return {
      role: "assistant",
      content: { type: "text", text: `${SAMPLING_REPLY} (asked: ${prompt})` },
      model: "mcp-edge-interop-canned",
      stopReason: "endTurn",
    };
  });
  client.setRequestHandler(ListRootsRequestSchema, async () => {
    asked.push({ method: "roots/list", text: "" });
    return { roots: [{ uri: "file:///interop/root", name: "interop" }] };
  });
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    asked.push({ method: "elicitation/create", text: req.params?.message ?? "" });
    const props = req.params?.requestedSchema?.properties ?? {};
    return { action: "accept", content: Object.fromEntries(Object.entries(props).map(([k, v]) => [k, placeholder(v)])) };
  });
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    logs.push(n.params);
  });

  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  const out = {
    client: `typescript-sdk-${version}`,
    protocolVersion: transport.protocolVersion,
    serverInfo: client.getServerVersion() ?? null,
  };
  try {
    const tools = await client.listTools();
    out.tools = tools.tools.map((t) => t.name);
    out.calls = [];
    for (const call of calls) {
      const entry = { name: call.name };
      const progress = [];
      const params = { name: call.name, arguments: call.arguments ?? {} };
      if (call.meta) params._meta = call.meta;
      const options = call.progress ? { onprogress: (p) => progress.push(p) } : undefined;
      try {
        const res = await client.callTool(params, undefined, options);
        if (call.expect_error) throw new Error(`call '${call.name}' was expected to fail but returned ${JSON.stringify(res)}`);
        entry.result = res;
      } catch (e) {
        if (!(call.expect_error && e instanceof McpError)) throw e;
        entry.error = { code: e.code, message: e.message, ...(e.data !== undefined ? { data: e.data } : {}) };
      }
      if (call.progress) entry.progress = progress;
      out.calls.push(entry);
    }
  } finally {
    try {
      await transport.terminateSession();
    } catch {
      // a server may refuse DELETE (405); closing is enough then
    }
    await client.close();
  }
  out.logs = logs;
  out.asked = asked;
  return out;
}

async function main() {
  if (process.argv.length !== 4) {
    process.stderr.write("usage: node client_ts.mjs URL CALLS_JSON\n");
    return 2;
  }
  const [url, callsJson] = process.argv.slice(2);
  const calls = JSON.parse(callsJson);
  if (!Array.isArray(calls)) {
    process.stderr.write("CALLS_JSON must be a JSON list\n");
    return 2;
  }
  const timeoutS = Number(process.env.CLIENT_TIMEOUT ?? "60");
  const timer = setTimeout(() => {
    process.stderr.write(`client_ts failed: timed out after ${timeoutS}s\n`);
    process.exit(1);
  }, timeoutS * 1000);
  try {
    const out = await run(url, calls);
    process.stdout.write(JSON.stringify(out) + "\n");
    return 0;
  } catch (e) {
    process.stderr.write(`client_ts failed: ${e?.stack ?? e}\n`);
    return 1;
  } finally {
    clearTimeout(timer);
  }
}

process.exitCode = await main();
