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
import re
from typing import Any, Dict, Iterable, List, Mapping, Sequence

from ansible_collections.gpufleet.upgrade.plugins.module_utils._report_timeline import capacity_text, timeline_rows
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, parse_time

# Said once in every report: the times come from one clock, the cluster's.
CLOCK_NOTE = (
    "Every time in this report is the cluster's (the API server's Date header), as in the ledger and on the "
    "node annotations."
)

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
    """What the operator step did beyond its version: an OLM reinstall (OLM does not downgrade), from, to and how
    far it got; the driver images it pinned so that the release restarted no driver."""
    if not isinstance(operator, Mapping):
        return ""
    parts = []
    reinstall = operator.get("reinstall")
    if isinstance(reinstall, Mapping):
        text = f"reinstalled through OLM, {reinstall.get('from_csv')} -> {reinstall.get('to_csv')}"
        if reinstall.get("channel"):
            text += f" (channel {reinstall['channel']}"
            text += f", InstallPlan {reinstall['install_plan']})" if reinstall.get("install_plan") else ")"
        if not reinstall.get("completed"):
            text = "NOT FINISHED: " + text.replace("reinstalled", "being reinstalled", 1)
        parts.append(text)
    pinned = [pin for pin in operator.get("pinned_before_upgrade") or [] if isinstance(pin, Mapping)]
    if pinned:
        whats = sorted({str(image.get("what")) for pin in pinned for image in pin.get("images") or []})
        owners = ", ".join(f"{pin.get('kind')}/{pin.get('name')}" for pin in pinned)
        parts.append(
            f"{' and '.join(whats) or 'driver images'} pinned in {owners} to the images that ran, so the operator "
            "release restarted no driver (docs/gpu_operator.md, 'The driver across an operator upgrade')"
        )
    return "; ".join(parts)


def not_restored(entry: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    """Pre-steps of the stage (SR-IOV scale-down, policy deletion, ...) still in place."""
    return [step for step in entry.get("pre_steps") or [] if isinstance(step, Mapping) and not step.get("restored")]


# At most this many halted nodes' diagnoses go into a ledger entry (the rest are counted).
DIAGNOSIS_LIMIT = 20
_DIAGNOSIS_KEYS = ("node", "component", "state", "in_state_for", "cause", "cause_title", "detail", "remedy")


def halted_diagnosis(doctor: Any, halted_nodes: Sequence[str]) -> Dict[str, Any]:
    """The doctor's findings for the nodes a halted stage names, trimmed for the ledger: what each node waits on,
    why, and what unsticks it; plus the cluster-wide blockers. A halt that names no node (a refused preflight) gets
    the cluster-wide blockers only: the other stuck nodes (a canary's held ones) are not what halted it."""
    if not isinstance(doctor, Mapping) or not isinstance(doctor.get("findings"), list):
        return {}
    wanted = {str(node) for node in halted_nodes if node}
    found = [f for f in doctor["findings"] if isinstance(f, Mapping) and f.get("node") in wanted]
    rows = []
    for finding in found[:DIAGNOSIS_LIMIT]:
        row = {key: finding.get(key) for key in _DIAGNOSIS_KEYS}
        remediation = finding.get("remediation")
        row["remediation"] = str(remediation.get("action") or "") if isinstance(remediation, Mapping) else ""
        rows.append(row)
    cluster = [
        {key: item.get(key) for key in ("cause", "cause_title", "detail", "remedy")}
        for item in doctor.get("cluster") or []
        if isinstance(item, Mapping)
    ]
    return {"findings": rows, "more": max(0, len(found) - len(rows)), "cluster": cluster}


def diagnosis_rows(entry: Mapping[str, Any]) -> List[List[str]]:
    """(node, waits in, for, cause, detail, what unsticks it) per diagnosed halted node, then the cluster-wide ones."""
    diagnosis = entry.get("diagnosis") or {}
    rows = [
        [
            str(item.get("node")),
            f"{item.get('component')} {item.get('state')}",
            str(item.get("in_state_for") or ""),
            str(item.get("cause")),
            str(item.get("detail") or ""),
            str(item.get("remedy") or "")
            + (f" (the doctor can: {item['remediation']})" if item.get("remediation") else ""),
        ]
        for item in diagnosis.get("findings") or []
    ]
    rows += [
        ["(cluster)", "", "", str(item.get("cause")), str(item.get("detail") or ""), str(item.get("remedy") or "")]
        for item in diagnosis.get("cluster") or []
    ]
    return rows


def unstick_text(entry: Mapping[str, Any]) -> str:
    """What unsticks the halted nodes, from the doctor's diagnosis ("" without one)."""
    findings = (entry.get("diagnosis") or {}).get("findings") or []
    if not findings:
        return ""
    by_remedy: Dict[str, List[str]] = {}
    for item in findings:
        by_remedy.setdefault(f"{item.get('cause')}: {item.get('remedy')}", []).append(str(item.get("node")))
    parts = [f"{', '.join(nodes)} ({remedy})" for remedy, nodes in by_remedy.items()]
    text = "To unstick " + "; ".join(parts) + "."
    if any(item.get("remediation") for item in findings):
        text += (
            " The doctor takes the safe steps it names: ansible-playbook playbooks/diagnose.yml "
            "-e doctor_remediate=true (with --check first to see them)."
        )
    return text + " "


# How the rollout engine names the command that clears a failed node's mark (_rollout_engine.RolloutPlan.halt_message):
# the rollout halts on that node, in every later run too, until a person has fixed it and cleared the mark.
_CLEAR_COMMAND = re.compile(r"clear it with: (kubectl annotate node \S+ \S+=pending --overwrite)")


def clear_commands(entry: Mapping[str, Any]) -> List[str]:
    """The commands, named in the run's failures, that clear the failed nodes' marks."""
    found: List[str] = []
    for item in failures(entry):
        for command in _CLEAR_COMMAND.findall(item):
            if command not in found:
                found.append(command)
    return found


def next_step(entry: Mapping[str, Any]) -> str:
    """What a person (or the schedule) does next: what unsticks the halted nodes (the doctor's diagnosis), then
    the stage's way on."""
    stage_next = _stage_next(entry)
    if entry.get("outcome") != "failed":
        return stage_next
    clear = clear_commands(entry)
    if clear:
        stage_next = (
            "Once the node is fixed, clear its failed mark (every run halts on it until then): "
            + "; ".join(f"`{command}`" for command in clear)
            + ". "
            + stage_next
        )
    return unstick_text(entry) + ("Then: " if unstick_text(entry) else "") + stage_next


def _stage_next(entry: Mapping[str, Any]) -> str:
    stage, outcome = entry.get("stage"), entry.get("outcome")
    bake = entry.get("bake") or {}
    if entry.get("next"):
        return str(entry["next"])  # the stage said what works from here (a refused rollback's way forward)
    if outcome == "refused":
        return "Fix what the refusal names, then run the stage again."
    if outcome == "failed" and entry.get("held_by_alerts") and stage in ("bake", "promote"):
        return _next_after_alerts(entry)
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
    not_granted = _not_granted(entry)
    failed_nodes = [f for f in entry.get("failures") or [] if isinstance(f, Mapping) and f.get("node")]
    if outcome == "failed" and stage in ("canary", "promote") and not_granted and not failed_nodes:
        return _next_after_not_granted(stage, not_granted)
    if outcome == "failed" and entry.get("gates_could_not_run"):
        unjudged = (
            "The validation gates could not run because of the cluster: the Kubernetes API failed them, or their "
            "pods found no room on the node (an infrastructure failure, not a verdict on the node). "
        )
        if stage == "rollback":
            return unjudged + (
                "The software is back to known-good. Once the cluster can run the gates (the node uncordoned, the "
                "API answering), run stage=rollback again: it finds nothing left to undo and validates the node."
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


def _next_after_alerts(entry: Mapping[str, Any]) -> str:
    """A bake check or a promotion the alerts gate halted: no verdict on the nodes; wait for the alerts, or undo."""
    stage = entry.get("stage")
    firing = "Prometheus alerts " + ", ".join(str(alert) for alert in entry["held_by_alerts"]) + " kept firing"
    if stage == "bake":
        return (
            f"{firing}, so the bake check did not run (no verdict on the canary). Once they stop firing run "
            "stage=bake again; or run stage=rollback to return the canary node to production."
        )
    if entry.get("cluster_changed") is False:
        return f"{firing} before the promotion started; nothing was changed. Run stage=promote again once they stop."
    return (
        f"{firing}, so the promotion stopped before its next node (the nodes it did not reach run what they ran "
        "before; the matrix was not changed). Once they stop firing run stage=promote again: it resumes where it "
        "stopped. Or run stage=rollback to return every node to current_production."
    )


def _not_granted(entry: Mapping[str, Any]) -> List[str]:
    """The nodes whose maintenance the NVIDIA Maintenance Operator never scheduled (their requests withdrawn)."""
    return [str(node) for node in entry.get("nodes_not_granted") or []]


def _next_after_not_granted(stage: Any, nodes: List[str]) -> str:
    """A stage halted because the Maintenance Operator's budget had no room: no verdict on any node, so the way on
    is the same stage once there is room (the undo stays there for who wants it)."""
    text = (
        f"The NVIDIA Maintenance Operator did not schedule the maintenance of {', '.join(nodes)} in time (other "
        "requestors held the cluster's budget: kubectl get nodemaintenances -A); no node failed, and the nodes "
        f"not reached run what they ran before. Run stage={stage} again once it has room: it resumes where it "
        "stopped"
    )
    if stage == "promote":
        return text + " (the matrix was not changed). Or run stage=rollback to return every node to current_production."
    return text + ", then bake and promote as usual."


def _hours_after(moment: Any, hours: Any) -> str:
    start = parse_time(moment)
    try:
        end = start + datetime.timedelta(hours=float(hours)) if start else None
    except (TypeError, ValueError, OverflowError):
        end = None
    return iso(end) if end else f"{hours} h from now"


def gate_duration(verdict: Mapping[str, Any]) -> str:
    """How long a gate ran on the cluster (its pod's start to its last container's end), else as waited here."""
    started, finished = parse_time(verdict.get("started_at")), parse_time(verdict.get("finished_at"))
    if started and finished and finished >= started:
        return duration_text((finished - started).total_seconds())
    return duration_text(verdict.get("elapsed")) + " (waited here)"


def gate_rows(entry: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """One row per gate verdict: node, gate, passed, why, duration, evidence."""
    rows = []
    for report in entry.get("gates") or []:
        for verdict in report.get("gates") or []:
            rows.append(
                {
                    "node": verdict.get("node") or report.get("node"),
                    "gate": verdict.get("gate"),
                    "passed": bool(verdict.get("passed")),
                    "could_not_run": bool(verdict.get("could_not_run")),
                    "reason": verdict.get("reason") or "",
                    "took": gate_duration(verdict),
                    "started_at": verdict.get("started_at") or "",
                    "evidence": str(verdict.get("evidence") or "").rstrip()[:3000],
                }
            )
    return rows


def version_rows(entry: Mapping[str, Any]) -> List[List[str]]:
    """(component, before as observed, after, changed) for every component the entry names."""
    before, after = entry.get("versions_before") or {}, entry.get("versions_after") or {}
    observed = entry.get("versions_observed") or {}
    changed = {change.get("component") for change in entry.get("changes") or []}
    rows = []
    for name in sorted(set(before) | set(after)):
        seen = observed.get(name)
        was = str(before.get(name, "-"))
        if isinstance(seen, Mapping) and seen.get("version"):
            was = f"{seen['version']} (observed: {seen.get('source') or 'cluster'})"
        rows.append([name, was, str(after.get(name, "-")), "changed" if name in changed else ""])
    return rows


def where_text(entry: Mapping[str, Any]) -> str:
    """What the stage touched: the canary node, every GPU node, and for OpenShift the control plane and pools."""
    stage = entry.get("stage")
    where = f"canary node {entry['canary_node']}" if entry.get("canary_node") else ""
    if stage == "promote" or entry.get("rollback_target") == "rollback":
        where = "every GPU node" + (
            f", validated on {', '.join(entry.get('validate_nodes') or [])}" if entry.get("validate_nodes") else ""
        )
    if entry.get("group") == "openshift" and stage == "canary":
        versions = entry.get("versions_after") or {}
        paused = ", ".join(entry.get("paused_pools") or []) or "the GPU pools"
        where = (
            f"the control plane (ClusterVersion to {versions.get('openshift') or 'the target'}, cluster-wide), then "
            f"{where or 'the canary node'} in its own MachineConfigPool; {paused} stay paused until promote"
        )
    return where or "-"


def resumed_text(entry: Mapping[str, Any]) -> str:
    """A run that resumed earlier runs of the same stage: which, and the campaign's duration over all of them."""
    runs = [run for run in entry.get("resumed_runs") or [] if isinstance(run, Mapping)]
    if not runs:
        return ""
    first = parse_time(runs[0].get("started_at"))
    last = parse_time(entry.get("recorded_at"))
    total = duration_text((last - first).total_seconds()) if first and last else "unknown"
    parts = [
        f"{run.get('id')} ({run.get('outcome')}, {run.get('started_at')} to {run.get('recorded_at')})" for run in runs
    ]
    return f"yes: this run resumed {', '.join(parts)}; {len(runs) + 1} runs, {total} in all"


def report_title(entry: Mapping[str, Any]) -> str:
    stage = str(entry.get("stage") or "")
    outcome = str(entry.get("outcome") or "")
    cluster_name = entry.get("cluster_name") or ""
    on_cluster = f" on {cluster_name}" if cluster_name else ""
    return (
        f"{STAGE_TITLES.get(stage, stage)}{on_cluster} {OUTCOME_WORDS.get(outcome, outcome)}: {change_summary(entry)}"
    )


def actor_text(entry: Mapping[str, Any]) -> str:
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
    return who


def summary_rows(entry: Mapping[str, Any]) -> List[List[str]]:
    """The report's first table: (label, text), outcome first, next step last."""
    outcome = str(entry.get("outcome") or "")
    cluster_name = entry.get("cluster_name") or ""
    took = f"took {duration_text(entry.get('duration_seconds'))}"
    summary: List[List[str]] = [
        ["Outcome", str(entry.get("message") or outcome)],
        ["Decision", f"{entry.get('decision') or '-'}: {entry.get('plan_reason') or entry.get('message') or ''}"],
        ["When", f"{entry.get('started_at') or '?'} to {entry.get('recorded_at') or '?'} (cluster time), {took}"],
        ["Who", actor_text(entry)],
        ["What", change_summary(entry)],
        ["Where", where_text(entry)],
    ]
    resumed = resumed_text(entry)
    if resumed:
        summary.insert(3, ["Resumed", resumed])
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
    capacity = capacity_text(entry)
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
    for commit in entry.get("gitops_commits") or []:
        summary.append(["Git (GitOps)", gitops_commit_text(commit)])
    summary.append(["Next", next_step(entry)])
    return summary


def gitops_commit_text(commit: Mapping[str, Any]) -> str:
    """One GitOps commit of the stage: what it changed or reverted, and whether it was pushed or awaits review."""
    text = f"commit {str(commit.get('commit') or '')[:12]} ({commit.get('stage') or ''}: {commit.get('what') or ''})"
    if commit.get("reverted"):
        text += "; reverts " + ", ".join(str(sha)[:12] for sha in commit["reverted"])
    if commit.get("files"):
        text += "; edits " + ", ".join(str(path) for path in commit["files"])
    if commit.get("review_url"):
        text += f"; awaits review at {commit['review_url']}"
    elif not commit.get("pushed"):
        text += "; not pushed"
    return text


def pre_step_rows(entry: Mapping[str, Any]) -> List[List[str]]:
    return [
        [
            str(step.get("what")),
            str(step.get("object")),
            str(step.get("replaced")),
            "put back" if step.get("restored") else f"STILL CHANGED: restore with `{step.get('restore')}`",
        ]
        for step in entry.get("pre_steps") or []
        if isinstance(step, Mapping)
    ]


def ledger_lines(entry: Mapping[str, Any]) -> List[str]:
    ledger = entry.get("ledger") or {}
    lines = [f"entry `{entry.get('id')}`" + (f", change `{entry.get('campaign')}`" if entry.get("campaign") else "")]
    if ledger.get("configmap"):
        kept = "recorded" if ledger.get("in_cluster") else "not recorded (nothing on the cluster changed)"
        lines.append(f"cluster: ConfigMap {ledger['configmap']}, {kept}")
    if ledger.get("file"):
        lines.append(f"file: {ledger['file']}")
    return lines


def render_report(entry: Mapping[str, Any]) -> str:
    lines = [f"# {report_title(entry)}", ""]
    lines += _table(["", ""], summary_rows(entry))
    problems = failures(entry)
    if problems:
        lines += ["", "## What failed and why", ""]
        lines += [f"- {problem}" for problem in problems]
    diagnosis = diagnosis_rows(entry)
    if diagnosis:
        lines += ["", "## Why the halted nodes are stuck (the doctor, docs/doctor.md)", ""]
        lines += _table(["node", "waits in", "for", "cause", "evidence", "what unsticks it"], diagnosis)
        more = (entry.get("diagnosis") or {}).get("more")
        if more:
            lines += ["", f"{more} more stuck nodes: ansible-playbook playbooks/diagnose.yml lists them all."]
    pre_steps = pre_step_rows(entry)
    if pre_steps:
        lines += ["", "## Pre-steps (changed before the upgrade, to be put back)", ""]
        lines += _table(["pre-step", "object", "what it replaced", "now"], pre_steps)
    gates = gate_rows(entry)
    if gates:
        lines += ["", "## Validation gates", ""]
        rows = [
            [gate["node"], gate["gate"], "pass" if gate["passed"] else "FAIL", gate["reason"], gate["took"]]
            for gate in gates
        ]
        lines += _table(["node", "gate", "result", "why", "took"], rows)
        for gate in gates:
            if not gate["passed"] and gate["evidence"]:
                lines += ["", f"Evidence, {gate['gate']} on {gate['node']}:", "", "```", gate["evidence"], "```"]
    timeline = timeline_rows(entry)
    if timeline:
        lines += ["", "## Node timeline", ""]
        lines += _table(["node", "state or step", "from", "to", "note"], timeline)
    versions = version_rows(entry)
    if versions:
        lines += ["", "## Versions", ""]
        lines += _table(["component", "before", "after", ""], versions)
    lines += ["", "## Ledger", ""]
    lines += [f"- {line}" for line in ledger_lines(entry)]
    lines += ["", CLOCK_NOTE]
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
