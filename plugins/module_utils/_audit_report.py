# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The audit's reports: JSON for machines, JUnit XML for CI and AWX, Markdown and HTML for people.

Rendered from ``run_matrix_check``'s result by the module that computed it:
at 10,000 nodes the result is several megabytes, which Jinja templates and
``to_nice_json`` on the controller took seconds to turn into files.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import xml.etree.ElementTree as ET
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._fleet import cluster_file_name
from ansible_collections.gpufleet.upgrade.plugins.module_utils._report_html import HAS_JINJA2, render_audit_html

REPORT_EXTENSIONS = {"json": "json", "junit": "xml", "markdown": "md", "html": "html"}


def report_files(cluster: str = "") -> Dict[str, str]:
    """Report kind to file name: ``audit-<cluster>.json`` and so on, ``audit.json`` without a cluster name."""
    return {kind: cluster_file_name("audit", cluster, extension) for kind, extension in REPORT_EXTENSIONS.items()}


DRIFT = "drift"
VIOLATION = "violation"
WARNING = "warning"


def render_json(result: Mapping[str, Any]) -> str:
    # Compact: ``indent`` makes json use its pure-Python encoder, 6x slower on a 10,000-node result (``jq .`` reads it).
    return json.dumps(result, sort_keys=True, separators=(",", ":")) + "\n"


def render_junit(result: Mapping[str, Any]) -> str:
    """One testsuite for the rules, one for the drift audit; a violation or a drift is a failure."""
    cluster = result.get("cluster_name") or ""
    suites = ET.Element("testsuites", name="gpufleet.upgrade audit" + (f" of {cluster}" if cluster else ""))
    rules = result["rules"]["results"]
    rule_suite = ET.SubElement(
        suites,
        "testsuite",
        name="matrix rules",
        tests=str(len(rules)),
        failures=str(sum(1 for rule in rules if rule["status"] == VIOLATION)),
    )
    for rule in rules:
        case = ET.SubElement(rule_suite, "testcase", classname=f"rules.{rule['stage']}", name=rule["rule"])
        messages = "; ".join(finding["message"] for finding in rule["findings"])
        if rule["status"] == VIOLATION:
            ET.SubElement(case, "failure", message=messages).text = rule["reason"]
        elif rule["status"] == WARNING:
            ET.SubElement(case, "system-out").text = f"warning: {messages}"
    drift = result.get("drift")
    if drift:
        nodes, cluster = drift.get("nodes") or [], drift.get("cluster") or []
        drift_suite = ET.SubElement(
            suites,
            "testsuite",
            name="drift",
            tests=str(len(nodes) + len(cluster)),
            failures=str(len(drift["nodes_with_drift"]) + sum(1 for row in cluster if row["status"] == DRIFT)),
        )
        for row in cluster:
            case = ET.SubElement(drift_suite, "testcase", classname="drift.cluster", name=row["component"])
            if row["status"] == DRIFT:
                failure = ET.SubElement(case, "failure", message=f"expected {row['expected']}, found {row['found']}")
                failure.text = row.get("source") or ""
        for node in nodes:
            case = ET.SubElement(drift_suite, "testcase", classname="drift.nodes", name=node["node"])
            if node["status"] == DRIFT:
                ET.SubElement(case, "failure", message="; ".join(_drifted_rows(node)))
    ET.indent(suites, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _drifted_rows(node: Mapping[str, Any]) -> List[str]:
    return [
        f"{row['component']}: expected {row['expected']}, found {row['found']}"
        for row in node["components"]
        if row["status"] == DRIFT
    ]


def missing_data_hint(component: str) -> str:
    """What to give the audit so it can read a component it could not."""
    if component.startswith("firmware_"):
        return (
            "NIC firmware is read from the BMCs' Redfish FirmwareInventory: give the audit audit_firmware_by_node "
            "(the nic_firmware role's preflight reads it), or label the nodes gpufleet.io/firmware.<name>"
        )
    if component in ("kernel", "openshift"):
        return "read from the Node's status.nodeInfo and the ClusterVersion: the audit's account needs to read them"
    return "no pod, label or object showed it: the operator may not be installed, or the audit's account cannot read it"


def warning_lines(result: Mapping[str, Any]) -> List[str]:
    """Every warning the audit counted, each with what it is about (a count alone says nothing)."""
    found = []
    for rule in result["rules"]["results"]:
        if rule["status"] != WARNING:
            continue
        messages = [finding["message"] for finding in rule["findings"] if finding.get("status") in (WARNING, None)]
        for message in messages or [rule["reason"]]:
            found.append(f"rule {rule['rule']} ({rule['stage']}): {message}")
    for warning in result.get("matrix_warnings") or []:
        text = f"matrix: {warning.get('message')}"
        if text not in found and not any(str(warning.get("message")) in line for line in found):
            found.append(text)
    return found


def component_rows(drift: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """Per component: the values expected and found (with how many nodes), the counts, and a hint when unknown."""
    expected: Dict[str, Dict[str, int]] = {}
    found: Dict[str, Dict[str, int]] = {}
    for node in drift.get("nodes") or []:
        for row in node["components"]:
            expected.setdefault(row["component"], {}).setdefault(str(row["expected"]), 0)
            expected[row["component"]][str(row["expected"])] += 1
            seen = str(row["found"]) if row["found"] is not None else "unknown"
            found.setdefault(row["component"], {}).setdefault(seen, 0)
            found[row["component"]][seen] += 1
    for row in drift.get("cluster") or []:
        expected.setdefault(row["component"], {})[str(row["expected"])] = 1
        found.setdefault(row["component"], {})[str(row["found"]) if row["found"] else "unknown"] = 1
    rows = []
    for component, counts in sorted(drift["summary"].items()):
        rows.append(
            {
                "component": component,
                "expected": ", ".join(f"{v} ({n})" for v, n in sorted(expected.get(component, {}).items())),
                "found": ", ".join(f"{v} ({n})" for v, n in sorted(found.get(component, {}).items())),
                "ok": counts["ok"],
                "drift": counts["drift"],
                "unknown": counts["unknown"],
                "hint": missing_data_hint(component) if counts["unknown"] else "",
            }
        )
    return rows


def drifted_rows(drift: Mapping[str, Any]) -> List[List[Any]]:
    """(node, role, component, expected, found, read from) of every drifted component of every node."""
    return [
        [node["node"], node["role"], row["component"], row["expected"], row["found"], row["source"]]
        for node in drift.get("nodes") or []
        if node["status"] == DRIFT
        for row in node["components"]
        if row["status"] == DRIFT
    ]


def render_markdown(result: Mapping[str, Any]) -> str:
    rules, drift = result["rules"], result.get("drift")
    cluster = result.get("cluster_name") or ""
    lines = [
        f"# GPU cluster audit: {cluster}" if cluster else "# GPU cluster audit",
        "",
        f"Matrix: `{result['matrix_source']}` · rules: **{rules['status']}**",
        f"({rules['counts']['violation']} violations, {rules['counts']['warning']} warnings)",
    ]
    if drift is not None:
        lines.append(f"· drift: **{len(drift['nodes_with_drift'])} of {drift['nodes_total']} nodes**")
    if result.get("checked_at"):
        lines += ["", f"Checked at {result['checked_at']} (the cluster's clock: the API server's Date header)."]
    if result["violations"]:
        lines += ["", "## Violations", "", "| rule | stage | why it matters | finding |", "|---|---|---|---|"]
        for rule in result["violations"]:
            for finding in rule["findings"]:
                if finding["status"] == VIOLATION:
                    lines.append(_row(rule["rule"], rule["stage"], rule["reason"], finding["message"]))
    warnings = warning_lines(result)
    if warnings:
        lines += ["", "## Warnings", ""]
        lines += [f"- {warning}" for warning in warnings]
    plan = result["plan"]
    lines += ["", f"## Plan from current_production to {plan['to']}", ""]
    for step in plan["steps"]:
        changes = ", ".join(f"{change['component']} {change['from']} → {change['to']}" for change in step["changes"])
        lines.append(f"{step['step']}. **{step['group']}**: {changes}")
    if not plan["steps"]:
        lines.append("Nothing to change.")
    if drift is not None:
        lines += [
            "",
            "## Drift summary by component",
            "",
            "| component | expected (nodes) | found (nodes) | ok | drift | unknown | where data is missing |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in component_rows(drift):
            lines.append(_row(*row.values()))
        if drift["nodes_with_drift"]:
            lines += [
                "",
                "## Nodes that drifted",
                "",
                "| node | role | component | expected | found | read from |",
                "|---|---|---|---|---|---|",
            ]
            lines += [_row(*cells) for cells in drifted_rows(drift)]
    return "\n".join(lines) + "\n"


def _row(*cells: Any) -> str:
    return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"


def render_reports(result: Mapping[str, Any]) -> Dict[str, str]:
    """Report kind (``json``, ``junit``, ``markdown``, and ``html`` where Jinja2 is importable) to its text."""
    reports = {"json": render_json(result), "junit": render_junit(result), "markdown": render_markdown(result)}
    if HAS_JINJA2:
        reports["html"] = render_audit_html(
            result,
            warnings=warning_lines(result),
            components=component_rows(result["drift"]) if result.get("drift") else [],
            drifted=drifted_rows(result["drift"]) if result.get("drift") else [],
        )
    return reports


def publish_result(result: Dict[str, Any], *, report_dir: Optional[str], drift_nodes: str, check_mode: bool) -> bool:
    """Write the reports (when asked) and trim the returned node table; whether a report file changed."""
    changed = False
    if report_dir:
        try:
            result["reports"], changed = write_reports(
                report_dir, render_reports(result), check_mode=check_mode, cluster=result.get("cluster_name") or ""
            )
        except OSError as err:
            raise InvalidInputError(f"Cannot write the audit reports to {report_dir}: {err}") from err
    if drift_nodes == "drifted" and "drift" in result:
        result["drift"]["nodes"] = [node for node in result["drift"]["nodes"] if node["status"] == DRIFT]
    return changed


def write_reports(
    directory: str, reports: Mapping[str, str], *, check_mode: bool, cluster: str = ""
) -> Tuple[Dict[str, str], bool]:
    """Write each report whose content differs from the file there; return the paths and whether any changed.

    Each file is replaced atomically (a reader never sees half a report). A report that differs only in its
    times (when the audit ran) is written but is no change: an audit of an unchanged cluster changes nothing.
    """
    names = report_files(cluster)
    paths = {kind: os.path.join(directory, names[kind]) for kind in reports}
    before = {kind: _read(paths[kind]) for kind in reports}
    stale = [kind for kind in reports if before[kind] != reports[kind]]
    changed = any(_TIMES.sub("", before[kind]) != _TIMES.sub("", reports[kind]) for kind in stale)
    if stale and not check_mode:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        for kind in stale:
            handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{names[kind]}.")
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(reports[kind])
            os.chmod(temporary, 0o644)
            os.replace(temporary, paths[kind])
    return paths, changed


# ISO 8601 times (the check time in every report format), set aside when deciding whether a report changed.
_TIMES = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""
