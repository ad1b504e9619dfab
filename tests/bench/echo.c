/* A small, fast stdio MCP server for tests/bench/run.sh: the upstream behind every proxy measured.
 *
 * Line-delimited JSON-RPC 2.0 on stdin/stdout (2025-11-25 basic/transports.mdx §stdio;
 * 2026-07-28 transports-stdio.mdx). Dual-era:
 *   - legacy: `initialize` (2025-11-25 lifecycle.mdx §Initialization) answers the version asked for
 *     (any 2025 revision; others get 2025-11-25), capabilities {"tools":{}}; notifications ignored;
 *   - modern: `server/discover` (2026-07-28 server-discover.mdx §Response) answers supportedVersions
 *     ["2026-07-28"]; a request carrying `_meta."io.modelcontextprotocol/protocolVersion"` gets
 *     `"resultType":"complete"` in its result (2026-07-28 patterns-mrtr.mdx).
 * Methods: ping, tools/list (tools `echo` and `big`), tools/call:
 *   echo {"text": S}  -> {"content":[{"type":"text","text":S}]}  (S copied verbatim, escapes and all)
 *   big  {"bytes": N} -> {"content":[{"type":"text","text":"xxx…"}]}  (N bytes of 'x', N <= 64 MiB)
 * Anything else with an id gets -32601; messages without an id (notifications, answers) are ignored.
 * The id is copied verbatim (string or number). Requests that arrive together are answered with one write.
 *
 * It is deliberately minimal: a JSON scanner that finds top-level keys of an object, no allocation per
 * request except for growing its two buffers. Build: cc -O2 -o echo echo.c
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BIG (64u << 20)

static char *out;
static size_t out_len, out_cap;

static void die(const char *what) {
  fprintf(stderr, "bench echo: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void put(const char *s, size_t n) {
  if (out_len + n > out_cap) {
    size_t cap = out_cap ? out_cap : 65536;
    while (cap < out_len + n) cap *= 2;
    out = realloc(out, cap);
    if (!out) die("realloc");
    out_cap = cap;
  }
  memcpy(out + out_len, s, n);
  out_len += n;
}

static void puts_(const char *s) { put(s, strlen(s)); }

static void flush_out(void) {
  size_t off = 0;
  while (off < out_len) {
    ssize_t w = write(1, out + off, out_len - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      die("write");
    }
    off += (size_t)w;
  }
  out_len = 0;
}

/* ---- JSON scanning: each function takes a pointer into [p, end) and returns the first byte after. */
static const char *ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
  return p;
}

static const char *skip_string(const char *p, const char *end) { /* p at the opening quote */
  for (p++; p < end; p++) {
    if (*p == '\\') p++;
    else if (*p == '"') return p + 1;
  }
  return NULL;
}

static const char *skip_value(const char *p, const char *end) {
  p = ws(p, end);
  if (p >= end) return NULL;
  if (*p == '"') return skip_string(p, end);
  if (*p == '{' || *p == '[') {
    int depth = 0;
    while (p < end) {
      if (*p == '"') {
        p = skip_string(p, end);
        if (!p) return NULL;
        continue;
      }
      if (*p == '{' || *p == '[') depth++;
      else if (*p == '}' || *p == ']') {
        if (--depth == 0) return p + 1;
      }
      p++;
    }
    return NULL;
  }
  while (p < end && !strchr(",}] \t\r\n", *p)) p++; /* number, true, false, null */
  return p;
}

/* A value span: [v, v_end). Zero-length when absent. */
typedef struct {
  const char *v, *e;
} span;

/* Finds top-level key `key` of the object at p; returns the value's span (v == NULL if absent). */
static span get(span obj, const char *key) {
  span r = {NULL, NULL};
  if (!obj.v) return r;
  const char *p = ws(obj.v, obj.e), *end = obj.e;
  size_t klen = strlen(key);
  if (p >= end || *p != '{') return r;
  p = ws(p + 1, end);
  while (p < end && *p == '"') {
    const char *k = p + 1, *ke = skip_string(p, end);
    if (!ke) return r;
    p = ws(ke, end);
    if (p >= end || *p != ':') return r;
    const char *v = ws(p + 1, end), *ve = skip_value(v, end);
    if (!ve) return r;
    if ((size_t)(ke - 1 - k) == klen && memcmp(k, key, klen) == 0) {
      r.v = v;
      r.e = ve;
      return r;
    }
    p = ws(ve, end);
    if (p < end && *p == ',') p = ws(p + 1, end);
  }
  return r;
}

static int is(span s, const char *lit) { /* s is the JSON string "lit" */
  size_t n = strlen(lit);
  return s.v && (size_t)(s.e - s.v) == n + 2 && s.v[0] == '"' && memcmp(s.v + 1, lit, n) == 0;
}

/* ---- answers */
static void begin(span id) {
  puts_("{\"jsonrpc\":\"2.0\",\"id\":");
  put(id.v, (size_t)(id.e - id.v));
  puts_(",\"result\":{");
}

/* Closes the result object; modern results get resultType (after a comma unless the result is empty). */
static void end_result(int modern) {
  if (modern) puts_(out[out_len - 1] == '{' ? "\"resultType\":\"complete\"}}\n" : ",\"resultType\":\"complete\"}}\n");
  else puts_("}}\n");
}

static void error(span id, int code, const char *msg) {
  char buf[64];
  puts_("{\"jsonrpc\":\"2.0\",\"id\":");
  put(id.v, (size_t)(id.e - id.v));
  snprintf(buf, sizeof buf, ",\"error\":{\"code\":%d,\"message\":\"", code);
  puts_(buf);
  puts_(msg);
  puts_("\"}}\n");
}

static const char *TOOLS =
    "\"tools\":[{\"name\":\"echo\",\"description\":\"Echo text back\",\"inputSchema\":{\"type\":\"object\","
    "\"properties\":{\"text\":{\"type\":\"string\"}},\"required\":[\"text\"]}},"
    "{\"name\":\"big\",\"description\":\"A text result of `bytes` bytes\",\"inputSchema\":{\"type\":\"object\","
    "\"properties\":{\"bytes\":{\"type\":\"integer\"}},\"required\":[\"bytes\"]}}]";

static const char *LEGACY[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

static void call_tool(span id, span params, int modern) {
  span name = get(params, "name"), args = get(params, "arguments");
  if (is(name, "echo")) {
    span text = get(args, "text");
    if (!text.v || *text.v != '"') return error(id, -32602, "echo needs a string argument text");
    begin(id);
    puts_("\"content\":[{\"type\":\"text\",\"text\":");
    put(text.v, (size_t)(text.e - text.v));
    puts_("}]");
    return end_result(modern);
  }
  if (is(name, "big")) {
    span b = get(args, "bytes");
    long n = b.v ? strtol(b.v, NULL, 10) : -1;
    if (n < 0 || (unsigned long)n > MAX_BIG) return error(id, -32602, "big needs 0 <= bytes <= 67108864");
    begin(id);
    puts_("\"content\":[{\"type\":\"text\",\"text\":\"");
    for (long i = 0; i < n; i += 4096) {
      static char xs[4096];
      if (!xs[0]) memset(xs, 'x', sizeof xs);
      put(xs, (size_t)(n - i < 4096 ? n - i : 4096));
    }
    puts_("\"}]");
    return end_result(modern);
  }
  error(id, -32602, "unknown tool");
}

static void handle(const char *line, const char *end) {
  span msg = {line, end};
  span id = get(msg, "id"), method = get(msg, "method"), params = get(msg, "params");
  if (!id.v || !method.v || (id.e - id.v == 4 && memcmp(id.v, "null", 4) == 0)) return;
  int modern = get(get(params, "_meta"), "io.modelcontextprotocol/protocolVersion").v != NULL;
  if (is(method, "tools/call")) return call_tool(id, params, modern);
  if (is(method, "ping")) {
    begin(id);
    return end_result(modern) /* {} or {"resultType":"complete"} */;
  }
  if (is(method, "tools/list")) {
    begin(id);
    puts_(TOOLS);
    return end_result(modern);
  }
  if (is(method, "initialize")) {
    span asked = get(params, "protocolVersion");
    const char *v = LEGACY[0];
    for (size_t i = 0; i < sizeof LEGACY / sizeof *LEGACY; i++)
      if (is(asked, LEGACY[i])) v = LEGACY[i];
    begin(id);
    puts_("\"protocolVersion\":\"");
    puts_(v);
    puts_("\",\"capabilities\":{\"tools\":{}},\"serverInfo\":{\"name\":\"bench-echo\",\"version\":\"1\"}");
    return end_result(0);
  }
  if (is(method, "server/discover")) {
    begin(id);
    puts_("\"supportedVersions\":[\"2026-07-28\"],\"capabilities\":{\"tools\":{}},"
          "\"_meta\":{\"io.modelcontextprotocol/serverInfo\":{\"name\":\"bench-echo\",\"version\":\"1\"}}");
    return end_result(1);
  }
  error(id, -32601, "Method not found");
}

int main(void) {
  size_t cap = 1 << 16, len = 0;
  char *in = malloc(cap);
  if (!in) die("malloc");
  for (;;) {
    if (len == cap) {
      cap *= 2;
      in = realloc(in, cap);
      if (!in) die("realloc");
    }
    ssize_t r = read(0, in + len, cap - len);
    if (r < 0) {
      if (errno == EINTR) continue;
      die("read");
    }
    if (r == 0) break;
    len += (size_t)r;
    char *p = in, *nl;
    while ((nl = memchr(p, '\n', len - (size_t)(p - in))) != NULL) {
      handle(p, nl);
      p = nl + 1;
    }
    len -= (size_t)(p - in);
    memmove(in, p, len);
    if (out_len) flush_out(); /* every request read in this chunk answered by one write */
  }
  flush_out();
  return 0;
}
