#!/usr/bin/env bash
# Several boxes (issue 26; README "Several boxes"): three release mcp-edge processes behind Debian's
# HAProxy with docs/fleet/haproxy.cfg (PROXY protocol v2) and behind Debian's nginx with
# docs/fleet/nginx.conf (X-Forwarded-For), driven by the pinned real MCP clients of tests/interop
# (Python SDK 1.30 legacy sessions, Python SDK 2.3 modern 2026-07-28 callers, the TypeScript SDK).
# Checks (tests/fleet/fleet.py): a) HAProxy's health checks reach /readyz on each box's listen port
# (check-send-proxy), legacy sessions land on the box their id names, the audit's peer is the
# client's own address, a per-peer limit applies to it; d) MRTR rounds with affinity by
# Authorization, and the "other_instance" error straight at another box; b) a rolling restart under
# load loses no modern call and sends no call upstream twice, each leaving box's listen-port /readyz
# answers 503 and HAProxy takes it out within drain_grace; c) the same routing through nginx, peer
# from X-Forwarded-For. Prints a table of figures; exit non-zero on any failure.
# Needs haproxy and nginx (Debian's haproxy and nginx-light: installed below when missing) and the peers
# of tests/interop/setup.sh (run here; fast when present). Logs: tests/fleet/out/ (git-ignored).
# Env: MCP_EDGE_BIN  the binary to test (default: built here with cargo build --release).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="$ROOT/tests/fleet/out"

# Debian's haproxy and nginx-light, installed here when missing (as tests/arm.sh installs its own),
# so the README's test command works on a fresh machine as .ci/run does; neither may start itself.
missing=()
command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
command -v nginx >/dev/null 2>&1 || missing+=(nginx-light)
if [ "${#missing[@]}" -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "fleet: ${missing[*]} missing and not root to install them (Debian: apt-get install haproxy nginx-light)" >&2; exit 1; }
  policy=/usr/sbin/policy-rc.d
  wrote_policy=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && wrote_policy=1
  fi
  echo "fleet: installing ${missing[*]}"
  rc=0
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } || rc=$?
  [ -z "$wrote_policy" ] || rm -f "$policy"
  [ "$rc" = 0 ] || { echo "fleet: apt-get install ${missing[*]} failed" >&2; exit 1; }
fi
command -v node >/dev/null 2>&1 || { echo "fleet: node not found (tests/interop/setup.sh needs it too)" >&2; exit 1; }
if [ -n "${MCP_EDGE_BIN:-}" ]; then
  BIN="$(realpath "$MCP_EDGE_BIN")"
else
  cargo build --release --quiet
  BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/mcp-edge"
fi
[ -x "$BIN" ] || { echo "fleet: $BIN is not an executable" >&2; exit 1; }
bash tests/interop/setup.sh >/dev/null

rm -rf "$OUT"
mkdir -p "$OUT"
echo "fleet: $BIN ($("$BIN" --version)), $(haproxy -v | head -1 | cut -d' ' -f1-3), $(nginx -v 2>&1 | cut -d' ' -f3)"

# Every process the run starts leads its own process group, listed in $OUT/pgids; stop them all
# on any exit (fleet.py stops them itself unless it is killed).
cleanup() {
  local pg
  [ -n "${RUNNER:-}" ] && kill -TERM -- "-$RUNNER" 2>/dev/null || true
  [ -f "$OUT/pgids" ] || return 0
  while read -r pg; do kill -TERM -- "-$pg" 2>/dev/null || true; done <"$OUT/pgids"
  sleep 1
  while read -r pg; do kill -KILL -- "-$pg" 2>/dev/null || true; done <"$OUT/pgids"
  [ -n "${RUNNER:-}" ] && kill -KILL -- "-$RUNNER" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# docs/fleet/k8s.yaml: parsed, its probes and grace checked, its rendered config served and probed as
# kubelet would (no cluster here).
K8S_PY=python3
python3 -c 'import yaml' >/dev/null 2>&1 || ! [ -x /usr/bin/python3 ] || K8S_PY=/usr/bin/python3
k8s_rc=0
"$K8S_PY" tests/fleet/k8s_check.py "$BIN" || k8s_rc=1

cd tests/fleet
setsid "$ROOT/tests/interop/.venv1/bin/python" fleet.py --bin "$BIN" --out "$OUT" &
RUNNER=$!
set +e
wait "$RUNNER"
rc=$?
set -e
RUNNER=
[ "$k8s_rc" -eq 0 ] || { echo "fleet: docs/fleet/k8s.yaml check failed (above)"; rc=1; }
exit "$rc"
