// A legacy session of the TypeScript SDK client (@modelcontextprotocol/sdk, pinned in
// tests/interop/package-lock.json: `Client` + `StreamableHTTPClientTransport`) through a balancer,
// connecting from a chosen loopback address (tests/fleet/fleet.sh, check a).
//
// usage: node ts_session.mjs URL TOKEN LOCAL_ADDR NONCES_JSON      (run from anywhere; the SDK is
//        resolved from tests/interop/node_modules)
// Initializes (Authorization: Bearer TOKEN), lists the tools, calls rec__record once per nonce,
// ends the session (DELETE). Prints {"client", "sessionId", "protocolVersion", "tools", "texts"}.
// Exits non-zero on any failure (reason on stderr); timeout CLIENT_TIMEOUT seconds (default 60).
import http from "node:http";
import { createRequire } from "node:module";
import { Readable } from "node:stream";
import { pathToFileURL } from "node:url";

const interop = new URL("../interop/", import.meta.url);
const require = createRequire(new URL("package.json", interop));
const sdk = (p) => import(pathToFileURL(require.resolve(`@modelcontextprotocol/sdk/${p}`)).href);
const { Client } = await sdk("client/index.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
const sdkVersion = require("@modelcontextprotocol/sdk/package.json").version;

// fetch over node:http with the connection made from `localAddress` (Node's fetch cannot bind a
// source address without undici's Agent, which is not a direct dependency here).
function boundFetch(agent, localAddress) {
  return (input, init = {}) =>
    new Promise((resolve, reject) => {
      const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
      const headers = {};
      new Headers(init.headers ?? {}).forEach((v, k) => {
        headers[k] = v;
      });
      const method = init.method ?? "GET";
      const req = http.request(
        { host: url.hostname, port: url.port, path: url.pathname + url.search, method, headers, agent, localAddress },
        (res) => {
          const h = new Headers();
          for (const [k, v] of Object.entries(res.headers)) {
            if (Array.isArray(v)) v.forEach((x) => h.append(k, x));
            else if (v !== undefined) h.set(k, v);
          }
          const empty = [204, 205, 304].includes(res.statusCode) || method === "HEAD";
          if (empty) res.resume();
          resolve(new Response(empty ? null : Readable.toWeb(res), { status: res.statusCode, statusText: res.statusMessage, headers: h }));
        },
      );
      req.on("error", reject);
      if (init.signal) {
        const abort = () => req.destroy(Object.assign(new Error("aborted"), { name: "AbortError" }));
        if (init.signal.aborted) abort();
        else init.signal.addEventListener("abort", abort, { once: true });
      }
      req.end(init.body == null ? undefined : typeof init.body === "string" ? init.body : Buffer.from(init.body));
    });
}

async function run(url, token, local, nonces) {
  const agent = new http.Agent({ keepAlive: true, localAddress: local });
  const client = new Client({ name: "mcp-edge-fleet-ts", version: sdkVersion }, { capabilities: {} });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
    fetch: boundFetch(agent, local),
  });
  await client.connect(transport);
  const out = { client: `typescript-sdk-${sdkVersion}`, sessionId: transport.sessionId, protocolVersion: transport.protocolVersion };
  try {
    out.tools = (await client.listTools()).tools.map((t) => t.name);
    out.texts = [];
    for (const nonce of nonces) {
      const res = await client.callTool({ name: "rec__record", arguments: { nonce } });
      if (res.isError) throw new Error(`rec__record ${nonce}: isError ${JSON.stringify(res)}`);
      out.texts.push(res.content?.[0]?.text ?? null);
    }
  } finally {
    try {
      await transport.terminateSession();
    } catch {
      // closing is enough
    }
    await client.close();
    agent.destroy();
  }
  return out;
}

async function main() {
  if (process.argv.length !== 6) {
    process.stderr.write("usage: node ts_session.mjs URL TOKEN LOCAL_ADDR NONCES_JSON\n");
    return 2;
  }
  const [url, token, local, noncesJson] = process.argv.slice(2);
  const timeoutS = Number(process.env.CLIENT_TIMEOUT ?? "60");
  const timer = setTimeout(() => {
    process.stderr.write(`ts_session failed: timed out after ${timeoutS}s\n`);
    process.exit(1);
  }, timeoutS * 1000);
  try {
    process.stdout.write(JSON.stringify(await run(url, token, local, JSON.parse(noncesJson))) + "\n");
    return 0;
  } catch (e) {
    process.stderr.write(`ts_session failed: ${e?.stack ?? e}\n`);
    return 1;
  } finally {
    clearTimeout(timer);
  }
}

process.exitCode = await main();
