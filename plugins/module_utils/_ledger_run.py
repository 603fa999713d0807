# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The upgrade_ledger module's work: plan a run, record its entry and reports, sample nodes, read the ledger.

I/O lives here (the cluster, the ledger file, the report files); the decisions are in _ledger.py, the
reports in _report*.py.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import GpuFleetError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._fleet import check_cluster_name
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import KubeApi
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_events import record_stage_events
from ansible_collections.gpufleet.upgrade.plugins.module_utils._lease_run import lease_settings, take_or_release
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ledger import (
    RunRequest,
    append_cluster_entry,
    append_file_entry,
    merge_entries,
    new_entry_id,
    parse_iso,
    plan_run,
    read_cluster_ledger,
    read_file_ledger,
    sample_nodes_now,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_write import write_text_atomically
from ansible_collections.gpufleet.upgrade.plugins.module_utils._permission_check import (
    PermissionRequest,
    check_permissions,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._permissions import COMPONENT_STEPS
from ansible_collections.gpufleet.upgrade.plugins.module_utils._report import (
    halted_diagnosis,
    render_report,
    report_file_name,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._report_html import (
    HAS_JINJA2,
    html_file_name,
    render_html,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._report_timeline import resumed_runs
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso


def record(params: Dict[str, Any], api: KubeApi, *, check_mode: bool, warn: Callable[[str], None]) -> Dict[str, Any]:
    """Record a run's entry in the ledger (ConfigMap and/or file) and write its reports; check mode writes nothing."""
    entry = dict(params["entry"] or {})
    if "diagnosis" in entry:
        # The doctor's answer for a halted stage: only the halted nodes' findings are kept.
        halted = [str(f["node"]) for f in entry.get("failures") or [] if isinstance(f, dict) and f.get("node")]
        entry["diagnosis"] = halted_diagnosis(entry["diagnosis"], halted)
        if not entry["diagnosis"]:
            del entry["diagnosis"]
    now = api.server_time()
    entry.setdefault("id", new_entry_id(str(entry.get("stage") or "run"), now))
    entry["recorded_at"] = iso(now)
    entry["cluster"] = api.host
    if params["cluster_name"]:
        entry["cluster_name"] = params["cluster_name"]
    started = entry.get("started_at")
    if started:
        entry["duration_seconds"] = round((now - parse_iso(started)).total_seconds(), 1)
    namespace = params["namespace"] or "gpu-operator"
    in_cluster = params["record_in_cluster"]
    entry["ledger"] = {
        "configmap": f"{namespace}/{params['configmap_name']}",
        "in_cluster": in_cluster,
        "file": params["ledger_file"] or "",
    }
    # A run that takes up where failed runs of the same stage stopped says so, and the report shows the campaign.
    # (The ConfigMap only when this entry goes there too: a refusal may come from a cluster that cannot be read.)
    earlier = merge_entries(
        read_cluster_ledger(api, namespace=namespace, name=params["configmap_name"]) if in_cluster else [],
        read_file_ledger(params["ledger_file"] or ""),
    )
    resumed = resumed_runs(earlier, entry)
    if resumed:
        entry["resumed_runs"] = resumed
    report = render_report(entry)
    # Every real run writes what it is given to: the ConfigMap entry, the file entry, the reports.
    writes = bool(in_cluster or params["ledger_file"] or params["report_dir"])
    result: Dict[str, Any] = {"entry": entry, "report": report, "changed": writes}
    html = ""
    if params["report_dir"]:
        name = report_file_name(str(entry.get("stage")), entry["recorded_at"], cluster=params["cluster_name"])
        result["report_path"] = os.path.join(params["report_dir"], name)
        if HAS_JINJA2:
            html = render_html(entry)
            result["html_report_path"] = os.path.join(params["report_dir"], html_file_name(name))
        else:
            warn("Jinja2 is not importable by the module's Python: no HTML report, the Markdown one only.")
    if check_mode:
        return result
    if in_cluster:
        append_cluster_entry(api, entry, namespace=namespace, name=params["configmap_name"])
    if params["ledger_file"]:
        append_file_entry(params["ledger_file"], entry)
    if params["report_dir"]:
        write_text_atomically(result["report_path"], report)
        if html:
            write_text_atomically(result["html_report_path"], html)
    return result


def ledger_action(params: Dict[str, Any], *, check_mode: bool, warn: Callable[[str], None]) -> Dict[str, Any]:
    """What the upgrade_ledger module does for its action: plan, record, sample or read."""
    action = params["action"]
    check_cluster_name(params["cluster_name"])
    # One client for the module run. With ``lease`` this run takes or gives up the Lease itself, so its client does
    # not renew one handed over in the environment.
    api = KubeApi.from_params(params, keep_stage_lease=not params.get("lease"))
    if action == "plan":
        request = RunRequest(
            stage=params["stage"],
            matrix_path=params["matrix_file"],
            catalog_path=params["catalog"],
            namespace=params["namespace"],
            configmap_name=params["configmap_name"],
            ledger_file=params["ledger_file"] or "",
            bake_hours=params["bake_hours"],
            force_reason=params["force_reason"] or "",
            canary_node=params["canary_node"] or "",
            canary_label=params["canary_label"],
            rollback_to=params["rollback_to"],
            supported_groups=tuple(params["supported_groups"] or ()),
            gpu_node_selector=params["gpu_node_selector"],
            sample_size=params["sample_size"],
            sample_free_gpus=params["sample_free_gpus"],
        )
        if params.get("lease"):
            return plan_holding_the_lease(request, params, api, check_mode=check_mode)
        result = plan_run(request, api=api)
        if params.get("permissions") is not None:
            result["permissions"] = permissions_for_the_plan(result, params, api)
        result["api_requests"] = api.requests_sent
        return dict(result, changed=False)
    if action == "record":
        recorded = record(params, api, check_mode=check_mode, warn=warn)
        if params.get("milestones"):
            recorded["events"] = record_milestones(params, api, check_mode=check_mode, warn=warn)
        if params.get("lease"):
            recorded["lease_released"] = release_after_recording(params, api, check_mode=check_mode, warn=warn)
        return recorded
    if action == "sample":
        chosen = sample_nodes_now(
            api,
            gpu_node_selector=params["gpu_node_selector"],
            size=params["sample_size"],
            needed=params["sample_free_gpus"],
            exclude=params["exclude_nodes"],
        )
        return {"changed": False, "sample_nodes": chosen}
    entries = merge_entries(
        read_cluster_ledger(api, namespace=params["namespace"] or "gpu-operator", name=params["configmap_name"]),
        read_file_ledger(params["ledger_file"] or ""),
    )
    return {"changed": False, "entries": entries}


def permissions_for_the_plan(plan: Dict[str, Any], params: Dict[str, Any], api: KubeApi) -> Dict[str, Any]:
    """Whether the credentials may do everything the planned stage will do (permission_check's answer).

    Asked only when the stage will run and its group is in the permission table (a group of the user's own role
    is not). Missing permissions, or a check that could not be done, come back as ``failed`` with the message
    permission_check would fail with: the plan itself stands, and roles/upgrade refuses the run before any write.
    """
    group = str(plan.get("group") or "")
    if (plan.get("decision") or {}).get("action") != "run" or group not in COMPONENT_STEPS:
        return {"checked": 0, "missing": [], "skipped": True}
    asked = params["permissions"]
    request = PermissionRequest(
        playbook="upgrade",
        stage=params["stage"],
        group=group,
        features=tuple(asked.get("features") or ()),
        namespaces=dict(asked.get("namespaces") or {}, ledger=str(plan.get("namespace") or "")),
    )
    try:
        return check_permissions(api, request)
    except GpuFleetError as err:
        return dict(err.result, failed=True, msg=f"Failed to confirm the permissions of upgrade.yml: {err.msg}")


def plan_holding_the_lease(
    request: RunRequest, params: Dict[str, Any], api: KubeApi, *, check_mode: bool
) -> Dict[str, Any]:
    """Take the stage Lease (refused before any change while another run's is valid), then plan holding it.

    roles/upgrade planned once before taking it; another run that held it meanwhile may have recorded a stage since,
    which this plan sees. When planning fails once the Lease is held, the failure carries ``held`` so that the role
    gives the Lease up."""
    lease = params["lease"]
    taken = take_or_release(
        api,
        params,
        lease_settings(lease["namespace"], lease),
        state="present",
        keep_for=lease["keep_renewed_for"],
        check_mode=check_mode,
    )
    held = {"held": taken["held"], "lease": taken}
    try:
        result = plan_run(request, api=api)
    except GpuFleetError as err:
        err.result.update(held)
        raise
    result.update(held, api_requests=api.requests_sent)
    return dict(result, changed=taken["changed"])


def record_milestones(
    params: Dict[str, Any], api: KubeApi, *, check_mode: bool, warn: Callable[[str], None]
) -> List[Dict[str, Any]]:
    """Write the milestones the recorded run reached as Events (upgrade_event's), on the entry's group.

    After the record, and never failing it: an Event is a courtesy to ``kubectl describe``, the entry is the run's
    account. One that cannot be written (the API refusing or down past the client's retries, a node gone) is a
    warning naming the milestone and why.
    """
    group = str((params["entry"] or {}).get("group") or "")
    written: List[Dict[str, Any]] = []
    for milestone in params["milestones"]:
        try:
            made = record_stage_events(
                api,
                milestone=milestone["milestone"],
                group=group,
                nodes=milestone["nodes"],
                message=milestone["event_message"],
                check_mode=check_mode,
            )
        except GpuFleetError as err:
            warn(f"The run is recorded, but its {milestone['milestone']} Events were not written: {err.msg}")
            continue
        written += [dict(event, milestone=milestone["milestone"]) for event in made["events"]]
    return written


def release_after_recording(
    params: Dict[str, Any], api: KubeApi, *, check_mode: bool, warn: Callable[[str], None]
) -> bool:
    """Give the stage Lease up once the run is recorded; True when it was this run's and is given up.

    A release that fails is a warning, not a failed record: the entry is written, and roles/upgrade releases the
    Lease again when this did not (its task fails the run if the Lease still cannot be given up)."""
    lease = params["lease"]
    try:
        released = take_or_release(
            api, params, lease_settings(lease["namespace"], lease), state="absent", keep_for=0, check_mode=check_mode
        )
    except GpuFleetError as err:
        warn(f"The run is recorded, but the stage Lease was not given up yet: {err.msg}")
        return False
    return bool(released["changed"]) and not check_mode


def work_on_ledger(params: Dict[str, Any], *, check_mode: bool, warn: Callable[[str], None]) -> Dict[str, Any]:
    """ledger_action, with a file that cannot be read or written reported like any other failure."""
    try:
        return ledger_action(params, check_mode=check_mode, warn=warn)
    except OSError as err:  # the ledger file or the report: reported like any other failure
        raise GpuFleetError(str(err)) from err
