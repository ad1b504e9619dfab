#!/usr/bin/env bash
# The README's run command, checked as a user would: `cargo run --release` (the
# embedded default: built-in `edge` tools on 127.0.0.1:8737), then the README's
# Inspector CLI lines (the pinned copy in tests/interop). Exit non-zero on any failure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
URL=http://127.0.0.1:8737/mcp
if (exec 3<>/dev/tcp/127.0.0.1/8737) 2>/dev/null; then
  echo "readme_smoke: port 8737 is already in use; stop whatever listens there" >&2
  exit 1
fi
mkdir -p tests/interop/out
LOG=tests/interop/out/readme_smoke.log
cargo build --release --quiet
setsid cargo run --release --quiet >"$LOG" 2>&1 &
PGID=$!
trap 'kill -- -$PGID 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  grep -q "listening on" "$LOG" 2>/dev/null && break
  sleep 0.1
done
grep -q "listening on $URL" "$LOG" || { echo "readme_smoke: gateway did not start:"; cat "$LOG"; exit 1; }
cd tests/interop
list=$(npx --no-install @modelcontextprotocol/inspector --cli "$URL" --method tools/list)
for t in edge__uptime edge__load_average edge__memory edge__disk_usage edge__thermal; do
  grep -q "\"$t\"" <<<"$list" || { echo "readme_smoke: $t missing from tools/list:"; echo "$list"; exit 1; }
done
call=$(npx --no-install @modelcontextprotocol/inspector --cli "$URL" --method tools/call --tool-name edge__disk_usage --tool-arg path=/)
grep -q '"total_bytes"' <<<"$call" || { echo "readme_smoke: unexpected tools/call result:"; echo "$call"; exit 1; }
echo "readme_smoke: cargo run --release serves the edge tools to the Inspector CLI: ok"
