// POSTs a body of N spaces to URL with Node's own fetch (undici, the
// TypeScript SDK's transport), 64 KiB every 5 ms with its Content-Length,
// and prints {"status", "body"} or {"error"}. Usage: node post_big.mjs URL N
const [url, n] = process.argv.slice(2);
const total = Number(n);
const chunk = new Uint8Array(64 * 1024).fill(0x20);
let sent = 0;
const body = new ReadableStream({
  async pull(c) {
    if (sent >= total) return c.close();
    const part = chunk.subarray(0, Math.min(chunk.length, total - sent));
    sent += part.length;
    await new Promise((r) => setTimeout(r, 5));
    c.enqueue(part);
  },
});
try {
  const res = await fetch(url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "content-length": String(total),
      accept: "application/json, text/event-stream",
    },
    body,
    duplex: "half",
    signal: AbortSignal.timeout(30_000),
  });
  console.log(JSON.stringify({ status: res.status, body: await res.text() }));
} catch (e) {
  console.log(JSON.stringify({ error: `${e}: ${e.cause ?? ""}` }));
}
