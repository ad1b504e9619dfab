#!/usr/bin/env python3
"""A small scriptable MCP upstream over stdio, for fault and routing tests.

Python standard library only. Usage: fake_upstream.py [--era legacy|modern] [--name N]
[--slow-start MS] (reads nothing for MS milliseconds, like a server with a slow import)
[--http [--sse|--pretty]] (streamable HTTP on a loopback port printed first, not stdio)
[--noisy N] (before serving: stdout and stderr lines with raw control bytes, N
over-long stdout lines of 4 KiB and N of stderr, N answers to an id never sent)

Tools: echo(text, stall_ms) (stall_ms: stops reading stdin that long first), slow_echo(text, ms) (answers out of order), exotic (unknown
content type, annotations, _meta extension keys), whoami (returns the name it
was called by), stats (requests seen, cancellations, current resource
subscriptions), crash (exits), big(bytes), touch(uri) (sends
notifications/resources/updated for uri, before its answer), interview(rounds, together)
(asks the client elicitation/create, sampling/createMessage, roots/list in turn, each
after the previous answer, or all at once with together, each after a log message; returns the answers as a JSON
list; a refusal is kept in stats' "refused").
--marks FILE: appends "call <tool>" to FILE when a tools/call arrives, before acting on it, and
"cancelled <request id>" when a notifications/cancelled does (tests wait on these: the call is in
flight at the upstream, the gateway told it to cancel; tests/it/support/marks.rs).
--tools-file FILE: read at every tools/list when it exists, a JSON array of tool
objects; one named like a built-in tool replaces it, the others are added. With
it, one more tool: announce (sends notifications/tools/list_changed, then answers).
Also one prompt (greet) and one resource (fake://<name>/readme).
Modern era only (listed there only; MRTR, 2026-07-28 patterns-mrtr.mdx): mrtr(ignore_caps) asks in
round 1 for elicitation/create ("who", a name) and roots/list ("where"), in round 2
for sampling/createMessage ("llm", about that name), then answers a text naming
what it got; each retry must echo the last requestState exactly, with a fresh
JSON-RPC id, or the call fails. It checks _meta clientCapabilities first and
answers -32021 for what is missing, unless ignore_caps. mrtr_forever answers
InputRequiredResult (requestState only) to every try.
"""
import json, sys, threading, time

args = sys.argv[1:]
era = args[args.index("--era") + 1] if "--era" in args else "legacy"
name = args[args.index("--name") + 1] if "--name" in args else "fake"
# --paged N: tools/list in pages of N; --looping: every page points to the same cursor.
page = int(args[args.index("--paged") + 1]) if "--paged" in args else 0
looping = "--looping" in args
tools_file = args[args.index("--tools-file") + 1] if "--tools-file" in args else None
marks = args[args.index("--marks") + 1] if "--marks" in args else None
# --fail-first-list: the first tools/list answers an error (a transient failure).
fail_first_list = ["--fail-first-list" in args]
lock = threading.Lock()
seen = {"requests": 0, "methods": [], "cancelled": [], "subscribed": [], "listens": 0, "refused": []}
# Modern era: open subscriptions/listen requests, id -> the URIs of their resourceSubscriptions.
listens = {}
# --subscribe: a modern fake declares resources.subscribe (updates on its listen streams).
modern_subscribe = "--subscribe" in args
initialized = False
LONG = "a_really_long_tool_name_that_goes_on_and_on_past_the_sixty_four_char_limit"
TOOLS = [
    {"name": "echo", "description": "Echo text", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    {"name": "slow_echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}, "ms": {"type": "integer"}}}},
    {"name": "exotic", "inputSchema": {"type": "object"}, "x-vendor-field": {"kept": True}},
    {"name": "weird.name/with:chars", "inputSchema": {"type": "object"}},
    {"name": LONG, "inputSchema": {"type": "object"}},
    {"name": "stats", "inputSchema": {"type": "object"}},
    {"name": "crash", "inputSchema": {"type": "object"}},
    {"name": "big", "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}}}},
    {"name": "progress", "inputSchema": {"type": "object", "properties": {"steps": {"type": "integer"}, "ms": {"type": "integer"}, "tag": {"type": "string"}}}},
    {"name": "ask", "inputSchema": {"type": "object", "properties": {"question": {"type": "string"}}}},
    {"name": "fat", "description": "A tool whose definition alone is over 2 KiB. " + "x" * 2048, "inputSchema": {"type": "object"}},
    {"name": "interview", "inputSchema": {"type": "object", "properties": {"rounds": {"type": "integer"}, "question": {"type": "string"}, "together": {"type": "boolean"}}}},
    {"name": "touch", "inputSchema": {"type": "object", "properties": {"uri": {"type": "string"}}}},
]
if era == "modern":
    TOOLS += [{"name": "mrtr", "inputSchema": {"type": "object", "properties": {"ignore_caps": {"type": "boolean"}}}},
              {"name": "mrtr_forever", "inputSchema": {"type": "object"}}]
# --tools N: N more tools of about 1 KiB each (catalog memory measurements).
if "--tools" in args:
    for i in range(int(args[args.index("--tools") + 1])):
        TOOLS.append({"name": f"gen_{i}", "description": f"Generated tool {i}. " + "d" * 900,
                      "inputSchema": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}})
waiting = {}  # id of a request we sent to the client -> [Event, response]
issued = {}  # requestState handed out (MRTR) -> ids of the requests of that call so far


def tools_now():
    """TOOLS with the --tools-file overrides applied."""
    if not tools_file:
        return TOOLS
    base = TOOLS + [{"name": "announce", "inputSchema": {"type": "object"}}]
    try:
        with open(tools_file) as f:
            extra = json.load(f)
    except FileNotFoundError:
        return base
    by_name = {t["name"]: t for t in extra}
    out = [by_name.pop(t["name"], t) for t in base]
    return out + [t for t in extra if t["name"] in by_name]


answers = threading.local()  # --http: what a POST's handling sent


def send(msg):
    if getattr(answers, "out", None) is not None:
        answers.out.append(msg)
        return
    with lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


def result(id, r):
    if era == "modern" and isinstance(r, dict):
        r.setdefault("resultType", "complete")
    send({"jsonrpc": "2.0", "id": id, "result": r})


def error(id, code, message):
    send({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})


def text(t):
    return {"content": [{"type": "text", "text": t}]}


def input_required(id, requests, state, ids):
    issued[state] = ids + [id]
    r = {"resultType": "input_required", "requestState": state}
    if requests:
        r["inputRequests"] = requests
    send({"jsonrpc": "2.0", "id": id, "result": r})


def mrtr(id, params, a):
    """Three rounds: elicitation + roots, then sampling, then the result."""
    caps = (params.get("_meta") or {}).get("io.modelcontextprotocol/clientCapabilities") or {}
    state = params.get("requestState")
    got = params.get("inputResponses") or {}
    if state is not None and state not in issued:
        return error(id, -32602, f"requestState not echoed exactly: {state!r}")
    ids = issued.pop(state, []) if state is not None else []
    if id in ids:
        return error(id, -32600, f"retry reused the JSON-RPC id {id!r}")
    if state is None:
        missing = {k: {} for k in ("elicitation", "roots", "sampling") if k not in caps}
        if missing and not a.get("ignore_caps"):
            return send({"jsonrpc": "2.0", "id": id, "error": {"code": -32021,
                         "message": "Missing required client capability", "data": {"requiredCapabilities": missing}}})
        who = {"method": "elicitation/create", "params": {"mode": "form", "message": "Your name?",
               "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}}
        return input_required(id, {"who": who, "where": {"method": "roots/list", "params": {}}}, f"s1-{id}", ids)
    if state.startswith("s1-"):
        who, where = got.get("who") or {}, got.get("where") or {}
        if who.get("action") != "accept":
            return result(id, text(f"elicitation {who.get('action')}"))
        name = who["content"]["name"]
        roots = ",".join(r["uri"] for r in where.get("roots", []))
        ask = {"method": "sampling/createMessage", "params": {"maxTokens": 20, "messages": [
            {"role": "user", "content": {"type": "text", "text": f"greet {name}"}}]}}
        return input_required(id, {"llm": ask}, f"s2-{id}|{name}|{roots}", ids)
    _, name, roots = state.split("|")
    llm = (got.get("llm") or {}).get("content", {}).get("text")
    result(id, text(f"name={name} roots={roots} llm={llm} rounds={len(ids) + 1} ids_distinct={len(set(ids + [id])) == len(ids) + 1}"))


def mark(line):
    """Appends a line to the --marks file (written and closed before going on)."""
    if marks:
        with open(marks, "a") as f:
            f.write(line + "\n")


def call_tool(id, params):
    tool = params.get("name")
    a = params.get("arguments") or {}
    mark(f"call {tool}")
    if tool == "mrtr" and era == "modern":
        mrtr(id, params, a)
    elif tool == "mrtr_forever" and era == "modern":
        state = params.get("requestState")
        ids = issued.pop(state, []) if state is not None else []
        input_required(id, None, f"f{len(ids)}-{id}", ids)
    elif tool == "echo":
        # stall_ms: the whole server stops for that long first (stdin unread).
        time.sleep(a.get("stall_ms", 0) / 1000)  # not ordering: the fake must stall (a test's premise)
        result(id, text(f"{name}:{a.get('text', '')}"))
    elif tool == "announce":
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        result(id, text("announced"))
    elif tool == "touch":
        uri = a.get("uri", "")
        if era == "modern":
            # Only on the listen streams that asked for this URI (patterns-subscriptions.mdx).
            for lid, uris in list(listens.items()):
                if uri in uris:
                    send({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                          "params": {"uri": uri, "_meta": {"io.modelcontextprotocol/subscriptionId": lid}}})
        else:
            send({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}})
        result(id, text(f"touched {uri}"))
    elif tool == "slow_echo":
        def later():
            time.sleep(a.get("ms", 100) / 1000)  # not ordering: a slow tool is the test's premise
            result(id, text(f"{name}:{a.get('text', '')}"))
        threading.Thread(target=later, daemon=True).start()
    elif tool == "exotic":
        result(id, {
            "content": [{"type": "hologram", "data": "3d", "annotations": {"audience": ["user"], "x-depth": 7}}],
            "_meta": {"com.example/trace": "abc-123"},
            "vendorExtension": {"nested": [1, 2, 3]},
        })
    elif tool in ("weird.name/with:chars", LONG):
        result(id, text(f"called as {tool}"))
    elif tool == "stats":
        result(id, text(json.dumps(seen)))
    elif tool == "crash":
        sys.stderr.write("fake upstream crashing on purpose\n")
        sys.stderr.flush()
        sys.exit(3)
    elif tool == "progress":
        token = (params.get("_meta") or {}).get("progressToken")
        # Modern era: log messages only from the request's logLevel up, none without it
        # (2026-07-28 changelog §Major changes 5).
        asked = (params.get("_meta") or {}).get("io.modelcontextprotocol/logLevel")
        levels = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
        logs = era != "modern" or (asked in levels and levels.index(asked) <= levels.index("info"))
        def run():
            for i in range(a.get("steps", 3)):
                if token is not None:
                    send({"jsonrpc": "2.0", "method": "notifications/progress",
                          "params": {"progressToken": token, "progress": i + 1, "total": a.get("steps", 3)}})
                if logs:
                    send({"jsonrpc": "2.0", "method": "notifications/message",
                          "params": {"level": "info", "data": f"step {i + 1} of {a.get('tag', '')}"}})
                time.sleep(a.get("ms", 20) / 1000)  # not ordering: the pace of a slow tool's progress
            result(id, {"content": [{"type": "text", "text": f"done; upstream saw token {json.dumps(token)}"}]})
        threading.Thread(target=run, daemon=True).start()
    elif tool == "ask":
        def run():
            rid = f"ask-{id}"
            ev = threading.Event()
            waiting[rid] = [ev, None]
            send({"jsonrpc": "2.0", "id": rid, "method": "sampling/createMessage",
                  "params": {"messages": [{"role": "user", "content": {"type": "text", "text": a.get("question", "?")}}], "maxTokens": 10}})
            if not ev.wait(10):
                return error(id, -32603, "client never answered")
            reply = waiting.pop(rid)[1]
            if "error" in reply:
                return result(id, text(f"client refused: {reply['error'].get('message')}"))
            result(id, text(f"client said: {reply['result']['content']['text']}"))
        threading.Thread(target=run, daemon=True).start()
    elif tool == "interview":
        # One server->client request per round: elicitation, then sampling,
        # then roots; answers with what the client gave (a JSON list).
        def run():
            got = []
            asks = [
                ("elicitation/create", {"message": a.get("question", "Your name?"), "requestedSchema": {
                    "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}),
                ("sampling/createMessage", {"messages": [{"role": "user", "content": {"type": "text", "text": "2+2?"}}], "maxTokens": 10}),
                ("roots/list", None),
            ][: a.get("rounds", 3)]
            def ask(i, method, p):
                rid = f"iv-{id}-{i}"
                waiting[rid] = [threading.Event(), None]
                msg = {"jsonrpc": "2.0", "id": rid, "method": method}
                if p is not None:
                    msg["params"] = p
                send(msg)
                return rid
            def ask_logged(i, method, p):
                send({"jsonrpc": "2.0", "method": "notifications/message",
                      "params": {"level": "info", "data": f"asking {method}"}})
                return ask(i, method, p)
            # together: every request sent at once (each after a log message), before any answer.
            rids = [ask_logged(i, m, p) for i, (m, p) in enumerate(asks)] if a.get("together") else []
            for i, (method, p) in enumerate(asks):
                rid = rids[i] if rids else ask(i, method, p)
                if not waiting[rid][0].wait(a.get("wait_s", 30)):
                    return error(id, -32603, "client never answered")
                reply = waiting.pop(rid)[1]
                if "error" in reply:
                    seen["refused"].append(f"{method}: {reply['error'].get('message')}")
                    return result(id, text(f"refused at {method}: {reply['error'].get('message')}"))
                got.append(reply["result"])
            result(id, text(json.dumps(got)))
        threading.Thread(target=run, daemon=True).start()
    elif tool == "big":
        result(id, text("x" * int(a.get("bytes", 1000))))
    else:
        error(id, -32602, f"Unknown tool: {tool}")


def handle(msg):
    global initialized
    method = msg.get("method")
    id = msg.get("id")
    params = msg.get("params") or {}
    if method is None and id in waiting:
        waiting[id][1] = msg
        waiting[id][0].set()
        return
    if id is None:
        if method == "notifications/initialized":
            initialized = True
        elif method == "notifications/cancelled":
            mark(f"cancelled {params.get('requestId')}")
            seen["cancelled"].append(params.get("requestId"))
            if listens.pop(params.get("requestId"), None) is not None:
                seen["subscribed"] = sorted(set().union(*listens.values()))
        return
    seen["requests"] += 1
    seen["methods"].append(method)
    meta = params.get("_meta") or {}
    if era == "modern":
        if method == "initialize":
            return error(id, -32601, "Method not found: initialize (modern-only server; supports 2026-07-28)")
        if meta.get("io.modelcontextprotocol/protocolVersion") != "2026-07-28":
            return error(id, -32022, "Unsupported protocol version")
        if method == "server/discover":
            return result(id, {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}, "prompts": {}, "resources": {"subscribe": modern_subscribe}},
                               "_meta": {"io.modelcontextprotocol/serverInfo": {"name": name, "version": "1"}}})
    else:
        if method == "initialize":
            return result(id, {"protocolVersion": params.get("protocolVersion", "2025-11-25"),
                               "capabilities": {"tools": {"listChanged": True}, "prompts": {}, "resources": {"subscribe": True}},
                               "serverInfo": {"name": name, "version": "1"}})
        if not initialized:
            return error(id, -32600, f"Server not initialized (got {method})")
        if any(k.startswith("io.modelcontextprotocol/") for k in meta):
            return error(id, -32602, "legacy upstream got modern _meta keys")
    if method == "ping":
        result(id, {})
    elif method == "tools/list":
        if fail_first_list[0]:
            fail_first_list[0] = False
            return error(id, -32603, "tools/list failed, this time")
        if looping:
            result(id, {"tools": TOOLS[:2], "nextCursor": "again"})
        elif page:
            start = int(params.get("cursor") or 0)
            nxt = start + page
            r = {"tools": TOOLS[start:nxt]}
            if nxt < len(TOOLS):
                r["nextCursor"] = str(nxt)
            result(id, r)
        else:
            result(id, {"tools": tools_now()})
    elif method == "tools/call":
        call_tool(id, params)
    elif method == "prompts/list":
        result(id, {"prompts": [{"name": "greet", "arguments": [{"name": "who"}]}]})
    elif method == "prompts/get":
        who = (params.get("arguments") or {}).get("who", "world")
        result(id, {"messages": [{"role": "user", "content": {"type": "text", "text": f"hello {who} from {name}"}}]})
    elif method == "resources/list":
        result(id, {"resources": [{"uri": f"fake://{name}/readme", "name": "readme"}]})
    elif method == "resources/templates/list":
        result(id, {"resourceTemplates": []})
    elif method == "subscriptions/listen" and era == "modern":
        filt = params.get("notifications") or {}
        uris = set(filt.get("resourceSubscriptions") or []) if modern_subscribe else set()
        listens[id] = uris
        seen["listens"] += 1
        seen["subscribed"] = sorted(set().union(*listens.values()))
        ack = {k: v for k, v in filt.items() if k != "resourceSubscriptions"}
        if modern_subscribe:
            ack["resourceSubscriptions"] = sorted(uris)
        send({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
              "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id}, "notifications": ack}})
    elif method == "resources/subscribe":
        if params.get("uri") not in seen["subscribed"]:
            seen["subscribed"].append(params.get("uri"))
        result(id, {})
    elif method == "resources/unsubscribe":
        if params.get("uri") in seen["subscribed"]:
            seen["subscribed"].remove(params.get("uri"))
        result(id, {})
    elif method == "resources/read":
        result(id, {"contents": [{"uri": params.get("uri"), "text": f"readme of {name}"}]})
    else:
        error(id, -32601, f"Method not found: {method}")


if "--noisy" in args:
    n = int(args[args.index("--noisy") + 1])
    evil = "forged\r2099-01-01 ERROR fake line\x00\x1b[31m\x7f\u0085\u009b end"
    sys.stderr.write(f"stderr: {evil}\n")
    sys.stdout.write(f"stdout: {evil}\n")
    for i in range(n):
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": "x", "params": {"pad": "\r\x1b" * 2048}}) + "\n")
        sys.stderr.write("\x1b[2J" * 4096 + "\n")
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": 900000 + i, "result": {}}) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
if "--http" in args:
    # --http [--sse|--pretty]: serves streamable HTTP on a loopback port it prints as its first
    # stdout line; each POST is answered with what handling it sent (the last message)
    # as JSON, or as one SSE event with --sse; a notification gets 202. For the tools
    # that answer at once (no server->client requests, no listen streams).
    import http.server

    sse = "--sse" in args
    pretty = "--pretty" in args  # JSON answers indented: line breaks in the body

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            msg = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            answers.out = []
            try:
                handle(msg)
            finally:
                out, answers.out = answers.out, None
            if not out:
                self.send_response(202)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            body = json.dumps(out[-1], indent=1 if pretty else None).encode()
            kind = "application/json"
            if sse:
                body, kind = b"event: message\ndata: " + body + b"\n\n", "text/event-stream"
            self.send_response(200)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.send_response(405)
            self.send_header("content-length", "0")
            self.end_headers()

        do_DELETE = do_GET

        def log_message(self, *a):
            pass

    initialized = True  # no session: every POST stands alone
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()
if "--slow-start" in args:
    time.sleep(int(args[args.index("--slow-start") + 1]) / 1000)  # not ordering: a slow server's start
for line in sys.stdin:
    line = line.strip()
    if line:
        handle(json.loads(line))
