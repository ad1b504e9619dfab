#!/usr/bin/env bash
# The project's one test command:  tests/run_all.sh
#   0. tests/gates.sh              fmt --check, clippy -D warnings, cargo deny (bans licenses sources),
#                                  tests/it/structure.rs (module layering, no circles, function/file length,
#                                  no test sleep that orders events)
#   1. tests/interop/setup.sh      install the pinned real MCP peers into tests/interop/ (fast when present)
#   2. cargo nextest run --all-targets --no-fail-fast + cargo test --doc   (cargo test --all-targets --no-fail-fast
#      when nextest is absent: one failing test never hides the others); the integration tests are one
#      binary, tests/it (a module per area), so they link once;
#      then its properties module with --nocapture (prints each property's case count)
#   3. tests/interop/conformance.sh  official MCP conformance suite (0.1.16) against the release gateway
#      tests/interop/conformance_v2.sh  conformance 0.2.0-alpha.12, --requirements 2025-11-25 and 2026-07-28
#                                    (incl. the tasks scenarios), fixture direct vs through mcp-edge with the
#                                    fixture as legacy, modern and auto (dual-era) upstream; fails on any gateway regression
#      tests/interop/conformance_oauth.sh  its client side: every auth/* scenario of both requirement sets
#                                    (+ client-credentials-basic/-jwt), mcp-edge with the scenario's server
#                                    as an [upstream.oauth] upstream (tests/interop/oauth_client.py); table printed
#   4. tests/interop/readme_smoke.sh the README's `cargo run --release` + Inspector CLI lines
#   5. tests/fleet/fleet.sh          several boxes (issue 26): three release gateways behind Debian's HAProxy
#                                    (docs/fleet/haproxy.cfg, PROXY v2) and nginx (docs/fleet/nginx.conf,
#                                    X-Forwarded-For) with the pinned SDK clients: session routing, the client's
#                                    address in audit and per-peer limits, MRTR affinity, a rolling restart under
#                                    load that loses no call; prints its figures (~1.5 min)
#   6. tests/arm.sh                  ARM: aarch64 test suite under qemu-user, release builds for aarch64-gnu,
#                                    armv7 and aarch64-musl (glibc <= 2.31, musl static), each run under qemu
#   7. tests/deb.sh                  .deb for amd64 and arm64 (cargo-deb), contents checked, amd64 installed under CI
#   8. tests/bench/run.sh --quick    the hot-path benchmark's harness (issue 14): pinned peer proxies, the C echo
#                                    upstream, a few hundred checked calls per target; prints its tables (~1 min)
# Stage 0 and stages 2 to 8 all run even if one fails; the exit code is non-zero if any stage failed.
# Disk: builds here are not incremental (CARGO_INCREMENTAL=0 unless set: incremental state was as large as
# the test binaries and a full run only builds each target once), and each stage prints the free space.
# Time and disk of stage 2: docs/benchmarks.md, "Test stage (issue 24)".
# Under CI (CI set, as .ci/run does) a stage's build outputs that no later stage reads are removed when
# it ends (target/debug after stage 2, the aarch64 test build inside tests/arm.sh): a CI machine once
# ran out of disk in stage 6 (then numbered 5). A developer's own run never deletes anything.
set -euo pipefail
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
failed=()

TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
stage() {
  printf '\n==== %s ====\n' "$*"
  df -h "$ROOT" | awk 'NR == 2 { print "[disk] " $4 " free on " $6 }'
}
# ci_prune DIR...: under CI only, remove build outputs no later stage needs.
ci_prune() {
  [ -n "${CI:-}" ] || return 0
  echo "[disk] CI: removing $*"
  rm -rf "$@"
}

stage "0/8 gates: tests/gates.sh"
bash tests/gates.sh || failed+=("gates")

stage "1/8 interop peers: tests/interop/setup.sh"
bash tests/interop/setup.sh   # fatal on failure: nothing below can run without the peers

stage "2/8 cargo tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --all-targets --no-fail-fast --no-tests=warn || failed+=("cargo nextest")
  cargo test --doc || failed+=("cargo test --doc")
else
  cargo test --all-targets --no-fail-fast || failed+=("cargo test")
fi
# The property tests again with their output, so the log shows each
# property's case count (nextest prints output only on failure); ~1 s.
cargo test --test it -- properties:: --nocapture --test-threads=1 || failed+=("properties")
ci_prune "$TARGET/debug"

stage "3/8 conformance: tests/interop/conformance.sh, tests/interop/conformance_v2.sh"
bash tests/interop/conformance.sh || failed+=("conformance")
bash tests/interop/conformance_v2.sh || failed+=("conformance v2")
bash tests/interop/conformance_oauth.sh || failed+=("conformance oauth")

stage "4/8 README run command: tests/interop/readme_smoke.sh"
bash tests/interop/readme_smoke.sh || failed+=("readme smoke")

stage "5/8 several boxes: tests/fleet/fleet.sh"
bash tests/fleet/fleet.sh || failed+=("fleet")

stage "6/8 ARM cross builds: tests/arm.sh"
bash tests/arm.sh || failed+=("arm")

stage "7/8 Debian packages: tests/deb.sh"
bash tests/deb.sh || failed+=("deb")

stage "8/8 benchmark harness: tests/bench/run.sh --quick"
bash tests/bench/run.sh --quick || failed+=("bench quick")

echo
if [ "${#failed[@]}" -gt 0 ]; then
  echo "run_all: FAILED stages: ${failed[*]}"
  exit 1
fi
echo "run_all: all stages passed"
