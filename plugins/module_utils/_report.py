# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The human report of one run of the upgrade flow (collection-internal, pure).

Written for a person who has a minute: the first lines say what happened,
to what, where and how long it took; then what failed and why, what to do
next, and the details (gates, node timeline, versions) below. The input is
the ledger entry of the run, so the report and the ledger never disagree.
"""

from __future__ import annotations

import datetime
from typing import Any, Dict, Iterable, List, Mapping, Sequence

from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, parse_time

STAGE_TITLES = {"canary": "Canary", "bake": "Bake check", "promote": "Promotion", "rollback": "Rollback"}
OUTCOME_WORDS = {
    "success": "succeeded",
    "failed": "FAILED",
    "refused": "refused (nothing was changed)",
    "unchanged": "nothing to do (nothing was changed)",
}


def report_file_name(stage: str, recorded_at: str, *, cluster: str = "") -> str:
    """``upgrade-[<cluster>-]<stage>-<YYYYmmddTHHMMSSZ>.md`` from the entry's cluster time."""
    stamp = "".join(ch for ch in recorded_at if ch.isalnum()) or "unknown-time"
    return f"upgrade-{cluster + '-' if cluster else ''}{stage}-{stamp}.md"


def duration_text(seconds: Any) -> str:
    try:
        total = round(float(seconds))
    except (TypeError, ValueError):
        return "unknown"
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> List[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return lines


def change_summary(entry: Mapping[str, Any]) -> str:
    changes = entry.get("changes") or []
    group = entry.get("group_title") or entry.get("group") or "no component group"
    if not changes:
        return f"{group}: no version change"
    parts = [f"{c.get('component')} {c.get('from') or '-'} -> {c.get('to') or '-'}" for c in changes]
    return f"{group}: " + ", ".join(parts)


def failures(entry: Mapping[str, Any]) -> List[str]:
    """Every reason the run failed, refused or found a problem, most important first."""
    found: List[str] = []
    if entry.get("outcome") in ("failed", "refused") and entry.get("message"):
        found.append(str(entry["message"]))
    for report in entry.get("gates") or []:
        for verdict in report.get("gates") or []:
            if not verdict.get("passed"):
                found.append(f"gate {verdict.get('gate')} on {verdict.get('node')}: {verdict.get('reason')}")
    for step in not_restored(entry):
        found.append(
            f"{step.get('what')} ({step.get('object')}) is still changed: restore with `{step.get('restore')}`"
        )
    for failure in entry.get("failures") or []:
        if isinstance(failure, Mapping):
            node = failure.get("node")
            reason = failure.get("reason") or failure.get("message") or failure
            found.append(f"{node}: {reason}" if node else str(reason))
        else:
            found.append(str(failure))
    unique: List[str] = []
    for item in found:
        if item not in unique:
            unique.append(item)
    return unique


def operator_text(operator: Any) -> str:
    """An OLM reinstall of the operator (OLM does not downgrade): from, to, and how far it got."""
    reinstall = operator.get("reinstall") if isinstance(operator, Mapping) else None
    if not isinstance(reinstall, Mapping):
        return ""
    text = f"reinstalled through OLM, {reinstall.get('from_csv')} -> {reinstall.get('to_csv')}"
    if reinstall.get("channel"):
        text += f" (channel {reinstall['channel']}"
        text += f", InstallPlan {reinstall['install_plan']})" if reinstall.get("install_plan") else ")"
    if not reinstall.get("completed"):
        text = "NOT FINISHED: " + text.replace("reinstalled", "being reinstalled", 1)
    return text


def not_restored(entry: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    """Pre-steps of the stage (SR-IOV scale-down, policy deletion, ...) still in place."""
    return [step for step in entry.get("pre_steps") or [] if isinstance(step, Mapping) and not step.get("restored")]


def next_step(entry: Mapping[str, Any]) -> str:
    """What a person (or the schedule) does next."""
    stage, outcome = entry.get("stage"), entry.get("outcome")
    bake = entry.get("bake") or {}
    if entry.get("next"):
        return str(entry["next"])  # the stage said what works from here (a refused rollback's way forward)
    if outcome == "refused":
        return "Fix what the refusal names, then run the stage again."
    if outcome == "failed" and stage in ("canary", "promote") and entry.get("forward_only"):
        # A change that cannot be undone (OpenShift's control plane has moved): the way back to a cluster that
        # agrees with the matrix is forward, by resuming the stage once its cause is fixed.
        return (
            f"{entry['forward_only']} Fix what halted it (the failures above), then run stage={stage} again: it "
            "resumes where it stopped" + (", then bake and promote as usual" if stage == "canary" else "") + ". "
            "stage=rollback cannot undo it."
        )
    if outcome == "failed" and stage in ("canary", "promote") and entry.get("cluster_changed") is False:
        return f"Nothing on the cluster was changed: fix what failed, then run stage={stage} again."
    if outcome == "failed" and entry.get("gates_could_not_run"):
        unjudged = (
            "The validation gates could not run because of the cluster: the Kubernetes API failed them, or their "
            "pods found no room on the node (an infrastructure failure, not a verdict on the node). "
        )
        if stage == "rollback":
            return (
                unjudged + "The software is back to known-good; validate the node once the cluster can run the gates."
            )
        if stage == "bake":
            return unjudged + "Run stage=bake again once the cluster can run the gates."
        if stage == "promote":
            return unjudged + "Run stage=promote again once the cluster can run the gates (the matrix was not changed)."
        return unjudged + "Run stage=rollback to return the canary node to production, then try the canary again."
    if stage == "canary" and outcome == "success":
        ends = bake.get("ends_at") or _hours_after(entry.get("recorded_at"), bake.get("required_hours", 48))
        return f"Let the canary bake until {ends} (cluster time), checked by stage=bake; then run stage=promote."
    if stage == "canary" and outcome == "failed":
        return "Read the failures above, then run stage=rollback to return the canary node to production."
    if stage == "bake" and outcome == "success":
        if bake.get("remaining_hours"):
            return (
                f"Keep baking: {bake.get('remaining_hours')} h to go (until {bake.get('ends_at')}); then stage=promote."
            )
        return "The bake window is over: run stage=promote."
    if stage == "bake" and outcome == "failed":
        if entry.get("rolled_back"):
            return "The canary was rolled back; investigate the failure before a new canary."
        return "Run stage=rollback (or set upgrade_rollback_on_bake_failure so the bake does it)."
    if stage == "promote" and outcome == "success":
        return "Done. The matrix now names the promoted versions as current_production; keep an eye on the fleet."
    if stage == "promote" and outcome == "failed":
        return "The fleet may run mixed versions: read the failures, then run stage=rollback."
    if stage == "rollback" and outcome == "success":
        return "Rolled back. Investigate before trying the change again."
    if stage == "rollback" and outcome == "failed" and entry.get("rolled_back"):
        return "The software is back to known-good but the node still fails its gates: take it out of service."
    if stage == "rollback" and outcome == "failed":
        return (
            "The rollback did not finish: read the failures (the cluster was left as it is for a person to look "
            "at), fix what they name, then run stage=rollback again."
        )
    return "Nothing to do."


def _hours_after(moment: Any, hours: Any) -> str:
    start = parse_time(moment)
    try:
        end = start + datetime.timedelta(hours=float(hours)) if start else None
    except (TypeError, ValueError, OverflowError):
        end = None
    return iso(end) if end else f"{hours} h from now"


def _when(event: Mapping[str, Any]) -> Any:
    return event.get("at") or event.get("entered_at") or event.get("time") or ""


def capacity_text(capacity: Any) -> str:
    """Lowest and highest allocatable GPUs the component role saw during the run."""
    samples = [point.get("allocatable_gpus") for point in capacity or [] if isinstance(point, Mapping)]
    counts: List[int] = [count for count in samples if isinstance(count, int)]
    if not counts:
        return ""
    return f"{min(counts)} to {max(counts)} allocatable GPUs during the rollout ({len(counts)} samples)"


def _timeline_rows(nodes: Any) -> List[List[Any]]:
    """Rows (node, state, at, note) from the component role's timeline, a mapping or a list."""
    rows: List[List[Any]] = []
    if isinstance(nodes, Mapping):
        for node, events in sorted(nodes.items()):
            for event in events if isinstance(events, list) else [events]:
                if isinstance(event, Mapping):
                    rows.append(
                        [node, event.get("state") or event.get("step"), _when(event), event.get("reason") or ""]
                    )
                else:
                    rows.append([node, event, "", ""])
    elif isinstance(nodes, list):
        for event in nodes:
            if isinstance(event, Mapping):
                rows.append(
                    [
                        event.get("node"),
                        event.get("state") or event.get("step") or event.get("event"),
                        _when(event),
                        event.get("reason") or event.get("message") or "",
                    ]
                )
    return rows


def render_report(entry: Mapping[str, Any]) -> str:
    stage = str(entry.get("stage") or "")
    outcome = str(entry.get("outcome") or "")
    title = STAGE_TITLES.get(stage, stage)
    cluster_name = entry.get("cluster_name") or ""
    on_cluster = f" on {cluster_name}" if cluster_name else ""
    lines = [f"# {title}{on_cluster} {OUTCOME_WORDS.get(outcome, outcome)}: {change_summary(entry)}", ""]
    actor = entry.get("actor") or {}
    who = actor.get("user") or "unknown user"
    if actor.get("awx_job_id"):
        who += (
            f" (AWX job {actor['awx_job_id']}"
            + (f", {actor['awx_job_template']}" if actor.get("awx_job_template") else "")
            + ")"
        )
    if actor.get("controller"):
        who += f" on {actor['controller']}"
    where = entry.get("canary_node") and f"canary node {entry['canary_node']}"
    if stage in ("promote",) or entry.get("rollback_target") == "rollback":
        where = "every GPU node" + (
            f", validated on {', '.join(entry.get('validate_nodes') or [])}" if entry.get("validate_nodes") else ""
        )
    took = f"took {duration_text(entry.get('duration_seconds'))}"
    summary: List[List[Any]] = [
        ["Outcome", entry.get("message") or outcome],
        ["Decision", f"{entry.get('decision') or '-'}: {entry.get('plan_reason') or entry.get('message') or ''}"],
        ["When", f"{entry.get('started_at') or '?'} to {entry.get('recorded_at') or '?'} (cluster time), {took}"],
        ["Who", who],
        ["What", change_summary(entry)],
        ["Where", where or "-"],
    ]
    if cluster_name:
        summary.insert(
            0, ["Cluster", cluster_name + (f" (API server {entry['cluster']})" if entry.get("cluster") else "")]
        )
    if entry.get("forced"):
        summary.append(["Forced", f"yes, reason: {entry.get('force_reason')}"])
    bake = entry.get("bake") or {}
    if bake.get("started_at"):
        summary.append(
            [
                "Bake",
                f"since {bake['started_at']}: {bake.get('elapsed_hours')} h of {bake.get('required_hours')} h"
                + (f", {len(bake.get('failed_checks') or [])} failed checks" if bake.get("failed_checks") else ""),
            ]
        )
    operator = operator_text(entry.get("operator"))
    if operator:
        summary.append(["Operator", operator])
    capacity = capacity_text(entry.get("capacity"))
    if capacity:
        summary.append(["Capacity", capacity])
    matrix = entry.get("matrix") or {}
    if matrix:
        text = matrix.get("message") or ("updated" if matrix.get("changed") else "unchanged")
        if matrix.get("commit"):
            text += f"; commit {str(matrix['commit'])[:12]}"
        if matrix.get("tag"):
            text += f", tag {matrix['tag']}" + (
                " (already existed, left in place)" if matrix.get("tag_existed") else ""
            )
        summary.append(["Matrix", f"{matrix.get('file') or ''}: {text}"])
    summary.append(["Next", next_step(entry)])
    lines += _table(["", ""], summary)
    problems = failures(entry)
    if problems:
        lines += ["", "## What failed and why", ""]
        lines += [f"- {problem}" for problem in problems]
    pre_steps = [step for step in entry.get("pre_steps") or [] if isinstance(step, Mapping)]
    if pre_steps:
        lines += ["", "## Pre-steps (changed before the upgrade, to be put back)", ""]
        rows = [
            [
                step.get("what"),
                step.get("object"),
                step.get("replaced"),
                "put back" if step.get("restored") else f"STILL CHANGED: restore with `{step.get('restore')}`",
            ]
            for step in pre_steps
        ]
        lines += _table(["pre-step", "object", "what it replaced", "now"], rows)
    gates = entry.get("gates") or []
    if gates:
        lines += ["", "## Validation gates", ""]
        rows = []
        for report in gates:
            for verdict in report.get("gates") or []:
                rows.append(
                    [
                        verdict.get("node") or report.get("node"),
                        verdict.get("gate"),
                        "pass" if verdict.get("passed") else "FAIL",
                        verdict.get("reason"),
                        duration_text(verdict.get("elapsed")),
                    ]
                )
        lines += _table(["node", "gate", "result", "why", "took"], rows)
        evidence = [
            (verdict.get("node") or report.get("node"), verdict.get("gate"), verdict.get("evidence"))
            for report in gates
            for verdict in report.get("gates") or []
            if not verdict.get("passed") and verdict.get("evidence")
        ]
        for node, gate, text in evidence:
            lines += ["", f"Evidence, {gate} on {node}:", "", "```", str(text).rstrip()[:3000], "```"]
    timeline = _timeline_rows(entry.get("nodes"))
    if timeline:
        lines += ["", "## Node timeline", ""]
        lines += _table(["node", "state", "at", "note"], timeline)
    before, after = entry.get("versions_before") or {}, entry.get("versions_after") or {}
    if before or after:
        lines += ["", "## Versions", ""]
        changed = {change.get("component") for change in entry.get("changes") or []}
        rows = [
            [name, before.get(name, "-"), after.get(name, "-"), "changed" if name in changed else ""]
            for name in sorted(set(before) | set(after))
        ]
        lines += _table(["component", "before", "after", ""], rows)
    ledger = entry.get("ledger") or {}
    lines += ["", "## Ledger", ""]
    lines.append(
        f"- entry `{entry.get('id')}`" + (f", change `{entry.get('campaign')}`" if entry.get("campaign") else "")
    )
    if ledger.get("configmap"):
        kept = "recorded" if ledger.get("in_cluster") else "not recorded (nothing on the cluster changed)"
        lines.append(f"- cluster: ConfigMap {ledger['configmap']}, {kept}")
    if ledger.get("file"):
        lines.append(f"- file: {ledger['file']}")
    return "\n".join(lines) + "\n"


def entry_outline(entry: Mapping[str, Any]) -> Dict[str, Any]:
    """The few facts the playbook prints at the end of a run."""
    return {
        "stage": entry.get("stage"),
        "outcome": entry.get("outcome"),
        "decision": entry.get("decision"),
        "message": entry.get("message"),
        "next": next_step(entry),
    }
