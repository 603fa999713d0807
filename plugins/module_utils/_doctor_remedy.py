# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The upgrade doctor's opt-in remediation: a fixed list of actions, bounded, recorded (collection-internal).

Actions (``_doctor.Remediation.action``), each checked again on a fresh read of
its object right before it is taken:

- ``relabel_upgrade_required``: an ``upgrade-failed`` node whose cause is gone
  gets ``upgrade-required`` (the documented manual retry, gpu-operator #2549);
  resourceVersion-guarded, so a controller that moved the node meanwhile wins;
- ``evict_pods``: the named pods that hold the node and match the user's
  ``remediate_pod_selector``, through the eviction API (PDBs apply; the doctor
  never deletes a PDB and never force-deletes);
- ``restart_validator``: delete a failing validator pod once per driver pod
  (its DaemonSet starts a new one); the node's annotation remembers it;
- ``unpause_pool``: unpause a MachineConfigPool only when this collection
  paused it (its ``gpufleet.io/paused-at`` annotation): a pool paused by
  someone else (the SR-IOV operator pauses pools while it drains) is left;
- ``clear_hold``: remove this collection's own hold (skip label plus its hold
  annotation) from a node when the run that set it stopped and its stage Lease
  expired; checked again on a fresh read of the Lease (a run that holds it now
  owns the hold) and of the node (resourceVersion-guarded; a skip label without
  this collection's annotation is a person's and is left).

Plan (pure): at most ``max_actions`` and one action per node. Apply: each
action is recorded as an Event on the node and, together, as one ledger entry.
Check mode plans the same and writes nothing.
"""

from __future__ import annotations

import datetime
from typing import Any, Dict, List, Optional, Sequence

from ansible_collections.gpufleet.upgrade.plugins.module_utils._doctor import (
    DoctorOptions,
    Remediation,
    diagnose,
    summary_lines,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._doctor_read import read_cluster
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import KubeApi
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_events import record_event
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import (
    get_node,
    label_selector_matches,
    list_pods_on_node,
    parse_label_selector,
    pod_controller,
    pod_key,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    DRIVER_SELECTOR,
    LEASES,
    MACHINE_CONFIG_POOLS,
    NODES,
    PODS,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._lease import is_expired, parse_lease
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ledger import append_cluster_entry, new_entry_id
from ansible_collections.gpufleet.upgrade.plugins.module_utils._permission_check import (
    PermissionRequest,
    check_permissions,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._permissions import LEDGER
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso

ACTIONS = ("relabel_upgrade_required", "evict_pods", "restart_validator", "unpause_pool", "clear_hold")
EVENT_REASON = "GPUFleetDoctor"
VALIDATOR_RESTART_ANNOTATION = "gpufleet.io/doctor-restarted-validator"


def plan_remediations(
    candidates: Sequence[Remediation], *, max_actions: int, allowed: Sequence[str] = ACTIONS
) -> Dict[str, Any]:
    """Which candidate actions run: those allowed, one per node, at most ``max_actions``; the rest are listed as
    deferred with why."""
    if max_actions < 0:
        raise InvalidInputError(f"max_actions must be 0 or more, got {max_actions}")
    unknown = sorted(set(allowed) - set(ACTIONS))
    if unknown:
        raise InvalidInputError(
            f"remediate_actions: unknown actions {', '.join(unknown)} (known: {', '.join(ACTIONS)})"
        )
    chosen: List[Remediation] = []
    deferred: List[Dict[str, Any]] = []
    nodes = set()
    for candidate in candidates:
        if candidate.action not in allowed:
            deferred.append({**candidate.as_dict(), "why": "action not in remediate_actions"})
        elif candidate.node in nodes:
            deferred.append({**candidate.as_dict(), "why": "one action per node per run"})
        elif len(chosen) >= max_actions:
            deferred.append({**candidate.as_dict(), "why": f"max_actions {max_actions} reached"})
        else:
            chosen.append(candidate)
            nodes.add(candidate.node)
    return {"actions": chosen, "deferred": deferred}


def validate_pod_selector(selector: str) -> None:
    """A bad selector is refused before anything is read or changed."""
    try:
        parse_label_selector(selector)
    except InvalidInputError as err:
        raise InvalidInputError(f"remediate_pod_selector: {err.msg}") from err


def apply_remediations(
    api: KubeApi,
    actions: Sequence[Remediation],
    *,
    check_mode: bool,
    pod_selector: str,
    ledger_namespace: str,
    ledger_name: str,
    actor: str,
    now: datetime.datetime,
) -> List[Dict[str, Any]]:
    """Take each action (or, in check mode, say what it would do); returns one record per action."""
    records: List[Dict[str, Any]] = []
    for action in actions:
        record: Dict[str, Any] = {**action.as_dict(), "taken": False, "check_mode": check_mode}
        outcome = _ACTIONS[action.action](api, action, check_mode=check_mode, pod_selector=pod_selector)
        record.update(outcome)
        if record["taken"] and not check_mode:
            node = get_node(api, action.node)
            record_event(
                api,
                node,
                message=f"gpufleet.upgrade doctor: {record['result']}",
                reason=EVENT_REASON,
                action="Remediate",
            )
        records.append(record)
    taken = [record for record in records if record["taken"]]
    if taken and not check_mode and ledger_namespace:
        append_cluster_entry(
            api,
            {
                "id": new_entry_id("doctor", now),
                "stage": "doctor",
                "outcome": "success",
                "recorded_at": iso(now),
                "actor": actor,
                "remediations": [
                    {key: record[key] for key in ("action", "node", "target", "result")} for record in taken
                ],
            },
            namespace=ledger_namespace,
            name=ledger_name,
        )
    return records


def _relabel(api: KubeApi, action: Remediation, *, check_mode: bool, pod_selector: str) -> Dict[str, Any]:
    node = get_node(api, action.node)
    label = str(action.target["label"])
    current = ((node.get("metadata") or {}).get("labels") or {}).get(label, "")
    if current != action.target["from"]:
        return {"result": f"left {action.node}: {label} is {current or 'unset'} now, not {action.target['from']}"}
    result = f"relabelled {action.node} {label} {action.target['from']} -> {action.target['to']}"
    if not check_mode:
        api.patch(
            NODES,
            action.node,
            {
                "metadata": {
                    "labels": {label: action.target["to"]},
                    "resourceVersion": node["metadata"]["resourceVersion"],
                }
            },
        )
    return {"taken": True, "result": ("would have " if check_mode else "") + result}


def _evict(api: KubeApi, action: Remediation, *, check_mode: bool, pod_selector: str) -> Dict[str, Any]:
    if not pod_selector:
        return {"result": "no remediate_pod_selector: nothing may be evicted"}
    named = set(action.target.get("pods") or [])
    live = [
        pod
        for pod in list_pods_on_node(api, action.node)
        if pod_key(pod) in named
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
        # A DaemonSet's pod is put back at once (it tolerates the cordon): never evicted.
        and (pod_controller(pod) or {}).get("kind") != "DaemonSet"
        and label_selector_matches(pod_selector, (pod.get("metadata") or {}).get("labels") or {})
    ]
    if not live:
        return {"result": f"no pod on {action.node} is both named and matches {pod_selector}"}
    evicted: List[str] = []
    refused: List[str] = []
    for pod in live:
        meta = pod["metadata"]
        accepted = api.evict(meta["namespace"], meta["name"], dry_run=check_mode)
        (evicted if accepted else refused).append(pod_key(pod))
    verb = "would evict" if check_mode else "evicted"
    result = f"{verb} {', '.join(evicted) or 'none'} from {action.node}"
    if refused:
        result += f"; a PodDisruptionBudget refused {', '.join(refused)}"
    return {"taken": bool(evicted), "result": result, "evicted": evicted, "refused": refused}


def _restart_validator(api: KubeApi, action: Remediation, *, check_mode: bool, pod_selector: str) -> Dict[str, Any]:
    namespace, name = str(action.target["namespace"]), str(action.target["pod"])
    pod = api.get(PODS, name, namespace=namespace)
    if pod is None:
        return {"result": f"validator pod {namespace}/{name} is gone already"}
    node = get_node(api, action.node)
    marker = _driver_generation(api, action.node)
    if ((node.get("metadata") or {}).get("annotations") or {}).get(VALIDATOR_RESTART_ANNOTATION) == marker:
        return {"result": f"validator on {action.node} was restarted once already for this driver pod; left"}
    result = f"deleted validator pod {namespace}/{name} on {action.node} (its DaemonSet starts it again)"
    if not check_mode:
        api.patch(NODES, action.node, {"metadata": {"annotations": {VALIDATOR_RESTART_ANNOTATION: marker}}})
        api.delete(PODS, name, namespace=namespace)
    return {"taken": True, "result": ("would have " if check_mode else "") + result}


def _driver_generation(api: KubeApi, node_name: str) -> str:
    """The uid of the node's driver pod: the validator is restarted once per driver pod."""
    for pod in list_pods_on_node(api, node_name, label_selector=DRIVER_SELECTOR):
        if not (pod.get("metadata") or {}).get("deletionTimestamp"):
            return str(pod["metadata"].get("uid") or "")
    return "no-driver-pod"


def _unpause(api: KubeApi, action: Remediation, *, check_mode: bool, pod_selector: str) -> Dict[str, Any]:
    name = str(action.target["pool"])
    pool = api.get(MACHINE_CONFIG_POOLS, name)
    if pool is None or not (pool.get("spec") or {}).get("paused"):
        return {"result": f"pool {name} is not paused (any more)"}
    annotations = (pool.get("metadata") or {}).get("annotations") or {}
    if not annotations.get("gpufleet.io/paused-at"):
        return {"result": f"pool {name} was not paused by this collection; left paused"}
    result = f"unpaused MachineConfigPool {name}"
    if not check_mode:
        api.patch(
            MACHINE_CONFIG_POOLS,
            name,
            {
                "metadata": {
                    "annotations": {"gpufleet.io/paused-at": None, "gpufleet.io/paused-reason": None},
                    "resourceVersion": pool["metadata"]["resourceVersion"],
                },
                "spec": {"paused": False},
            },
        )
    return {"taken": True, "result": ("would have " if check_mode else "") + result}


def _clear_hold(api: KubeApi, action: Remediation, *, check_mode: bool, pod_selector: str) -> Dict[str, Any]:
    namespace, lease_name = str(action.target["lease"]).split("/", 1)
    lease = parse_lease(api.get(LEASES, lease_name, namespace=namespace) or {})
    if lease is not None and lease.holder and not is_expired(lease, now=api.cluster_now()):
        return {"result": f"left {action.node}: {lease.holder} holds Lease {action.target['lease']} now"}
    node = get_node(api, action.node)
    label, annotation = str(action.target["label"]), str(action.target["annotation"])
    meta = node.get("metadata") or {}
    if not (meta.get("annotations") or {}).get(annotation):
        return {"result": f"left {action.node}: it carries no {annotation} (any more)"}
    result = f"removed the hold {label} ({annotation}) from {action.node}, left by {action.target['holder']}"
    if not check_mode:
        api.patch(
            NODES,
            action.node,
            {
                "metadata": {
                    "labels": {label: None},
                    "annotations": {annotation: None},
                    "resourceVersion": meta["resourceVersion"],
                }
            },
        )
    return {"taken": True, "result": ("would have " if check_mode else "") + result}


_ACTIONS = {
    "relabel_upgrade_required": _relabel,
    "evict_pods": _evict,
    "restart_validator": _restart_validator,
    "unpause_pool": _unpause,
    "clear_hold": _clear_hold,
}


def run_doctor(
    api: KubeApi,
    *,
    check_mode: bool,
    remediate: bool,
    max_actions: int,
    remediate_actions: Sequence[str],
    pod_selector: str,
    node_selector: str,
    lease_namespace: str,
    lease_name: str,
    ledger_name: str,
    max_logs: int,
    actor: str,
    operator_namespaces: Optional[Sequence[str]] = None,
) -> Dict[str, Any]:
    """The ``upgrade_doctor`` module's work: read, diagnose, and (opt-in) remediate."""
    validate_pod_selector(pod_selector)
    if node_selector:
        parse_label_selector(node_selector)
    plan_remediations([], max_actions=max_actions, allowed=remediate_actions)
    if remediate:
        # Before the first read and write, in check mode too: may these credentials do everything a remediation
        # may do (the remediation account's roles, rbac/diagnose.yaml)? Refused naming each missing rule.
        check_permissions(
            api,
            PermissionRequest(
                playbook="diagnose",
                features=("doctor_remediate",),
                namespaces={LEDGER: lease_namespace} if lease_namespace else {},
            ),
        )
    view = read_cluster(
        api, node_selector=node_selector, lease_namespace=lease_namespace, lease_name=lease_name, max_logs=max_logs
    )
    options = DoctorOptions(remediate_pod_selector=pod_selector)
    if operator_namespaces:
        options = DoctorOptions(operator_namespaces=tuple(operator_namespaces), remediate_pod_selector=pod_selector)
    result = diagnose(view, options=options)
    candidates: List[Remediation] = result.pop("remediations")
    records: List[Dict[str, Any]] = []
    deferred: List[Dict[str, Any]] = []
    if remediate:
        plan = plan_remediations(candidates, max_actions=max_actions, allowed=remediate_actions)
        deferred = plan["deferred"]
        ledger_namespace = lease_namespace or str(
            ((view.cluster_policy or {}).get("status") or {}).get("namespace") or ""
        )
        records = apply_remediations(
            api,
            plan["actions"],
            check_mode=check_mode,
            pod_selector=pod_selector,
            ledger_namespace=ledger_namespace,
            ledger_name=ledger_name,
            actor=actor,
            now=view.now,
        )
    result.update(
        changed=any(record["taken"] for record in records),
        stuck=bool(result["findings"] or result["cluster"]),
        summary=summary_lines(result),
        remediation_candidates=[candidate.as_dict() for candidate in candidates],
        remediations=records,
        deferred=deferred,
        warnings=[warning for finding in result["findings"] for warning in finding["warnings"]],
        api_requests=api.requests_sent,
    )
    return result
