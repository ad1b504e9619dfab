"""Table and verdict for tests/interop/conformance_v2.sh (stdlib only).

usage: conformance_v2_table.py OUT REQUIREMENTS_DIR "SETS" "TARGETS" SECONDS

Reads OUT/<set>/<target>/results/*/checks.json, prints per requirement set one row per scenario
(direct | via legacy upstream | via modern upstream, each passed/failed/warnings), lists every
check that fails through mcp-edge but not directly (a gateway regression, marked "!"), every check
the fixture fails directly, writes OUT/summary.json, and exits 1 if there is any regression.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys

STATUSES = ("SUCCESS", "FAILURE", "WARNING")
COLUMN = {"direct": "direct", "legacy": "via legacy upstream", "modern": "via modern upstream", "auto": "via auto upstream"}


def requirements(path: str) -> tuple[list[str], dict[str, str]]:
    """The `server:` list and the server-leg `not_scored` entries (scenario -> reason) of one
    requirements YAML file (its shape is fixed and simple: parsed by hand, no PyYAML)."""
    scored: list[str] = []
    unscored: dict[str, str] = {}
    section, pending = None, None
    for line in open(path, encoding="utf-8"):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            section = line.split(":")[0].strip()
            continue
        item = line.strip()
        if section == "server" and item.startswith("- "):
            scored.append(item[2:].strip())
        elif section == "not_scored":
            if item.startswith("- scenario:"):
                pending = {"scenario": item.split(":", 1)[1].strip()}
            elif pending is not None and ":" in item:
                k, v = item.split(":", 1)
                pending[k.strip()] = v.strip()
                if "leg" in pending and "reason" in pending:
                    if pending["leg"] == "server":
                        unscored[pending["scenario"]] = pending["reason"]
                    pending = None
    return scored, unscored


def load(results: str) -> dict[str, list[dict]]:
    """scenario -> its checks, from every results/<scenario>-<time>/checks.json."""
    out: dict[str, list[dict]] = {}
    for path in sorted(glob.glob(os.path.join(results, "*", "checks.json"))):
        scen = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", os.path.basename(os.path.dirname(path)))
        scen = scen[len("server-"):] if scen.startswith("server-") else scen
        try:
            checks = json.load(open(path, encoding="utf-8"))
        except Exception as e:  # garbage counts as one failure
            checks = [{"id": scen, "status": "FAILURE", "errorMessage": f"unreadable checks.json: {e}"}]
        out.setdefault(scen, []).extend(checks)
    return out


def counts(checks: list[dict] | None) -> dict[str, int] | None:
    if checks is None:
        return None
    return {k.lower(): sum(1 for c in checks if c.get("status") == k) for k in STATUSES}


def cell(c: dict[str, int] | None, regress: bool) -> str:
    if c is None:
        return "no result" + (" !" if regress else "")
    return f"{c['success']}/{c['failure']}/{c['warning']}" + (" !" if regress else "")


def failing_ids(checks: list[dict] | None) -> set[str]:
    return {str(c.get("id")) for c in checks or [] if c.get("status") == "FAILURE"}


def msg(c: dict) -> str:
    return " ".join((c.get("errorMessage") or "").split())[:220]


def known_differences(path: str) -> dict[tuple[str, str, str, str], str]:
    """(set, target, scenario, check) -> why it cannot pass through mcp-edge (conformance_v2_known.tsv)."""
    out = {}
    for line in open(path, encoding="utf-8"):
        if line.strip() and not line.startswith("#"):
            rset, target, scen, check, why = line.rstrip("\n").split("\t", 4)
            out[(rset, target, scen, check)] = why
    return out


def main() -> int:
    out, req_dir, sets, targets, seconds = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split(), int(sys.argv[5])
    summary: dict = {"sets": {}, "regressions": [], "fixture_failures": [], "seconds": seconds, "runs": {}}
    lines: list[str] = []
    per_set: dict = {}
    for rset in sets:
        scored, unscored = requirements(os.path.join(req_dir, f"{rset}.yaml"))
        data = {t: load(os.path.join(out, rset, t, "results")) for t in targets}
        per_set[rset] = data
        for t in targets:
            d = os.path.join(out, rset, t)
            summary["runs"][f"{rset}/{t}"] = {
                "exit_code": int(open(os.path.join(d, "exit_code")).read()),
                "seconds": int(open(os.path.join(d, "seconds")).read()),
            }
        names = scored + [s for s in unscored if s not in scored]
        names += sorted({s for t in targets for s in data[t]} - set(names))
        direct = data.get("direct", {})
        width = max(len(n) for n in names) + 2
        lines.append(f"\n--requirements {rset}   (cells: passed/failed/warnings; ! = fails through mcp-edge, not directly)")
        lines.append(f"{'scenario':{width}} {'scored':14} " + " ".join(f"{COLUMN[t]:>20}" for t in targets))
        rows = {}
        for scen in names:
            base = direct.get(scen)
            row = {"scored": scen in scored, "reason": unscored.get(scen), "targets": {}}
            cells = []
            for t in targets:
                checks = data[t].get(scen)
                regress = False
                if t != "direct" and "direct" in targets:
                    new_fail = failing_ids(checks) - failing_ids(base)
                    missing = checks is None and base is not None
                    regress = bool(new_fail) or missing
                    for c in checks or []:
                        if c.get("status") == "FAILURE" and str(c.get("id")) in new_fail:
                            summary["regressions"].append({"set": rset, "target": t, "scenario": scen,
                                                           "check": c.get("id"), "message": msg(c)})
                    if missing:
                        summary["regressions"].append({"set": rset, "target": t, "scenario": scen,
                                                       "check": None, "message": "no checks.json (scenario did not finish)"})
                row["targets"][t] = counts(checks)
                cells.append(cell(counts(checks), regress))
            for c in base or []:
                if c.get("status") == "FAILURE":
                    summary["fixture_failures"].append({"set": rset, "scenario": scen, "check": c.get("id"), "message": msg(c)})
            rows[scen] = row
            tag = "yes" if row["scored"] else f"no ({row['reason'] or 'extra'})"
            lines.append(f"{scen:{width}} {tag:14} " + " ".join(f"{x:>20}" for x in cells))
        tot = {t: {k: sum((r["targets"][t] or {}).get(k, 0) for r in rows.values()) for k in ("success", "failure", "warning")} for t in targets}
        lines.append(f"{'total':{width}} {'':14} " + " ".join(f"{cell(tot[t], False):>20}" for t in targets))
        summary["sets"][rset] = {"scenarios": rows, "totals": tot}
    print("\n".join(lines))
    if summary["fixture_failures"]:
        print("\nchecks the fixture fails when served directly (not counted against mcp-edge):")
        for f in summary["fixture_failures"]:
            print(f"  [{f['set']}] {f['scenario']} / {f['check']}: {f['message'][:160]}")
    known = known_differences(os.path.join(os.path.dirname(os.path.abspath(__file__)), "conformance_v2_known.tsv"))
    inherent = [r for r in summary["regressions"] if (r["set"], r["target"], r["scenario"], str(r["check"])) in known]
    summary["regressions"] = [r for r in summary["regressions"] if r not in inherent]
    summary["inherent"] = [dict(r, reason=known[(r["set"], r["target"], r["scenario"], str(r["check"]))]) for r in inherent]
    if inherent:
        print("\nchecks that fail through mcp-edge for a reason inherent in the bridge (conformance_v2_known.tsv):")
        for r in summary["inherent"]:
            print(f"  [{r['set']} via {r['target']}] {r['scenario']} / {r['check']}: {r['message'][:160]}\n      why: {r['reason']}")
    if summary["regressions"]:
        print("\nchecks that fail through mcp-edge but not directly (gateway regressions):")
        for r in summary["regressions"]:
            print(f"  [{r['set']} via {r['target']}] {r['scenario']} / {r['check']}: {r['message']}")
    # A run that produced no results at all (a broken CLI, a fixture that
    # never started) must not read as a pass.
    empty = [f"{rset}/{t}" for rset, data in per_set.items() for t in targets if not data.get(t)]
    if empty:
        print("\nruns without any checks.json (the suite did not run): " + ", ".join(empty))
    summary["ok"] = not summary["regressions"] and not empty
    json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)
    print(f"\nconformance v2: {len(summary['regressions'])} gateway regression(s), {len(inherent)} inherent in the bridge, "
          f"{len(summary['fixture_failures'])} check(s) failing directly; stage took {seconds}s "
          f"-> {'OK' if summary['ok'] else 'FAILED'}  (summary: {os.path.join(out, 'summary.json')})")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
