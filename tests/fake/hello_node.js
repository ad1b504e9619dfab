// A minimal MCP stdio server in Node (no packages): initialize, ping,
// tools/list (one tool, hello), tools/call. For the sandbox test: it runs
// under the default sandbox unchanged, and says what it could read
// (its own /proc entry, os.cpus(), $HOME, a temp file in $TMPDIR).
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const readline = require("readline");

function probe() {
  const tmp = path.join(process.env.TMPDIR || os.tmpdir(), "hello-" + process.pid);
  fs.writeFileSync(tmp, "x");
  fs.unlinkSync(tmp);
  const rss = process.memoryUsage().rss;
  return `hello from node ${process.version}, ${os.cpus().length} cpus, rss ${rss > 0}, home ${os.homedir()}`;
}

const out = (msg) => process.stdout.write(JSON.stringify(msg) + "\n");
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.id === undefined) return;
  const ok = (result) => out({ jsonrpc: "2.0", id: m.id, result });
  switch (m.method) {
    case "initialize":
      return ok({ protocolVersion: m.params.protocolVersion, capabilities: { tools: {} },
                  serverInfo: { name: "hello-node", version: "1.0.0" } });
    case "ping": return ok({});
    case "tools/list":
      return ok({ tools: [{ name: "hello", description: "Says hello",
                            inputSchema: { type: "object", properties: {} } }] });
    case "tools/call":
      return ok({ content: [{ type: "text", text: probe() }] });
    default:
      return out({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "no " + m.method } });
  }
});
