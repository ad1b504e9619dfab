#!/usr/bin/env bash
# Upstream OAuth through mcp-edge (issue 22): the conformance suite's client side.
#
# Runs @modelcontextprotocol/conformance 0.2.0-alpha.12 (tests/interop/.conf2; Node 22 from .node22)
# `conformance client --scenario auth/X --spec-version V` for every auth/* client scenario the
# 2025-11-25 and 2026-07-28 requirements name, at each of those versions it belongs to, the two
# 2025-03-26 fall-back scenarios, and the extension scenarios auth/client-credentials-basic and
# auth/client-credentials-jwt at both. The
# client command is tests/interop/oauth_client.py: mcp-edge with the scenario's server as an HTTP
# upstream with [upstream.oauth], `mcp-edge login` where the grant needs a person, a tool called
# through the gateway.
#
# Prints one table (scenario | version | result | checks passed/failed/warnings) and writes
# out/conformance_oauth/summary.json; exits 1 if any scenario fails (the suite's own verdict:
# a FAILURE or WARNING check, a timeout, or a client error where the scenario expects success).
# Output per run: out/conformance_oauth/<version>/auth/<scenario>-<time>/{checks.json,stdout.txt,stderr.txt}.
# Env: MCP_EDGE_BIN (use this binary, skip the cargo build), CONFORMANCE_OAUTH_ONLY (a regex of
#      scenario names to run), CONFORMANCE_OAUTH_TIMEOUT (ms per scenario, default 60000).
set -euo pipefail

I="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$I/../.." && pwd)"
OUT="$I/out/conformance_oauth"
CONF="$I/.conf2/node_modules/.bin/conformance"
PY="$I/.venv1/bin/python"
TIMEOUT="${CONFORMANCE_OAUTH_TIMEOUT:-60000}"
T0=$(date +%s)

say() { printf '[conformance-oauth %3ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { printf '[conformance-oauth] ERROR: %s\n' "$*" >&2; exit 1; }

[ -x "$PY" ] && [ -x "$I/.node22/bin/node" ] && [ -x "$CONF" ] \
  || die "interop peers missing: run tests/interop/setup.sh"
export PATH="$I/.node22/bin:$PATH"

if [ -n "${MCP_EDGE_BIN:-}" ]; then
  BIN="$MCP_EDGE_BIN"
  say "using MCP_EDGE_BIN=$BIN (no build)"
else
  say "cargo build --release"
  (cd "$ROOT" && cargo build --release)
  BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/mcp-edge"
fi
[ -x "$BIN" ] || die "$BIN not found or not executable"
export MCP_EDGE_BIN="$BIN"

rm -rf "$OUT"
mkdir -p "$OUT"

# "scenario version" pairs: each auth scenario at each required version it lists, then the extensions.
runs="$("$CONF" list --client 2>/dev/null | "$PY" -c '
import re, sys
want = ("2025-11-25", "2026-07-28")
also = ("2025-03-26",)  # the 2025-03-26 fall-backs the issue names
for line in sys.stdin:
    m = re.match(r"\s*-\s+(auth/\S+)\s+\[([^\]]*)\]", line)
    if not m:
        continue
    name, versions = m.group(1), [v.strip() for v in m.group(2).split(",")]
    if versions == ["extension"]:
        if name in ("auth/client-credentials-basic", "auth/client-credentials-jwt"):
            for v in want:
                print(name, v, "ext")
        continue
    for v in versions:
        if v in want:
            print(name, v, "req")
        elif v in also:
            print(name, v, "old")
')"
[ -n "$runs" ] || die "conformance list --client named no auth scenarios"
if [ -n "${CONFORMANCE_OAUTH_ONLY:-}" ]; then
  runs="$(printf '%s\n' "$runs" | grep -E "${CONFORMANCE_OAUTH_ONLY}" || true)"
fi

rows=()
failed=0
while read -r scen ver kind; do
  [ -n "$scen" ] || continue
  dir="$OUT/$ver"
  mkdir -p "$dir"
  force=()
  [ "$kind" = ext ] && force=(--force)
  log="$dir/$(echo "$scen" | tr / _).log"
  if "$CONF" client --command "$PY $I/oauth_client.py" --scenario "$scen" --spec-version "$ver" \
      "${force[@]}" --timeout "$TIMEOUT" -o "$dir" >"$log" 2>&1; then
    result=PASSED
  else
    result=FAILED
    failed=$((failed + 1))
  fi
  counts="$(grep -aE '^Passed: ' "$log" | tail -1 || true)"
  rows+=("$scen|$ver|$result|${counts:-no result}")
  say "$scen ($ver): $result ${counts}"
done <<<"$runs"

echo
printf '%-48s %-11s %-7s %s\n' "scenario" "version" "result" "checks"
for r in "${rows[@]}"; do
  IFS='|' read -r s v res c <<<"$r"
  printf '%-48s %-11s %-7s %s\n' "$s" "$v" "$res" "$c"
done
printf '%s\n' "${rows[@]}" | "$PY" -c '
import json, sys
rows = [dict(zip(("scenario", "version", "result", "checks"), l.rstrip("\n").split("|"))) for l in sys.stdin if l.strip()]
json.dump({"runs": rows, "failed": sum(r["result"] != "PASSED" for r in rows)}, open(sys.argv[1], "w"), indent=1)
' "$OUT/summary.json"
say "${#rows[@]} runs, $failed failed; table in $OUT/summary.json"
[ "$failed" -eq 0 ]
