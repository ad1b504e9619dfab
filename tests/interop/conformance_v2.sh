#!/usr/bin/env bash
# Conformance, both requirement sets, both upstream eras (issue 13 part 7).
#
# Runs @modelcontextprotocol/conformance 0.2.0-alpha.12 (tests/interop/.conf2, pinned by
# node22-conf2/package-lock.json; Node 22 from .node22) with `--requirements 2025-11-25` and
# `--requirements 2026-07-28` against tests/interop/conformance_server_v2.py (Python mcp==2.3.0,
# .venv2, both eras on one streamable-HTTP endpoint) reached three ways:
#   direct   the fixture itself                                 (baseline: what the fixture passes)
#   legacy   mcp-edge, the fixture as an HTTP upstream with era = "legacy"
#   modern   mcp-edge, the fixture as an HTTP upstream with era = "modern"
#   auto     mcp-edge, the fixture as an HTTP upstream with era = "auto" (found dual-era: each
#            caller spoken to in its own era)
# Each target gets its own fixture process, so one target's leftovers cannot disturb another.
# `--requirements 2026-07-28` also runs, unscored, every tasks scenario of `--suite all`
# (io.modelcontextprotocol/tasks, SEP-2663) and the pending ones (json-schema-2020-12,
# http-header-validation, http-custom-header-server-validation); they are in the table too.
#
# Prints one table (scenario | direct | via legacy upstream | via modern upstream, each as
# passed/failed/warnings) and writes out/conformance_v2/summary.json. A check that FAILS through
# mcp-edge while the same check (scenario + check id) does not fail directly is a gateway
# regression; the script exits 1 if there is any. A check the fixture itself fails directly is
# shown (and listed in summary.json under fixture_failures) but not counted against the gateway.
#
# Output: out/conformance_v2/<set>/<target>/results/<scenario>-<time>/checks.json, suite.log per
# run, gateway-<era>.log, fixture-<target>.log, summary.json.
# Env: MCP_EDGE_BIN (use this binary, skip the cargo build), CONFORMANCE_V2_SETS (default
#      "2025-11-25 2026-07-28"), CONFORMANCE_V2_TARGETS (default "direct legacy modern auto"),
#      CONFORMANCE_V2_TIMEOUT (seconds per suite run, default 180: with 4 gateway runs the stage is
#      bounded near 13 min even if the gateway hangs every call; it takes ~45 s when nothing hangs),
#      CONFORMANCE_V2_SCENARIO_TIMEOUT (ms per scenario, the suite's --timeout, default 15000).
set -euo pipefail

I="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$I/../.." && pwd)"
OUT="$I/out/conformance_v2"
SETS="${CONFORMANCE_V2_SETS:-2025-11-25 2026-07-28}"
TARGETS="${CONFORMANCE_V2_TARGETS:-direct legacy modern auto}"
RUN_TIMEOUT="${CONFORMANCE_V2_TIMEOUT:-180}"
SCEN_TIMEOUT="${CONFORMANCE_V2_SCENARIO_TIMEOUT:-15000}"
PY="$I/.venv2/bin/python"
CONF="$I/.conf2/node_modules/.bin/conformance"
T0=$(date +%s)

say() { printf '[conformance-v2 %3ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { printf '[conformance-v2] ERROR: %s\n' "$*" >&2; exit 1; }

[ -x "$PY" ] && [ -x "$I/.node22/bin/node" ] && [ -x "$CONF" ] \
  || die "interop peers missing: run tests/interop/setup.sh"

if [ -n "${MCP_EDGE_BIN:-}" ]; then
  BIN="$MCP_EDGE_BIN"
  say "using MCP_EDGE_BIN=$BIN (no build)"
else
  say "cargo build --release"
  (cd "$ROOT" && cargo build --release)
  BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/mcp-edge"
fi
[ -x "$BIN" ] || die "$BIN not found or not executable"

rm -rf "$OUT"
mkdir -p "$OUT"
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
toml_str() { local s="${1//\\/\\\\}"; printf '"%s"' "${s//\"/\\\"}"; }

PIDS=()   # each started in its own process group (setsid): fixtures and gateways
cleanup() {
  local rc=$? p
  for p in "${PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_port PID PORT LOG [TEXT]: until PID listens on PORT (and LOG holds TEXT), 30 s at most
wait_port() {
  local pid="$1" port="$2" log="$3" text="${4:-}"
  for _ in $(seq 300); do
    kill -0 "$pid" 2>/dev/null || { tail -n 30 "$log" >&2 || true; die "process $pid exited early (log: $log)"; }
    if { [ -z "$text" ] || grep -q "$text" "$log" 2>/dev/null; } && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  tail -n 30 "$log" >&2 || true
  die "nothing listening on 127.0.0.1:$port after 30 s (log: $log)"
}

# start_fixture TARGET -> sets FIXTURE_URL
start_fixture() {
  local port log
  port="$(free_port)"
  log="$OUT/fixture-$1.log"
  setsid "$PY" "$I/conformance_server_v2.py" "$port" >"$log" 2>&1 </dev/null &
  PIDS+=("$!")
  wait_port "$!" "$port" "$log"
  FIXTURE_URL="http://127.0.0.1:$port/mcp"
}

# start_gateway ERA UPSTREAM_URL -> sets GATEWAY_URL
start_gateway() {
  local era="$1" up="$2" port cfg log
  port="$(free_port)"
  cfg="$OUT/mcp-edge-$era.toml"
  log="$OUT/gateway-$era.log"
  cat > "$cfg" <<EOF
# generated by tests/interop/conformance_v2.sh
[server]
listen = "127.0.0.1:$port"
admin_listen = "off"               # two gateways run side by side

[[upstream]]
name = "conf"
transport = "http"
url = $(toml_str "$up")
prefix = ""
era = "$era"
EOF
  setsid "$BIN" serve --config "$cfg" >"$OUT/gateway-$era.stdout.log" 2>"$log" </dev/null &
  PIDS+=("$!")
  wait_port "$!" "$port" "$log" "mcp-edge listening on"
  GATEWAY_URL="http://127.0.0.1:$port/mcp"
}

declare -A URL
for target in $TARGETS; do
  start_fixture "$target"
  case "$target" in
    direct) URL[$target]="$FIXTURE_URL" ;;
    legacy|modern|auto) start_gateway "$target" "$FIXTURE_URL"; URL[$target]="$GATEWAY_URL" ;;
    *) die "unknown target $target (direct, legacy, modern, auto)" ;;
  esac
  say "$target: ${URL[$target]}"
done

for set in $SETS; do
  for target in $TARGETS; do
    dir="$OUT/$set/$target"
    mkdir -p "$dir/results"
    t1=$(date +%s)
    set +e
    PATH="$I/.node22/bin:$PATH" timeout "$RUN_TIMEOUT" "$CONF" server --url "${URL[$target]}" \
      --requirements "$set" --timeout "$SCEN_TIMEOUT" -o "$dir/results" >"$dir/suite.log" 2>&1
    rc=$?
    set -e
    echo "$rc" > "$dir/exit_code"
    echo "$(( $(date +%s) - t1 ))" > "$dir/seconds"
    say "--requirements $set via $target: suite exit $rc in $(( $(date +%s) - t1 ))s"
    [ "$rc" -ne 124 ] || say "WARNING: $set via $target hit the ${RUN_TIMEOUT}s timeout"
  done
done

"$PY" "$I/conformance_v2_table.py" "$OUT" "$I/.conf2/node_modules/@modelcontextprotocol/conformance/requirements" \
  "$SETS" "$TARGETS" "$(( $(date +%s) - T0 ))"
