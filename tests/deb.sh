#!/usr/bin/env bash
# Debian packages (cargo-deb metadata in Cargo.toml): builds the amd64 package
# from the native release build and the arm64 one from the aarch64 release
# binary that tests/arm.sh left in target/aarch64-unknown-linux-gnu/release/
# (glibc floor via zigbuild); checks both with `dpkg-deb -c`; under CI
# installs the amd64 one with `dpkg -i`, runs it, and purges it again.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CARGO_DEB_VERSION=3.8.0

if ! cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
  echo "[deb] installing cargo-deb $CARGO_DEB_VERSION"
  cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked
fi

want=(
  ./usr/bin/mcp-edge
  ./usr/lib/systemd/system/mcp-edge.service
  ./etc/mcp-edge/config.toml
  ./usr/share/doc/mcp-edge/README.md
)
for b in rpi-zero-2w rpi4-2gb rpi5-8gb generic-arm64; do
  want+=("./usr/share/mcp-edge/board/$b/profile.toml"
         "./usr/share/mcp-edge/board/$b/mcp-edge.service.d/memory.conf"
         "./usr/share/mcp-edge/board/$b/mcp-edge.service.d/board.conf")
done

check() { # DEB ARCH
  local deb="$1" arch="$2" listing
  listing="$(dpkg-deb -c "$deb" | awk '{print $6}')"
  for f in "${want[@]}"; do
    grep -qxF "$f" <<<"$listing" || { echo "[deb] $deb lacks $f" >&2; return 1; }
  done
  [ "$(dpkg-deb -f "$deb" Architecture)" = "$arch" ] || { echo "[deb] $deb is not $arch" >&2; return 1; }
  echo "[deb] $deb: $arch, $(grep -c . <<<"$listing") entries, all ${#want[@]} expected files present"
  dpkg-deb -f "$deb" Depends
}

echo "[deb] amd64"
cargo build --release
amd64="$(cargo deb --no-build | tail -1)"
check "$amd64" amd64

if [ -x target/aarch64-unknown-linux-gnu/release/mcp-edge ]; then
  echo "[deb] arm64 (binary from tests/arm.sh)"
  arm64="$(cargo deb --no-build --no-strip --variant glibc217 --target aarch64-unknown-linux-gnu | tail -1)"
  check "$arm64" arm64
  [ "$(dpkg-deb -f "$arm64" Depends)" = "libc6 (>= 2.17)" ] || { echo "[deb] $arm64: wrong Depends" >&2; exit 1; }
else
  echo "[deb] ARM64 PACKAGE NOT BUILT: no target/aarch64-unknown-linux-gnu/release/mcp-edge (tests/arm.sh builds it)"
fi

if [ "${CI:-}" = "true" ] && [ "$(id -u)" = 0 ]; then
  echo "[deb] dpkg -i $amd64"
  dpkg -i "$amd64"
  /usr/bin/mcp-edge --version
  /usr/bin/mcp-edge check-config --board rpi4-2gb /etc/mcp-edge/config.toml | tail -1
  systemd-analyze verify /usr/lib/systemd/system/mcp-edge.service
  dpkg -P mcp-edge
else
  echo "[deb] dpkg -i skipped (only under CI=true as root: it installs into this machine)"
fi
