# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The audit's reports: JSON for machines, JUnit XML for CI and AWX, Markdown for people.

Rendered from ``run_matrix_check``'s result by the module that computed it:
at 10,000 nodes the result is several megabytes, which Jinja templates and
``to_nice_json`` on the controller took seconds to turn into files.
"""

from __future__ import annotations

import json
import os
import tempfile
import xml.etree.ElementTree as ET
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._fleet import cluster_file_name

REPORT_EXTENSIONS = {"json": "json", "junit": "xml", "markdown": "md"}


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
    if result["violations"]:
        lines += ["", "## Violations", "", "| rule | stage | why it matters | finding |", "|---|---|---|---|"]
        for rule in result["violations"]:
            for finding in rule["findings"]:
                if finding["status"] == VIOLATION:
                    lines.append(_row(rule["rule"], rule["stage"], rule["reason"], finding["message"]))
    plan = result["plan"]
    lines += ["", f"## Plan from current_production to {plan['to']}", ""]
    for step in plan["steps"]:
        changes = ", ".join(f"{change['component']} {change['from']} → {change['to']}" for change in step["changes"])
        lines.append(f"{step['step']}. **{step['group']}**: {changes}")
    if not plan["steps"]:
        lines.append("Nothing to change.")
    if drift is not None:
        lines += ["", "## Drift summary by component", "", "| component | ok | drift | unknown |", "|---|---|---|---|"]
        for component, counts in sorted(drift["summary"].items()):
            lines.append(_row(component, counts["ok"], counts["drift"], counts["unknown"]))
        if drift["nodes_with_drift"]:
            lines += [
                "",
                "## Nodes that drifted",
                "",
                "| node | role | component | expected | found | read from |",
                "|---|---|---|---|---|---|",
            ]
            for node in drift["nodes"]:
                rows = node["components"] if node["status"] == DRIFT else ()
                for row in (row for row in rows if row["status"] == DRIFT):
                    cells = (row["component"], row["expected"], row["found"], row["source"])
                    lines.append(_row(node["node"], node["role"], *cells))
    return "\n".join(lines) + "\n"


def _row(*cells: Any) -> str:
    return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"


def render_reports(result: Mapping[str, Any]) -> Dict[str, str]:
    """Report kind (``json``, ``junit``, ``markdown``) to its text."""
    return {"json": render_json(result), "junit": render_junit(result), "markdown": render_markdown(result)}


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

    Each file is replaced atomically (a reader never sees half a report).
    """
    names = report_files(cluster)
    paths = {kind: os.path.join(directory, names[kind]) for kind in reports}
    stale = [kind for kind in reports if _read(paths[kind]) != reports[kind]]
    if stale and not check_mode:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        for kind in stale:
            handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{names[kind]}.")
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(reports[kind])
            os.chmod(temporary, 0o644)
            os.replace(temporary, paths[kind])
    return paths, bool(stale)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""
