# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The upgrade ledger: what each stage did, and what a run may do next (collection-internal).

Every run of ``playbooks/upgrade.yml`` ends with one entry: who ran which
stage, when (the API server's clock), the versions before and after, the
per-node timeline, the gate verdicts and the decision taken. Entries that
changed or checked the cluster are appended to a ConfigMap (one JSON object
per line under ``data["ledger.jsonl"]``, replaced with its resourceVersion so
two writers never lose each other's entry); every entry, refusals included,
is also appended to a JSON file. A refused run therefore leaves the cluster
exactly as it was.

Re-runs read both (``merge_entries``), fold the entries of the change at hand
into a ``CampaignState`` and ``decide`` what the stage may do: run, nothing
(already done), or refuse (not allowed yet), with the reason a person reads.
The folding and the decisions are pure; the ConfigMap and file I/O are at the
end of this file.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import secrets
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError, KubeApiError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import free_gpus, read_dra_gpus
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    CONFIGMAPS,
    NODES,
    PODS,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_check import (
    MatrixSource,
    read_catalog,
    read_matrix_file,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import parse_yaml_text
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_planner import disruptive_refusal, plan_stage
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_rules import (
    VIOLATION,
    changed_components,
    evaluate_matrix,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_schema import assert_valid
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_write import write_text_atomically
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import node_is_ready
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, parse_time

LEDGER_CONFIGMAP = "gpufleet-upgrade-ledger"
LEDGER_DATA_KEY = "ledger.jsonl"
# A ConfigMap holds at most 1 MiB: the cluster keeps the newest entries (compacted),
# the JSON file keeps them all.
MAX_CLUSTER_ENTRIES = 200
MAX_CLUSTER_BYTES = 900 * 1024
STAGES = ("canary", "bake", "promote", "rollback")

SUCCESS = "success"
FAILED = "failed"
REFUSED = "refused"
UNCHANGED = "unchanged"
OUTCOMES = (SUCCESS, FAILED, REFUSED, UNCHANGED)

RUN = "run"
NOOP = "noop"
REFUSE = "refuse"

ROLLBACK_AUTO = "auto"
ROLLBACK_TO_ENTRY = "rollback"
ROLLBACK_TO_PRODUCTION = "current_production"


def parse_iso(text: str) -> datetime.datetime:
    moment = parse_time(text)
    if moment is None:
        raise InvalidInputError(f"Ledger time {text!r} is not an RFC 3339 time such as 2026-11-22T08:25:11Z")
    return moment


def campaign_id(group: str, target: Mapping[str, Any]) -> str:
    """Names one change: its group and the versions it moves to (the same change always has the same id)."""
    digest = hashlib.sha256(json.dumps({str(k): str(v) for k, v in target.items()}, sort_keys=True).encode())
    return f"{group}-{digest.hexdigest()[:10]}"


def new_entry_id(stage: str, moment: datetime.datetime) -> str:
    return f"{stage}-{moment.astimezone(datetime.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(2)}"


# -- merging (pure) -----------------------------------------------------------------------------


def merge_entries(*sources: Iterable[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """One ordered ledger from several copies (cluster, file): each entry once, by id, oldest first.

    A copy may hold an entry the other lacks (a controller's file, a ConfigMap
    trimmed to its newest entries); where both hold one, the fuller one wins.
    """
    by_id: Dict[str, Dict[str, Any]] = {}
    for source in sources:
        for entry in source:
            if not isinstance(entry, Mapping) or not entry.get("id"):
                continue
            known = by_id.get(str(entry["id"]))
            if known is None or len(json.dumps(entry, default=str)) > len(json.dumps(known, default=str)):
                by_id[str(entry["id"])] = dict(entry)
    return sorted(by_id.values(), key=lambda entry: (str(entry.get("recorded_at") or ""), str(entry["id"])))


def parse_jsonl(text: str, *, source: str) -> List[Dict[str, Any]]:
    entries = []
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as err:
            raise InvalidInputError(f"{source}, line {number}: not a JSON ledger entry ({err})") from err
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def compact_entry(entry: Mapping[str, Any]) -> Dict[str, Any]:
    """The cluster's copy of an entry: verdicts without raw evidence (that stays in the file)."""
    compact = {key: value for key, value in entry.items() if key not in ("report_markdown",)}
    gates = []
    for report in entry.get("gates") or []:
        gates.append(
            {
                "node": report.get("node"),
                "passed": report.get("passed"),
                "summary": report.get("summary"),
                "counters": report.get("counters") or {},
                "gates": [
                    {key: verdict.get(key) for key in ("gate", "passed", "reason", "elapsed")}
                    for verdict in report.get("gates") or []
                ],
            }
        )
    if gates:
        compact["gates"] = gates
    return compact


def cluster_ledger_text(entries: Sequence[Mapping[str, Any]]) -> str:
    """The ConfigMap's text: the newest entries that fit, one JSON object per line."""
    lines = [json.dumps(compact_entry(entry), sort_keys=True, separators=(",", ":")) for entry in entries]
    lines = lines[-MAX_CLUSTER_ENTRIES:]
    while lines and sum(len(line) + 1 for line in lines) > MAX_CLUSTER_BYTES:
        lines.pop(0)
    return "".join(line + "\n" for line in lines)


# -- state of one change (pure) ------------------------------------------------------------------


@dataclass
class CampaignState:
    """Where one change (group + target versions) stands, folded from its ledger entries."""

    campaign: str
    canary_passed: bool = False
    canary_failed: bool = False
    canary_node: str = ""
    canary_entry: str = ""
    canary_reason: str = ""
    # Why the failed canary cannot be undone (OpenShift's control plane moved); empty when it can.
    canary_forward_only: str = ""
    bake_started_at: str = ""
    baseline: Dict[str, Any] = field(default_factory=dict)
    bake_checks: List[Dict[str, Any]] = field(default_factory=list)
    promoted: bool = False
    promote_failed: bool = False
    promote_entry: str = ""
    rolled_back: bool = False
    rollback_entry: str = ""
    # Rolled back to current_production by a rollback whose gates could not run: the node was never judged.
    unvalidated: bool = False
    last_entry: str = ""
    group: str = ""
    versions_before: Dict[str, Any] = field(default_factory=dict)
    versions_after: Dict[str, Any] = field(default_factory=dict)

    @property
    def bake_failed(self) -> bool:
        return any(not check.get("passed") for check in self.bake_checks)

    @property
    def open(self) -> bool:
        """Something on the cluster belongs to this change and was not rolled back."""
        return self.canary_passed or self.canary_failed or self.promoted or self.promote_failed

    def as_dict(self) -> Dict[str, Any]:
        return {
            "campaign": self.campaign,
            "canary_passed": self.canary_passed,
            "canary_failed": self.canary_failed,
            "canary_node": self.canary_node,
            "canary_entry": self.canary_entry,
            "canary_reason": self.canary_reason,
            "canary_forward_only": self.canary_forward_only,
            "bake_started_at": self.bake_started_at,
            "bake_checks": list(self.bake_checks),
            "bake_failed": self.bake_failed,
            "promoted": self.promoted,
            "promote_failed": self.promote_failed,
            "promote_entry": self.promote_entry,
            "rolled_back": self.rolled_back,
            "rollback_entry": self.rollback_entry,
            "last_entry": self.last_entry,
            "group": self.group,
            "open": self.open,
        }


def fold_campaign(entries: Sequence[Mapping[str, Any]], campaign: str) -> CampaignState:
    """Replay the entries of one change, oldest first. Only runs that touched the cluster count."""
    state = CampaignState(campaign=campaign)
    for entry in entries:
        if entry.get("campaign") != campaign or entry.get("outcome") not in (SUCCESS, FAILED):
            continue
        stage, passed = entry.get("stage"), entry.get("outcome") == SUCCESS
        state.last_entry = str(entry.get("id"))
        state.group = str(entry.get("group") or state.group)
        if entry.get("versions_before"):
            state.versions_before = dict(entry["versions_before"])
        if entry.get("versions_after") and stage != "rollback":
            state.versions_after = dict(entry["versions_after"])
        if stage == "canary":
            if not entry.get("cluster_changed", True):
                continue  # refused at preflight: nothing on the cluster to undo
            state.canary_passed, state.canary_failed = passed, not passed
            state.canary_node = str(entry.get("canary_node") or state.canary_node)
            state.canary_entry = str(entry.get("id"))
            state.canary_reason = str(entry.get("message") or "")
            state.canary_forward_only = "" if passed else str(entry.get("forward_only") or "")
            state.rolled_back = state.unvalidated = False
            if passed:
                state.bake_started_at = str(entry.get("recorded_at") or "")
                state.baseline = dict(entry.get("counters") or {})
                state.bake_checks = []
        elif stage == "bake":
            if not passed and (entry.get("gates_could_not_run") or entry.get("held_by_alerts")):
                # The API kept the gates from running, or firing alerts held the check: no verdict on the canary.
                continue
            state.bake_checks.append(
                {
                    "entry": entry.get("id"),
                    "at": entry.get("recorded_at"),
                    "passed": passed,
                    "why": entry.get("message"),
                }
            )
        elif stage == "promote":
            if not entry.get("cluster_changed", True):
                continue
            state.promoted, state.promote_failed = passed, not passed
            state.promote_entry = str(entry.get("id"))
        if (stage == "rollback" and passed) or entry.get("rolled_back"):
            state.rolled_back = True
            state.rollback_entry = str(entry.get("id"))
            state.unvalidated = stage == "rollback" and not passed and bool(entry.get("gates_could_not_run"))
            state.canary_passed = state.canary_failed = state.promoted = state.promote_failed = False
            state.bake_checks = []
    return state


def open_campaigns(entries: Sequence[Mapping[str, Any]]) -> List[CampaignState]:
    """Changes with something on the cluster not rolled back, the most recently touched last."""
    order: List[str] = []
    for entry in entries:
        name = entry.get("campaign")
        if name and entry.get("outcome") in (SUCCESS, FAILED):
            if name in order:
                order.remove(name)
            order.append(str(name))
    states = [fold_campaign(entries, name) for name in order]
    return [state for state in states if state.open]


def last_unvalidated(entries: Sequence[Mapping[str, Any]]) -> Optional[CampaignState]:
    """The change touched last, when its rollback returned the canary node but the gates could not judge it."""
    touched = [entry.get("campaign") for entry in entries if entry.get("outcome") in (SUCCESS, FAILED)]
    if not touched or not touched[-1]:
        return None
    state = fold_campaign(entries, str(touched[-1]))
    return state if state.unvalidated and not state.open else None


# -- decisions (pure) -----------------------------------------------------------------------------


@dataclass
class Decision:
    action: str  # run, noop, refuse
    reason: str
    bake: Dict[str, Any] = field(default_factory=dict)
    rollback_target: str = ""
    forced: bool = False
    # The command that works from here when the reason alone does not say it (a refusal's way forward).
    next: str = ""

    def as_dict(self) -> Dict[str, Any]:
        return {
            "action": self.action,
            "reason": self.reason,
            "bake": dict(self.bake),
            "rollback_target": self.rollback_target,
            "forced": self.forced,
            "next": self.next,
        }


def bake_status(state: CampaignState, *, now: datetime.datetime, bake_hours: float) -> Dict[str, Any]:
    if not state.bake_started_at:
        return {"started_at": "", "elapsed_hours": 0.0, "required_hours": bake_hours, "remaining_hours": bake_hours}
    started = parse_iso(state.bake_started_at)
    elapsed = max((now - started).total_seconds() / 3600.0, 0.0)
    return {
        "started_at": state.bake_started_at,
        "ends_at": iso(started + datetime.timedelta(hours=bake_hours)),
        "elapsed_hours": round(elapsed, 2),
        "required_hours": bake_hours,
        "remaining_hours": round(max(bake_hours - elapsed, 0.0), 2),
        "checks": len(state.bake_checks),
        "failed_checks": [check for check in state.bake_checks if not check.get("passed")],
    }


def decide(
    stage: str,
    *,
    state: CampaignState,
    changes_groups: int,
    now: datetime.datetime,
    bake_hours: float = 48.0,
    force_reason: str = "",
    promoted_elsewhere: Optional[CampaignState] = None,
) -> Decision:
    """What ``stage`` may do for the change at hand (canary, bake, promote; rollback has ``decide_rollback``)."""
    bake = bake_status(state, now=now, bake_hours=bake_hours)
    if changes_groups == 0:
        if stage == "promote" and promoted_elsewhere is not None:
            why = f"the change was promoted already (ledger entry {promoted_elsewhere.promote_entry})"
        else:
            why = "canary_testing pins nothing that differs from current_production"
        return Decision(NOOP, f"Nothing to {stage}: {why}.", bake=bake)
    if stage == "canary":
        if state.promoted:
            return Decision(NOOP, f"Nothing to do: this change was promoted (ledger entry {state.promote_entry}).")
        if state.canary_failed and state.canary_forward_only:
            return Decision(
                RUN,
                f"Resuming the canary of this change on {state.canary_node or 'its node'}, which failed (ledger entry "
                f"{state.canary_entry}): {state.canary_forward_only}",
                bake=bake,
            )
        if state.canary_failed:
            return Decision(
                REFUSE,
                f"The canary of this change failed on {state.canary_node or 'its node'} "
                f"(ledger entry {state.canary_entry}: {state.canary_reason}). Run stage=rollback first; "
                "a new canary starts from a rolled-back node.",
                bake=bake,
            )
        if state.canary_passed:
            return Decision(
                NOOP,
                f"The canary already passed on {state.canary_node} (ledger entry {state.canary_entry}); "
                f"baking since {state.bake_started_at}, {bake.get('remaining_hours')} h to go.",
                bake=bake,
            )
        return Decision(RUN, "No canary of this change yet.", bake=bake)
    if stage == "bake":
        if state.promoted:
            return Decision(NOOP, f"This change was promoted (ledger entry {state.promote_entry}); nothing bakes.")
        if state.canary_failed:
            return Decision(REFUSE, f"The canary failed (ledger entry {state.canary_entry}); run stage=rollback.")
        if not state.canary_passed:
            return Decision(REFUSE, "No canary of this change has passed: run stage=canary first.", bake=bake)
        return Decision(RUN, f"Baking since {state.bake_started_at}.", bake=bake)
    if stage == "promote":
        if state.promoted:
            return Decision(NOOP, f"This change was promoted already (ledger entry {state.promote_entry}).", bake=bake)
        if not state.canary_passed:
            if state.canary_failed:
                return Decision(REFUSE, f"The canary failed (ledger entry {state.canary_entry}); nothing to promote.")
            return Decision(REFUSE, "No canary of this change has passed: run stage=canary, then bake.", bake=bake)
        blockers = []
        if bake["elapsed_hours"] < bake_hours:
            blockers.append(
                f"the canary has baked {bake['elapsed_hours']} h of the {bake_hours:g} h required "
                f"(since {state.bake_started_at}, cluster time; promotion possible from {bake.get('ends_at')})"
            )
        if state.bake_failed:
            failed = bake["failed_checks"][-1]
            blockers.append(f"a bake check failed (ledger entry {failed.get('entry')}: {failed.get('why')})")
        if blockers and not force_reason.strip():
            return Decision(
                REFUSE,
                "Promotion refused: " + "; ".join(blockers) + ". Set upgrade_force_reason to override.",
                bake=bake,
            )
        if blockers:
            return Decision(
                RUN,
                "Promotion forced: " + "; ".join(blockers) + f". Reason given: {force_reason.strip()}",
                bake=bake,
                forced=True,
            )
        return Decision(RUN, f"The canary baked {bake['elapsed_hours']} h without a failed check.", bake=bake)
    raise InvalidInputError(f"Unknown stage {stage!r} (expected one of {', '.join(STAGES)})")


# Component groups whose change cannot be undone once it ran, and why: a rollback is refused before any change.
FORWARD_ONLY_GROUPS = {
    "openshift": "OpenShift does not support downgrading a cluster (Red Hat's update docs).",
}


def decide_rollback(
    *,
    open_states: Sequence[CampaignState],
    rollback_to: str,
    has_rollback_stage: bool,
    unvalidated: Optional[CampaignState] = None,
) -> Decision:
    """What a rollback undoes, by where the last open change stands in the ledger.

    ================================  ===========================================================
    last open change                  rollback (``auto``)
    ================================  ===========================================================
    none (or rolled back already)     nothing to do (``current_production`` asked: the canary node
                                      back to it; ``rollback`` asked: the rollback entry)
    rolled back, gates could not run  the canary node validated again (``unvalidated``: nothing is
                                      left to undo, but the node was never judged)
    canary passed or failed           its canary node back to current_production (the rest of the
                                      fleet never left it)
    canary failed, forward-only       refused: go forward with stage=canary
    promote failed (halted)           the nodes it moved back to current_production: the matrix was
                                      not rewritten, so current_production still names what the
                                      nodes it never reached run
    promoted                          every node to the matrix's ``rollback`` entry (refused when
                                      the matrix has none)
    any open change of a group in     refused before any change, with the stage that goes forward
    ``FORWARD_ONLY_GROUPS``           from there (bake/promote, canary, promote again)
    ================================  ===========================================================

    ``rollback_to=rollback`` asks for the rollback entry whatever the ledger says (not for a forward-only group).
    """
    if rollback_to not in (ROLLBACK_AUTO, ROLLBACK_TO_ENTRY, ROLLBACK_TO_PRODUCTION):
        raise InvalidInputError(f"upgrade rollback target {rollback_to!r} is not auto, rollback or current_production")
    latest = open_states[-1] if open_states else None
    if latest is not None and latest.group in FORWARD_ONLY_GROUPS:
        return _forward_only(latest, FORWARD_ONLY_GROUPS[latest.group])
    if rollback_to == ROLLBACK_TO_ENTRY or (latest is not None and latest.promoted):
        if not has_rollback_stage:
            return Decision(
                REFUSE,
                "The matrix has no rollback entry to go back to.",
                next="Add a rollback entry to the matrix (the last known-good versions), then run stage=rollback.",
            )
        what = f"the promotion of {latest.campaign}" if latest is not None and latest.promoted else "production"
        return Decision(RUN, f"Rolling back {what} to the matrix's rollback entry.", rollback_target=ROLLBACK_TO_ENTRY)
    if latest is not None and latest.promote_failed:
        return Decision(
            RUN,
            f"Returning the nodes the halted promotion of {latest.campaign} moved (ledger entry "
            f"{latest.promote_entry}) to current_production: the promotion did not finish, so the matrix was not "
            "rewritten and current_production still names what the rest of the fleet runs.",
            rollback_target=ROLLBACK_TO_PRODUCTION,
        )
    if latest is not None and latest.canary_failed and latest.canary_forward_only:
        return Decision(
            REFUSE,
            f"The canary of {latest.campaign} on {latest.canary_node or 'its node'} cannot be rolled back: "
            f"{latest.canary_forward_only} Nothing was changed. Fix what halted it (ledger entry "
            f"{latest.canary_entry}), then run stage=canary again to go forward.",
            next="Fix what halted the canary, then run stage=canary again: it resumes where it stopped.",
        )
    if latest is not None:
        return Decision(
            RUN,
            f"Returning canary node {latest.canary_node} to current_production "
            f"(the canary of {latest.campaign} was never promoted).",
            rollback_target=ROLLBACK_TO_PRODUCTION,
        )
    if unvalidated is not None:
        return Decision(
            RUN,
            f"Validating canary node {unvalidated.canary_node or '(unknown)'} again: the rollback in ledger entry "
            f"{unvalidated.rollback_entry} returned it to current_production, but its gates could not run.",
            rollback_target=ROLLBACK_TO_PRODUCTION,
        )
    if rollback_to == ROLLBACK_TO_PRODUCTION:
        return Decision(
            RUN, "Returning the canary node to current_production as asked.", rollback_target=ROLLBACK_TO_PRODUCTION
        )
    return Decision(NOOP, "Nothing to roll back: the ledger has no canary or promotion that was not rolled back.")


def _forward_only(latest: CampaignState, why: str) -> Decision:
    """A rollback refused for a group that cannot go back, with the stage that goes forward from where it stands."""
    if latest.promoted:
        forward = "Go forward: put a fixed z-stream in canary_testing and run stage=canary."
    elif latest.promote_failed:
        forward = "Fix what halted the promotion, then run stage=promote again: it resumes where it stopped."
    elif latest.canary_failed:
        forward = "Fix what halted the canary, then run stage=canary again: it resumes where it stopped."
    elif latest.bake_failed:
        forward = (
            "A bake check failed: put a fixed z-stream in canary_testing and run stage=canary (or, with the failure "
            "understood, stage=promote with upgrade_force_reason)."
        )
    else:
        forward = (
            "The canary passed: let it bake (run stage=bake to check it), then run stage=promote once the bake "
            "window is over; if the change itself is bad, put a fixed z-stream in canary_testing instead."
        )
    return Decision(
        REFUSE,
        f"The change {latest.campaign} ({latest.group}) cannot be rolled back: {why} Nothing was changed. {forward}",
        next=forward,
    )


# -- I/O ------------------------------------------------------------------------------------------------


def read_cluster_ledger(api: KubeApi, *, namespace: str, name: str) -> List[Dict[str, Any]]:
    configmap = api.get(CONFIGMAPS, name, namespace=namespace)
    if configmap is None:
        return []
    text = (configmap.get("data") or {}).get(LEDGER_DATA_KEY) or ""
    return parse_jsonl(text, source=f"ConfigMap {namespace}/{name}")


def append_cluster_entry(
    api: KubeApi,
    entry: Mapping[str, Any],
    *,
    namespace: str,
    name: str,
    attempts: int = 8,
    dry_run: bool = False,
) -> Dict[str, Any]:
    """Append one entry to the ledger ConfigMap: create it, or replace it guarded by its resourceVersion.

    A 409 means another writer got there first: read again and append to what
    it wrote. Returns the ConfigMap written.
    """
    for _attempt in range(attempts):
        current = api.get(CONFIGMAPS, name, namespace=namespace)
        entries = parse_jsonl(((current or {}).get("data") or {}).get(LEDGER_DATA_KEY) or "", source=name)
        entries = merge_entries(entries, [entry])
        data = {LEDGER_DATA_KEY: cluster_ledger_text(entries)}
        try:
            if current is None:
                body = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": name,
                        "namespace": namespace,
                        "labels": {"app.kubernetes.io/managed-by": "gpufleet.upgrade"},
                        "annotations": {"gpufleet.io/description": "Upgrade ledger: one JSON entry per line"},
                    },
                    "data": data,
                }
                return api.create(CONFIGMAPS, body, namespace=namespace, dry_run=dry_run)
            merged_data: Dict[str, Any] = dict(current.get("data") or {})
            merged_data.update(data)
            body = dict(current)
            body["data"] = merged_data
            return api.replace(CONFIGMAPS, body, dry_run=dry_run)
        except KubeApiError as err:
            if err.status != 409:
                raise
    raise KubeApiError(
        f"ConfigMap {namespace}/{name} kept changing under {attempts} attempts to append the ledger entry",
        status=409,
        reason="Conflict",
    )


def read_file_ledger(path: str) -> List[Dict[str, Any]]:
    if not path or not os.path.exists(path):
        return []
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as err:
        raise InvalidInputError(f"Ledger file {path} cannot be read as JSON: {err}") from err
    entries = data.get("entries") if isinstance(data, Mapping) else data
    if not isinstance(entries, list):
        raise InvalidInputError(f"Ledger file {path} holds no list of entries")
    return [entry for entry in entries if isinstance(entry, dict)]


def append_file_entry(path: str, entry: Mapping[str, Any]) -> List[Dict[str, Any]]:
    entries = merge_entries(read_file_ledger(path), [entry])
    write_text_atomically(path, json.dumps({"entries": entries}, indent=2, sort_keys=True, default=str) + "\n")
    return entries


# -- planning a run: matrix + ledger + cluster -> decision ---------------------------------------------


@dataclass(frozen=True)
class RunRequest:
    """What a run of the flow asks for (the role's variables)."""

    stage: str
    matrix_path: str
    catalog_path: Optional[str] = None
    namespace: str = ""
    configmap_name: str = LEDGER_CONFIGMAP
    ledger_file: str = ""
    bake_hours: float = 48.0
    force_reason: str = ""
    canary_node: str = ""
    canary_label: str = "gpu-canary"
    rollback_to: str = ROLLBACK_AUTO
    supported_groups: Sequence[str] = ("gpu_operator",)
    gpu_node_selector: str = "nvidia.com/gpu.present=true"
    sample_size: int = 2
    sample_free_gpus: int = 2


def _node_name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


@dataclass
class CanaryChoice:
    node: str
    source: str
    problem: str = ""


def choose_canary_node(
    nodes: Sequence[Mapping[str, Any]],
    *,
    label: str,
    requested: str = "",
    matrix_node: str = "",
    ledger_node: str = "",
) -> CanaryChoice:
    """The canary node: the one asked for, else the matrix's canary_node, else the one already labelled
    (a resumed run), else the first Ready, schedulable GPU node by name. ``problem`` says why none fits."""
    by_name = {_node_name(node): node for node in nodes}
    labelled = sorted(
        name
        for name, node in by_name.items()
        if ((node.get("metadata") or {}).get("labels") or {}).get(label) == "true"
    )
    for source, wanted in (("variable", requested), ("matrix canary_node", matrix_node), ("ledger", ledger_node)):
        if not wanted:
            continue
        if wanted not in by_name:
            return CanaryChoice(
                wanted, source, f"canary node {wanted} (from the {source}) is not a GPU node of this cluster"
            )
        others = [name for name in labelled if name != wanted]
        if others:
            return CanaryChoice(
                wanted,
                source,
                f"{', '.join(others)} already carries {label}=true; remove the label or choose that node",
            )
        return CanaryChoice(wanted, source)
    if len(labelled) > 1:
        return CanaryChoice(labelled[0], "label", f"several nodes carry {label}=true: {', '.join(labelled)}")
    if labelled:
        return CanaryChoice(labelled[0], "label")
    for name in sorted(by_name):
        node = by_name[name]
        if node_is_ready(node) and not (node.get("spec") or {}).get("unschedulable"):
            return CanaryChoice(name, "first Ready, schedulable GPU node by name")
    return CanaryChoice("", "rule", "no Ready, schedulable GPU node to be the canary")


def sample_nodes(
    names: Sequence[str],
    *,
    size: int,
    exclude: Sequence[str] = (),
    free: Optional[Mapping[str, int]] = None,
    needed: int = 0,
) -> List[str]:
    """``size`` nodes spread evenly over the sorted names, leaving out ``exclude``.

    Nodes with ``needed`` free GPUs come first (smoke tests need GPUs to run;
    a node busy to the last GPU cannot be validated without evicting work).
    """
    pool = sorted(name for name in names if name not in exclude)
    if size <= 0 or not pool:
        return []
    roomy = [name for name in pool if free is None or free.get(name, 0) >= needed]
    chosen = _spread(roomy, size)
    if len(chosen) < size:
        chosen += _spread([name for name in pool if name not in chosen], size - len(chosen))
    return sorted(chosen)


def _spread(pool: Sequence[str], size: int) -> List[str]:
    if size <= 0 or not pool:
        return []
    if size >= len(pool):
        return list(pool)
    if size == 1:
        return [pool[0]]
    step = (len(pool) - 1) / (size - 1)
    return sorted({pool[round(index * step)] for index in range(size)})


def describe_steps(plan: Mapping[str, Any]) -> str:
    """The planner's steps in one line each: what a person must split the change into."""
    lines = []
    for step in plan.get("steps") or []:
        changes = ", ".join(f"{c['component']} {c['from']} -> {c['to']}" for c in step.get("changes") or [])
        violates = f" [violates {', '.join(step['violates'])}]" if step.get("violates") else ""
        lines.append(f"{step['step']}. {step['title']}: {changes}{violates}")
    return " ".join(lines)


def _read_document(path: str) -> Any:
    # The ConfigMap form says where the matrix lives; the ledger goes beside it.
    with open(path, encoding="utf-8") as handle:
        return parse_yaml_text(handle.read(), source=path)


def plan_run(request: RunRequest, *, api: KubeApi) -> Dict[str, Any]:
    """Everything a run needs to know before it changes anything; reads only.

    Matrix problems become a ``refuse`` decision (with the planner's steps
    when more than one group changes), so they are reported like every other
    refusal and nothing is written to the cluster.
    """
    if request.stage not in STAGES:
        raise InvalidInputError(f"Unknown stage {request.stage!r} (expected one of {', '.join(STAGES)})")
    now = api.server_time()
    result: Dict[str, Any] = {
        "stage": request.stage,
        "started_at": iso(now),
        "matrix_file": request.matrix_path,
        "group": "",
        "campaign": "",
        "versions_before": {},
        "versions_after": {},
        "changes": [],
        "canary_node": "",
        "sample_nodes": [],
        "validate_nodes": [],
    }

    loaded = _load_run(request, api=api, result=result)
    if not isinstance(loaded, _RunContext):
        return loaded
    if request.stage == "rollback":
        return _plan_rollback(loaded)
    return _plan_forward(loaded, now=now)


@dataclass
class _RunContext:
    """What plan_run read before deciding: the request, the matrix and catalog, the ledgers and the GPU nodes."""

    request: RunRequest
    api: KubeApi
    result: Dict[str, Any]
    matrix: Any
    catalog: Any
    entries: List[Dict[str, Any]]
    nodes: List[Dict[str, Any]]
    gpu_nodes: List[str]
    rules: Any
    production: Dict[str, Any]


def _refuse(result: Dict[str, Any], reason: str) -> Dict[str, Any]:
    result["decision"] = Decision(REFUSE, reason).as_dict()
    return result


def _load_run(request: RunRequest, *, api: KubeApi, result: Dict[str, Any]) -> Union[_RunContext, Dict[str, Any]]:
    """Read the matrix, catalog, ledgers and GPU nodes; a matrix that cannot be used is a refusal (the result)."""
    source = MatrixSource(path=request.matrix_path, catalog_path=request.catalog_path)
    try:
        matrix = read_matrix_file(source)
        if matrix is None:
            raise InvalidInputError("no matrix file given (upgrade_matrix_file)")
        assert_valid(matrix)
        catalog = read_catalog(source)
        document = _read_document(request.matrix_path)
    except InvalidInputError as err:
        result["namespace"] = request.namespace or "gpu-operator"
        return _refuse(result, f"The matrix cannot be used: {err.msg}")
    namespace = request.namespace
    if not namespace and isinstance(document, Mapping) and document.get("kind") == "ConfigMap":
        namespace = str((document.get("metadata") or {}).get("namespace") or "")
    namespace = namespace or "gpu-operator"
    result["namespace"] = namespace
    result["matrix_form"] = matrix.form
    entries = merge_entries(
        read_cluster_ledger(api, namespace=namespace, name=request.configmap_name),
        # A ledger file kept for another cluster says nothing about this one.
        [entry for entry in read_file_ledger(request.ledger_file) if entry.get("cluster") in (None, "", api.host)],
    )
    result["ledger_entries"] = len(entries)
    result["cluster"] = api.host
    nodes = api.list(NODES, label_selector=request.gpu_node_selector)
    gpu_nodes = sorted(_node_name(node) for node in nodes)
    result["gpu_nodes"] = gpu_nodes
    rules = evaluate_matrix(matrix, catalog=catalog)
    production = matrix.effective_versions("current_production")

    return _RunContext(
        request=request,
        api=api,
        result=result,
        matrix=matrix,
        catalog=catalog,
        entries=entries,
        nodes=nodes,
        gpu_nodes=gpu_nodes,
        rules=rules,
        production=production,
    )


def _plan_rollback(ctx: _RunContext) -> Dict[str, Any]:
    """A rollback: back from the open campaign to current_production, or to the matrix's rollback entry."""
    request, api, result = ctx.request, ctx.api, ctx.result
    matrix, catalog, entries, nodes, gpu_nodes = ctx.matrix, ctx.catalog, ctx.entries, ctx.nodes, ctx.gpu_nodes
    production = ctx.production
    open_states = open_campaigns(entries)
    unvalidated = None if open_states else last_unvalidated(entries)
    decision = decide_rollback(
        open_states=open_states,
        rollback_to=request.rollback_to,
        has_rollback_stage="rollback" in matrix.stages,
        unvalidated=unvalidated,
    )
    latest = open_states[-1] if open_states else unvalidated
    result["open_changes"] = [state.as_dict() for state in open_states]
    if decision.action != RUN:
        result["decision"] = decision.as_dict()
        return result
    if decision.rollback_target == ROLLBACK_TO_ENTRY:
        plan = plan_stage(matrix, "rollback", catalog=catalog).as_dict()
        target = matrix.effective_versions("rollback")
        before = production
        groups = plan["groups"]
        if len(groups) != 1:
            result["plan"] = plan
            return _refuse(
                result,
                f"The rollback entry changes {len(groups)} component groups ({', '.join(groups) or 'none'}) "
                f"compared with current_production; one rollback step changes one group. Planner: "
                f"{describe_steps(plan) or 'no step'}",
            )
        disruptive = disruptive_refusal(plan, stage="rollback")
        if disruptive:
            result["plan"] = plan
            return _refuse(result, disruptive)
        group = groups[0]
        result["validate_nodes"] = sample_nodes(
            gpu_nodes, size=request.sample_size, free=_free_gpus_now(api, nodes), needed=request.sample_free_gpus
        )
        result["plan"] = plan
    else:
        group = latest.group if latest is not None else ""
        before = dict(latest.versions_after) if latest is not None else matrix.effective_versions("canary_testing")
        if latest is not None and latest is unvalidated:
            before = dict(production)  # rolled back already: only the validation is left
        target = production
        if not group:
            plan = (
                plan_stage(matrix, "canary_testing", catalog=catalog).as_dict()
                if "canary_testing" in matrix.stages
                else {}
            )
            group = (plan.get("groups") or [""])[0]
        canary = choose_canary_node(
            nodes,
            label=request.canary_label,
            requested=request.canary_node,
            ledger_node=latest.canary_node if latest else "",
        )
        if canary.problem:
            return _refuse(result, f"Cannot roll back the canary: {canary.problem}")
        result["canary_node"] = canary.node
        result["validate_nodes"] = [canary.node]
    result["campaign"] = latest.campaign if latest is not None else campaign_id(group, target)
    result.update(group=group, versions_before=before, versions_after=target)
    result["changes"] = _changes(before, target)
    if group not in request.supported_groups:
        return _refuse(result, _unsupported(group, request.supported_groups))
    result["decision"] = decision.as_dict()
    return result


def _plan_forward(ctx: _RunContext, *, now: datetime.datetime) -> Dict[str, Any]:
    """A canary, bake or promote of the canary_testing change: the ledger's campaign decides what runs."""
    request, api, result = ctx.request, ctx.api, ctx.result
    matrix, catalog, entries, nodes, gpu_nodes = ctx.matrix, ctx.catalog, ctx.entries, ctx.nodes, ctx.gpu_nodes
    production = ctx.production
    rules = ctx.rules
    has_canary_stage = "canary_testing" in matrix.stages
    plan = (
        plan_stage(matrix, "canary_testing", catalog=catalog).as_dict()
        if has_canary_stage
        else {"groups": [], "steps": []}
    )
    result["plan"] = plan
    groups = list(plan.get("groups") or [])
    if len(groups) > 1:
        return _refuse(
            result,
            f"canary_testing changes {len(groups)} component groups at once ({', '.join(groups)}); a canary changes "
            f"one. The planner splits it into: {describe_steps(plan)}",
        )
    disruptive = disruptive_refusal(plan, stage="canary_testing")
    if disruptive:
        return _refuse(result, disruptive)
    blocking = [
        res
        for res in rules.by_status(VIOLATION)
        if res.stage in ("current_production", "canary_testing")
        and (res.rule in ("one_group_at_a_time", "upgrade_order") or res.stage == "canary_testing")
    ]
    if blocking:
        findings = "; ".join(
            f"{res.rule} ({res.stage}): " + ", ".join(f.message for f in res.findings if f.status == VIOLATION)
            for res in blocking
        )
        return _refuse(
            result, f"The matrix violates rules the upgrade depends on: {findings}. Planner: {describe_steps(plan)}"
        )
    target = matrix.effective_versions("canary_testing") if has_canary_stage else production
    group = groups[0] if groups else ""
    campaign = campaign_id(group, target) if group else ""
    state = fold_campaign(entries, campaign) if campaign else CampaignState(campaign="")
    promoted = [candidate for candidate in open_campaigns(entries) if candidate.promoted]
    result.update(
        group=group,
        campaign=campaign,
        versions_before=production,
        versions_after=target,
        changes=_changes(production, target),
        campaign_state=state.as_dict(),
        baseline=state.baseline,
    )
    decision = decide(
        request.stage,
        state=state,
        changes_groups=len(groups),
        now=now,
        bake_hours=request.bake_hours,
        force_reason=request.force_reason,
        promoted_elsewhere=promoted[-1] if promoted else None,
    )
    if decision.action == RUN and group not in request.supported_groups:
        return _refuse(result, _unsupported(group, request.supported_groups))
    if decision.action == RUN:
        stage_meta = matrix.stage("canary_testing")
        matrix_node = str((stage_meta.metadata if stage_meta else {}).get("canary_node") or "")
        # After the canary stage, the canary is the node the ledger says was upgraded.
        resuming = request.stage in ("bake", "promote") and bool(state.canary_node)
        canary = choose_canary_node(
            nodes,
            label=request.canary_label,
            requested=request.canary_node,
            matrix_node="" if resuming else matrix_node,
            ledger_node=state.canary_node if resuming else "",
        )
        if canary.problem:
            return _refuse(result, f"No canary node: {canary.problem}")
        result["canary_node"] = canary.node
        result["canary_node_source"] = canary.source
        if request.stage == "promote":
            result["sample_nodes"] = sample_nodes(
                gpu_nodes,
                size=request.sample_size,
                exclude=[canary.node],
                free=_free_gpus_now(api, nodes),
                needed=request.sample_free_gpus,
            )
            result["validate_nodes"] = result["sample_nodes"]
        else:
            result["validate_nodes"] = [canary.node]
    result["decision"] = decision.as_dict()
    return result


def sample_nodes_now(
    api: KubeApi, *, gpu_node_selector: str, size: int, needed: int, exclude: Sequence[str] = ()
) -> List[str]:
    """The nodes to validate after a fleet-wide change, chosen from the cluster as it is now
    (the rollout moved workloads around, so free GPUs are only known afterwards)."""
    nodes = api.list(NODES, label_selector=gpu_node_selector)
    names = [_node_name(node) for node in nodes]
    return sample_nodes(names, size=size, exclude=exclude, free=_free_gpus_now(api, nodes), needed=needed)


def _free_gpus_now(api: KubeApi, nodes: Sequence[Mapping[str, Any]]) -> Dict[str, int]:
    pods = api.list(PODS, field_selector="status.phase!=Succeeded,status.phase!=Failed", page_size=5000)
    return free_gpus(nodes, pods, read_dra_gpus(api, pods))


def _changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> List[Dict[str, Any]]:
    return [
        {"component": name, "from": before.get(name), "to": after.get(name)}
        for name in changed_components(before, after)
    ]


def _unsupported(group: str, supported: Sequence[str]) -> str:
    return (
        f"The change is in component group {group!r}, which this flow cannot upgrade yet (it can: "
        f"{', '.join(supported)}). Nothing was changed."
    )
