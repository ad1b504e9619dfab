"""Tables for tests/bench/bench.py: renders results.json as the Markdown section "Hot path (issue 14)" of
docs/benchmarks.md (and the same text on stdout). Python standard library only.

Re-render a saved run without measuring again: python3 tests/bench/bench_report.py tests/bench/out/results.json
(add --write-docs docs/benchmarks.md to replace the section there too)
"""
import json, statistics, sys

SECTION = "## Hot path (issue 14)"
PEER_NAMES = {"supergateway": "supergateway 4.0.0 (--stateful)", "mcp-proxy-npm": "npm mcp-proxy 6.7.19",
              "mcp-proxy-pypi": "PyPI mcp-proxy 0.12.0"}
UPSTREAM = {"stdio": "stdio echo (C)", "http": "HTTP (Python SDK)"}


def med(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def n(v, fmt="{:,.0f}", none="—"):
    return none if v is None else fmt.format(v)


def ms(us):
    return n(None if us is None else us / 1000, "{:.2f} ms")


def machine_lines(r):
    m, p = r["machine"], r["params"]
    lines = [f"- `nproc`: {m['nproc']} ({m['cpu']}, {m['mem_mib'] / 1024:.0f} GiB RAM), `uname -m`: {m['arch']}, "
             f"kernel {m['kernel']}",
             f"- load average at the end of the run: {' '.join(m['loadavg'])} (other builds share this machine: "
             "CPU figures are noisy)",
             f"- {m['rustc']}; mcp-edge checkout `{m['commit']}`; {m['wrk']}; node {m['node']}; {m['python']}"]
    for b in p["bins"]:
        lines.append(f"- binary `{b['label']}`: `{b['path']}` ({b['bytes']:,} bytes)")
    lines.append(f"- {p['rounds']} round(s) of {p['duration_s']:g} s per target, wrk -t{p['threads']} "
                 f"-c{p['connections']} (one-connection runs: -t1 -c1); the echo upstream is era "
                 f"`{p['echo_era']}` in mcp-edge's config; run took {r.get('elapsed_s', 0) / 60:.1f} min")
    return lines


def load_table(r, quick):
    out = ["| proxy | upstream | req/s | p50 | p99 | proxy CPU per call | allocations per call | "
           "RSS after load | answers |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for t in r["targets"]:
        runs = r["load"].get(t["key"])
        if t["kind"] == "direct" or runs is None and not t["failed"]:
            continue
        runs = runs or []
        checked = sum(x["good"] + x["bad"] for x in runs)
        ans = f"FAILED: {t['failed']}" if t["failed"] else f"ok ({checked:,} checked)"
        if t["failed"]:  # wrong answers: reported, not measured
            runs, t = [], {**t, "rss_kib": None}
        rps = None if quick else med(runs, "rps")
        out.append(f"| {t['name']} | {UPSTREAM[t['upstream']]} | {n(rps)} | {ms(med(runs, 'p50_us'))} | "
                   f"{ms(med(runs, 'p99_us'))} | {n(med(runs, 'cpu_us_per_call'), '{:,.0f} µs')} | "
                   f"{n(med(runs, 'allocs_per_call'), '{:,.1f}')} | "
                   f"{n(None if t['rss_kib'] is None else t['rss_kib'] / 1024, '{:.1f} MiB')} | {ans} |")
    return out


def one_table(r, quick):
    keys = [t for t in r["targets"] if t["key"] in r["one"] or (t["failed"] and t["kind"] == "direct")]
    keys.sort(key=lambda t: t["kind"] != "direct")  # the direct line first
    direct = next((t for t in keys if t["kind"] == "direct"), None)
    d50 = med(r["one"].get(direct["key"], []), "p50_us") if direct and not direct["failed"] else None
    by_round = {x["round"]: x["p50_us"] for x in r["one"].get(direct["key"], [])} if direct else {}
    out = ["| target | p50 | p99 | req/s | p50 / direct p50 | same, median of the rounds' ratios | answers |",
           "|---|---:|---:|---:|---:|---:|---|"]
    for t in keys:
        runs = [] if t["failed"] else r["one"].get(t["key"], [])
        p50 = med(runs, "p50_us")
        ratio = None if (p50 is None or not d50) else p50 / d50
        pairs = [x["p50_us"] / by_round[x["round"]] for x in runs if by_round.get(x["round"])]
        paired = statistics.median(pairs) if (pairs and d50) else None
        name = t["name"] if t["kind"] == "direct" else f"{t['name']} → HTTP upstream"
        ans = f"FAILED: {t['failed']}" if t["failed"] else "ok"
        out.append(f"| {name} | {ms(p50)} | {ms(med(runs, 'p99_us'))} | "
                   f"{n(None if quick else med(runs, 'rps'))} | "
                   f"{n(ratio, '{:.3f}')} | {n(paired, '{:.3f}')} | {ans} |")
    return out


def heap_table(r):
    out = ["| binary | downstream | answer bytes | live heap before | peak during the call | "
           "live heap 0.3 s after | heap per result byte |", "|---|---|---:|---:|---:|---:|---:|"]
    for h in r["heap"]:
        era = "legacy session" if h["era"] == "legacy" else "2026-07-28 stateless"
        if h.get("error"):
            out.append(f"| {h['binary']} | {era} | FAILED: {h['error']} | | | | |")
            continue
        per = n(h["bytes_per_result_byte"], "{:.2f} B") if h["measurable"] else "not measurable (peak set earlier)"
        if not h["correct"]:
            per = "FAILED: wrong answer"
        out.append(f"| {h['binary']} | {era} | {h['answer_bytes']:,} | {h['live_before']:,.0f} | "
                   f"{h['peak_after']:,.0f} | {h['live_after']:,.0f} | {per} |")
    return out


def rounds_table(r, quick):
    out = ["| target | upstream | connections | per round: req/s · p50 · CPU µs/call · allocations/call |",
           "|---|---|---:|---|"]
    for group in ("load", "one"):
        for t in r["targets"]:
            runs = r[group].get(t["key"])
            if not runs:
                continue
            cells = " / ".join(f"{'—' if quick else format(x['rps'], ',.0f')} · {x['p50_us'] / 1000:.2f} · {n(x['cpu_us_per_call'])} · "
                               f"{n(x['allocs_per_call'], '{:.1f}')}" for x in runs)
            out.append(f"| {t['name']} | {UPSTREAM[t['upstream']]} | {runs[0]['connections']} | {cells} |")
    return out


METHOD = """\
How (tests/bench/bench.py, tests/bench/call.lua, tests/bench/echo.c):
every target is driven by `wrk` with `call.lua`, which sends `tools/call` of the echo tool with a
unique JSON-RPC id per request (numbers and strings alternately) and checks every answer (status 200,
an id that was sent and not yet answered, the echoed text for that id). Targets alternate round by
round; figures are medians over the rounds. Proxy CPU per call = utime+stime of the proxy process
itself (`/proc/PID/stat`, children such as the echo not counted) over the run / answers; 10 ms
clock-tick resolution. Allocations per call = `mcp_edge_heap_allocations_total` delta on the admin
listener's `/metrics` / answers (a scrape's own allocations subtracted). RSS = `VmRSS` of the proxy
process after the last round. Each mcp-edge target is its own gateway process with one upstream
(`echo`: tests/bench/echo.c, a C stdio server; or `http`: tests/interop/fixture_http_server.py, the
Python SDK mcp 1.30 FastMCP, stateless, JSON responses); legacy runs open a session per run
(`initialize`, `DELETE` 0.5 s after the run), modern runs send the 2026-07-28 `_meta` and `MCP-Protocol-Version`/`Mcp-Method`/
`Mcp-Name` headers on each request. Peers run in their default configuration with the same C echo
behind them (supergateway with `--stateful`; npm mcp-proxy `--server stream`). Heap per result byte:
a fresh gateway (the peak cannot be reset over HTTP), 80 small calls, then one `big` call with a
4 MiB text: (`mcp_edge_heap_peak_bytes` after − `mcp_edge_heap_live_bytes` before) / answer bytes.
Before round 1 every target gets an unmeasured warm-up run (answers checked all the same)."""


def render(r):
    quick = r["params"]["quick"]
    p = r["params"]
    lines = [SECTION, "", "_Written by `tests/bench/run.sh` (tests/bench/bench_report.py); a new run replaces this "
             "section up to the next `## ` heading, so notes about it belong in a section of their own._", ""]
    if quick:
        lines += ["**--quick run: a few hundred requests per target; it checks the harness and the answers. "
                  "Throughput is not measured and the other figures are not meaningful.**", ""]
    lines += ["### Command", "", "```sh", p["command"], "```", "", "### Machine", ""] + machine_lines(r)
    lines += ["", "### Method", "", METHOD, ""]
    lines += [f"### Load: {p['connections']} connections, stdio echo or HTTP upstream behind each proxy", ""]
    lines += load_table(r, quick)
    lines += ["", "### mcp-edge in front of an HTTP upstream at one connection (wrk -t1 -c1)", ""]
    lines += one_table(r, quick)
    lines += ["", "### Heap per in-flight result byte (one call, 4 MiB result, stdio echo upstream)", ""]
    lines += heap_table(r)
    lines += ["", "### Every round", ""] + rounds_table(r, quick)
    if r["failed"]:
        lines += ["", "**FAILED:** " + ", ".join(r["failed"])]
    return "\n".join(lines) + "\n"


def write_docs(path, section):
    """Replaces the section (from its heading to the next `## ` heading) or appends it."""
    with open(path) as f:
        text = f.read()
    start = text.find(SECTION + "\n")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        nxt = text.find("\n## ", start + len(SECTION))
        rest = "" if nxt < 0 else text[nxt:]
        text = text[:start] + section.rstrip("\n") + "\n" + rest
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: bench_report.py RESULTS.json [--write-docs DOCS.md]")
    with open(sys.argv[1]) as f:
        text = render(json.load(f))
    print(text)
    if len(sys.argv) == 4 and sys.argv[2] == "--write-docs":
        write_docs(sys.argv[3], text)
