"""Checks docs/fleet/k8s.yaml without a cluster (tests/fleet/fleet.sh): it parses as YAML (PyYAML,
which Debian's python3 has as python3-yaml; without it the check says so and passes), its
StatefulSet gives the pods a termination grace above drain_grace + the shutdown grace, and the
config its init container renders for pod edge-0 passes `mcp-edge check-config` (the token file
and state directory pointed at temporary ones).

usage: python3 k8s_check.py MCP_EDGE_BIN
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SHUTDOWN_GRACE = 10


def main() -> int:
    try:
        import yaml
    except ImportError:
        print("k8s: docs/fleet/k8s.yaml not checked: this python3 has no PyYAML (Debian: python3-yaml)")
        return 0
    docs = [d for d in yaml.safe_load_all((ROOT / "docs" / "fleet" / "k8s.yaml").read_text()) if d]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    ss = next(d for d in docs if d["kind"] == "StatefulSet")
    pod = ss["spec"]["template"]["spec"]
    problems = []
    text = cm["data"]["config.toml.in"]
    grace = float(re.search(r'drain_grace = "(\d+)s"', text).group(1))
    if pod["terminationGracePeriodSeconds"] <= grace + SHUTDOWN_GRACE:
        problems.append(f"terminationGracePeriodSeconds {pod['terminationGracePeriodSeconds']} <= drain_grace + {SHUTDOWN_GRACE}")
    c = pod["containers"][0]
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        cmd = " ".join(c[probe]["exec"]["command"])
        if path not in cmd or "Host: localhost" not in cmd:
            problems.append(f"{probe} does not GET {path} with a loopback Host: {cmd!r}")
    with tempfile.TemporaryDirectory() as d:
        token = Path(d) / "agents"
        token.write_text("mcpe_k8s_check_token_0123456789abcdefghijklmnop\n")
        token.chmod(0o600)
        state = Path(d) / "state"
        state.mkdir()
        rendered = (
            text.replace("@POD_NAME@", "edge-0")
            .replace("/etc/mcp-edge-tokens/agents", str(token))
            .replace("/var/lib/mcp-edge", str(state))
        )
        cfg = Path(d) / "config.toml"
        cfg.write_text(rendered)
        r = subprocess.run([sys.argv[1], "check-config", str(cfg)], capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"check-config of the rendered config: {r.stdout[-800:]}{r.stderr[-800:]}")
    for p in problems:
        print(f"k8s: FAIL: {p}")
    if not problems:
        print(f"k8s: docs/fleet/k8s.yaml parses ({', '.join(f'{k} {n}' for k, n in sorted(kinds))}); "
              f"pod edge-0's config passes check-config; termination grace {pod['terminationGracePeriodSeconds']} s")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main())
