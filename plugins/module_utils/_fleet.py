# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""A fleet is an inventory: cluster names in file names, and the fleet summary (collection-internal, pure).

Every playbook runs over an inventory group, one host per cluster. Each host
hands back one *cluster result* (its outcome, versions, drift and the files it
wrote); the summary lists them all, says which failed, and renders as JSON and
Markdown. Summaries of AWX job slices (each slice ran part of the inventory)
merge into one: the same function reads one summary or many.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._report_html import render_fleet_html

SUMMARY_KIND = "gpufleet.upgrade/fleet-summary"
SUMMARY_VERSION = 1
# Outcomes that make the fleet run fail (and its exit status non-zero).
FAILED_OUTCOMES = ("failed", "refused", "drift", "unreachable", "stuck")
# "stuck": playbooks/diagnose.yml found a node that does not move in an upgrade.
OUTCOMES = ("success", "unchanged", "drift", "failed", "refused", "unreachable", "skipped", "stuck")
# A cluster's name goes into file names: letters, digits, '.', '_' and '-', as Kubernetes object names allow.
_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252})$")
_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def check_cluster_name(name: str, *, option: str = "cluster_name") -> str:
    """``name`` when it can name files (empty stays empty); otherwise an error naming the option and the value."""
    if name and not _CLUSTER_NAME.match(name):
        raise InvalidInputError(
            f"{option} {name!r} cannot name a file: use letters, digits, '.', '_' and '-' (at most 253), "
            "starting with a letter or digit"
        )
    return name


def cluster_file_name(base: str, cluster: str, extension: str) -> str:
    """``<base>-<cluster>.<extension>``, or ``<base>.<extension>`` without a cluster name."""
    return f"{base}-{cluster}.{extension}" if cluster else f"{base}.{extension}"


def summary_file_names(run: str) -> Dict[str, str]:
    """The summary's two files for one kind of run (``audit``, ``canary``, ...)."""
    if not _RUN_NAME.match(run or ""):
        raise InvalidInputError(f"run {run!r} cannot name a file: use letters, digits, '.', '_' and '-'")
    return {
        "json": f"fleet-summary-{run}.json",
        "markdown": f"fleet-summary-{run}.md",
        "html": f"fleet-summary-{run}.html",
    }


def _cluster_entry(result: Mapping[str, Any], *, where: str) -> Dict[str, Any]:
    cluster = str(result.get("cluster") or "")
    if not cluster:
        raise InvalidInputError(f"{where} has no cluster name (key 'cluster')")
    check_cluster_name(cluster, option=f"{where}: cluster")
    outcome = str(result.get("outcome") or "")
    if outcome not in OUTCOMES:
        raise InvalidInputError(f"{where} (cluster {cluster}): outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
    drift = result.get("drift") or {}
    return {
        "cluster": cluster,
        "outcome": outcome,
        "failed": outcome in FAILED_OUTCOMES,
        "message": str(result.get("message") or ""),
        "api_server": str(result.get("api_server") or ""),
        "versions": dict(result.get("versions") or {}),
        "versions_before": dict(result.get("versions_before") or {}),
        "drift": {
            "nodes_with_drift": sorted(drift.get("nodes_with_drift") or []),
            "nodes_total": int(drift.get("nodes_total") or 0),
            "components": sorted(drift.get("components") or []),
        },
        "reports": sorted(str(path) for path in (result.get("reports") or [])),
        "ledger": str(result.get("ledger") or ""),
        "finished_at": str(result.get("finished_at") or ""),
    }


def build_summary(
    *,
    run: str,
    results: Iterable[Mapping[str, Any]] = (),
    summaries: Sequence[Mapping[str, Any]] = (),
    actor: str = "",
    generated_at: str = "",
) -> Dict[str, Any]:
    """One summary of the clusters in ``results`` and in earlier ``summaries`` (job slices), by cluster name.

    A cluster in two inputs (a slice run again) keeps its entry with the latest ``finished_at``;
    at equal times the later input wins, and ``results`` come after ``summaries``.
    """
    summary_file_names(run)  # the run names files: refuse a bad one before anything else
    clusters: Dict[str, Dict[str, Any]] = {}
    slices = 0
    inputs: List[Tuple[str, Mapping[str, Any]]] = []
    for position, summary in enumerate(summaries):
        where = f"summary {position + 1}"
        if summary.get("kind") != SUMMARY_KIND:
            raise InvalidInputError(
                f"{where} is not a fleet summary (kind {summary.get('kind')!r}, not {SUMMARY_KIND})"
            )
        if summary.get("run") != run:
            raise InvalidInputError(f"{where} summarises run {summary.get('run')!r}, not {run!r}: they do not merge")
        slices += int(summary.get("slices") or 1)
        inputs += [(f"{where}, cluster {index + 1}", item) for index, item in enumerate(summary.get("clusters") or [])]
    own = list(results)
    if own:
        slices += 1
    inputs += [(f"result {index + 1}", item) for index, item in enumerate(own)]
    for where, item in inputs:
        entry = _cluster_entry(item, where=where)
        known = clusters.get(entry["cluster"])
        if known is None or entry["finished_at"] >= known["finished_at"]:
            clusters[entry["cluster"]] = entry
    ordered = [clusters[name] for name in sorted(clusters)]
    by_outcome = {
        outcome: [entry["cluster"] for entry in ordered if entry["outcome"] == outcome] for outcome in OUTCOMES
    }
    failed = [entry["cluster"] for entry in ordered if entry["failed"]]
    return {
        "kind": SUMMARY_KIND,
        "version": SUMMARY_VERSION,
        "run": run,
        "generated_at": generated_at,
        "actor": actor,
        "slices": slices,
        "clusters_total": len(ordered),
        "failed": bool(failed),
        "failed_clusters": failed,
        "by_outcome": {outcome: names for outcome, names in by_outcome.items() if names},
        "clusters": ordered,
    }


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _versions_text(entry: Mapping[str, Any]) -> str:
    after, before = entry.get("versions") or {}, entry.get("versions_before") or {}
    parts = []
    for component in sorted(after):
        old = before.get(component)
        parts.append(
            f"{component} {old} -> {after[component]}"
            if old and old != after[component]
            else f"{component} {after[component]}"
        )
    return ", ".join(parts) or "-"


def _drift_text(entry: Mapping[str, Any]) -> str:
    drift = entry.get("drift") or {}
    nodes, components = drift.get("nodes_with_drift") or [], drift.get("components") or []
    parts = []
    if nodes:
        shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
        parts.append(f"{len(nodes)} of {drift.get('nodes_total') or '?'} nodes ({shown})")
    if components:
        parts.append("cluster-wide " + ", ".join(components))
    return "; ".join(parts) or "none"


def fleet_verdict(summary: Mapping[str, Any]) -> str:
    clusters = summary.get("clusters") or []
    failed = summary.get("failed_clusters") or []
    return (
        f"{len(failed)} of {len(clusters)} clusters FAILED ({', '.join(failed)})"
        if failed
        else f"all {len(clusters)} clusters passed"
    )


def fleet_rows(summary: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """One row per cluster: outcome, versions, drift, message and the files of its reports and ledger."""
    return [
        {
            "cluster": entry.get("cluster"),
            "outcome": entry.get("outcome"),
            "failed": bool(entry.get("failed")),
            "versions": _versions_text(entry),
            "drift": _drift_text(entry),
            "message": entry.get("message") or "",
            "files": [str(path) for path in entry.get("reports") or []]
            + ([entry["ledger"]] if entry.get("ledger") else []),
        }
        for entry in summary.get("clusters") or []
    ]


def render_markdown(summary: Mapping[str, Any]) -> str:
    """The summary for a person: the verdict first, then one row per cluster."""
    lines = [f"# Fleet {summary.get('run')}: {fleet_verdict(summary)}", ""]
    counts = ", ".join(f"{outcome} {len(names)}" for outcome, names in (summary.get("by_outcome") or {}).items())
    lines.append(
        f"Generated {summary.get('generated_at') or '?'} by {summary.get('actor') or 'unknown'}"
        f" from {summary.get('slices') or 1} job slice(s) · {counts or 'no clusters'}"
    )
    lines += ["", "| cluster | outcome | versions | drift | message | reports |", "|---|---|---|---|---|---|"]
    for row in fleet_rows(summary):
        cells = [row["cluster"], row["outcome"], row["versions"], row["drift"], row["message"]]
        cells.append("<br>".join(f"`{path}`" for path in row["files"]) or "-")
        lines.append("| " + " | ".join(_cell(value) for value in cells) + " |")
    return "\n".join(lines) + "\n"


def render_html(summary: Mapping[str, Any]) -> str:
    """The summary as one self-contained page (needs Jinja2: HAS_JINJA2)."""
    return render_fleet_html(summary, rows=fleet_rows(summary), verdict=fleet_verdict(summary))
