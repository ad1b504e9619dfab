#!/usr/bin/env bash
# The hot-path benchmark (issue 14): mcp-edge side by side with the proxies people install from npm and
# PyPI, each with the same fast C stdio echo server behind it, plus mcp-edge in front of an HTTP upstream.
#
#   tests/bench/run.sh [--quick] [--bin LABEL=PATH]... [--duration S] [--rounds N] [--connections N]
#                      [--threads N] [--warmup S] [--echo-era legacy|modern|auto] [--peers a,b,c] [--no-docs]
#
#   1. installs what it needs, pinned, into the git-ignored tests/bench/.peers/ (fast when present):
#        npm/   npm ci from tests/bench/peers/package.json + package-lock.json (system node >= 20, as
#               tests/interop/setup.sh uses): mcp-proxy 6.7.19, supergateway 4.0.0
#        venv/  Python venv from tests/bench/peers/requirements.txt: PyPI mcp-proxy 0.12.0 with mcp 1.30.0
#               (its Python also serves the HTTP upstream, tests/interop/fixture_http_server.py)
#      and `wrk` (apt-get, when missing and running as root);
#   2. compiles tests/bench/echo.c with cc into $CARGO_TARGET_DIR/bench/echo;
#   3. without --bin: cargo build --release, and measures target/release/mcp-edge (label "this");
#      --bin LABEL=PATH (repeatable) measures those binaries side by side instead (before/after a change);
#   4. runs tests/bench/bench.py: prints the tables and, unless --quick or --no-docs (or a target failed), rewrites the section
#      "Hot path (issue 14)" of docs/benchmarks.md; raw figures in tests/bench/out/results.json.
#   5. runs tests/bench/spawn.py for each binary: start-to-ready of 8 stdio echo children with
#      sandbox = "off" and "strict" (issue 23), and the sandbox's cost per child (printed only);
# --quick (CI): one round of at most 300 requests per target: checks that the harness runs and every
# answer is right; prints the tables, writes no docs. Defaults: 3 rounds of 10 s, 16 connections, 2 wrk
# threads, 2 s of unmeasured warm-up per target; the echo is an era-"legacy" upstream in mcp-edge's config
# (as the peers speak to it); --peers takes a subset of supergateway,mcp-proxy-npm,mcp-proxy-pypi.
# Exit code non-zero when any target answered wrongly or could not be measured.
# Env: PYTHON (default python3, >= 3.10 with venv), NPM (default npm), CARGO_TARGET_DIR.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
NPM="${NPM:-npm}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
T0=$(date +%s)
say() { printf '[bench %3ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { printf '[bench] ERROR: %s\n' "$*" >&2; exit 1; }
sha() { cat "$@" | sha256sum | cut -d' ' -f1; }

args=() bins=() quick=0 docs=1
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) [ $# -ge 2 ] || die "--bin needs LABEL=PATH"; bins+=(--bin "$2"); shift 2 ;;
    --bin=*) bins+=(--bin "${1#--bin=}"); shift ;;
    --quick) quick=1; args+=(--quick); shift ;;
    --no-docs) docs=0; shift ;;
    --duration|--rounds|--connections|--threads|--warmup|--echo-era|--peers)
      [ $# -ge 2 ] || die "$1 needs a value"; args+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,24p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[ "$quick" = 1 ] || [ "$docs" = 0 ] || args+=(--write-docs)

# ---------------------------------------------------------------- prerequisites
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (need Python >= 3.10 with venv)"
"$PYTHON" -c 'import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null \
  || die "$PYTHON must be >= 3.10 with venv/ensurepip (Debian: apt-get install python3-venv)"
command -v node >/dev/null 2>&1 || die "node not found (need Node >= 20; Debian: apt-get install nodejs npm)"
command -v "$NPM" >/dev/null 2>&1 || die "npm not found"
[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ] || die "node is $(node -v); need >= 20"
command -v cc >/dev/null 2>&1 || die "cc not found (Debian: apt-get install gcc)"
if ! command -v wrk >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
    || die "wrk not found (Debian: apt-get install wrk)"
  say "installing wrk (apt-get)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wrk >/dev/null; } \
    || die "apt-get install wrk failed"
fi

# ---------------------------------------------------------------- peers (pinned, git-ignored .peers/)
mkdir -p "$HERE/.peers"
exec 9>"$HERE/.peers/.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
NPMDIR="$HERE/.peers/npm"
mkdir -p "$NPMDIR"
for f in package.json package-lock.json; do
  cmp -s "$HERE/peers/$f" "$NPMDIR/$f" || cp "$HERE/peers/$f" "$NPMDIR/$f"
done
stamp="$(sha "$NPMDIR/package.json" "$NPMDIR/package-lock.json")-$(node -v)"
if [ "$(cat "$NPMDIR/node_modules/.mcp-edge-stamp" 2>/dev/null)" != "$stamp" ]; then
  say "npm ci: mcp-proxy 6.7.19, supergateway 4.0.0"
  (cd "$NPMDIR" && "$NPM" ci --no-audit --no-fund --loglevel=error)
  echo "$stamp" > "$NPMDIR/node_modules/.mcp-edge-stamp"
fi
for p in mcp-proxy:6.7.19 supergateway:4.0.0; do
  v="$(node -p "require('$NPMDIR/node_modules/${p%%:*}/package.json').version")"
  [ "$v" = "${p#*:}" ] || die "npm ${p%%:*} is $v, expected ${p#*:}"
done
VENV="$HERE/.peers/venv"
PYV="$("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
stamp="$(sha "$HERE/peers/requirements.txt")-py$PYV"
if [ ! -x "$VENV/bin/mcp-proxy" ] || [ "$(cat "$VENV/.mcp-edge-stamp" 2>/dev/null)" != "$stamp" ]; then
  say "venv: PyPI mcp-proxy 0.12.0 (mcp 1.30.0), exact pins from peers/requirements.txt"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$HERE/peers/requirements.txt"
  echo "$stamp" > "$VENV/.mcp-edge-stamp"
fi
v="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp-proxy"), m.version("mcp"))')"
[ "$v" = "0.12.0 1.30.0" ] || die "venv has mcp-proxy/mcp $v, expected 0.12.0 1.30.0"
exec 9>&-

# ---------------------------------------------------------------- the echo upstream and the gateway
mkdir -p "$TARGET/bench"
cc -O2 -o "$TARGET/bench/echo" "$HERE/echo.c"
cmdline="tests/bench/run.sh"
for w in "${bins[@]}" "${args[@]}"; do [ "$w" = --write-docs ] || cmdline+=" $w"; done
if [ "${#bins[@]}" -eq 0 ]; then
  say "cargo build --release"
  (cd "$ROOT" && cargo build --release --quiet)
  bins=(--bin "this=$TARGET/release/mcp-edge")
fi
say "peers and echo ready; measuring"
"$PYTHON" "$HERE/bench.py" "${bins[@]}" --echo "$TARGET/bench/echo" --command "$cmdline" "${args[@]}"
rounds=9; [ "$quick" = 1 ] && rounds=2
for ((i = 1; i < ${#bins[@]}; i += 2)); do
  say "spawn cost of the stdio sandbox: ${bins[$i]}"
  "$PYTHON" "$HERE/spawn.py" --bin "${bins[$i]#*=}" --echo "$TARGET/bench/echo" --rounds "$rounds"
done
say "done in $(( $(date +%s) - T0 ))s"
