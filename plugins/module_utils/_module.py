# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""What every module file shares (collection-internal): option pieces and the main() path.

Each argument-spec piece is mirrored by the doc fragment named in its
docstring (as community.hashi_vault composes its specs), so an option has one
name, one type and one default across the collection.

``run_module`` is the path every ``main()`` takes once it has built its
AnsibleModule: report a missing library, run the module's work, show its
warnings, and turn the collection's one error type into the one
``fail_json(msg="Failed to <verb> <object>: <reason>")``, with whatever partial
result the error carries.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Sequence, Tuple

from ansible.module_utils.basic import env_fallback, missing_required_lib

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import GpuFleetError

Spec = Dict[str, Dict[str, Any]]

WAIT_OPTIONS = ("wait", "wait_timeout", "wait_sleep")
WAIT_TIMEOUT = 3600
WAIT_SLEEP = 10.0


def wait_argument_spec(
    *, options: Sequence[str] = WAIT_OPTIONS, wait_timeout: int = WAIT_TIMEOUT, wait_sleep: float = WAIT_SLEEP
) -> Spec:
    """The wait options named in ``options`` (doc fragments gpufleet.upgrade.wait, .timeout, .sleep).

    A module whose work needs another default passes it here and documents it
    over the fragment's, saying why.
    """
    pieces: Spec = {
        "wait": {"type": "bool", "default": True},
        "wait_timeout": {"type": "int", "default": wait_timeout},
        "wait_sleep": {"type": "float", "default": wait_sleep},
    }
    unknown = sorted(set(options) - set(pieces))
    if unknown:
        raise ValueError(f"not wait options: {', '.join(unknown)}")
    return {name: pieces[name] for name in options}


def failure_domain_argument_spec() -> Spec:
    """The failure-domain options of the rollout modules (doc fragment gpufleet.upgrade.failure_domains)."""
    return {
        "failure_domain_label": {"type": "str", "default": ""},
        "max_per_domain": {"type": "int", "default": 1},
    }


def gitops_argument_spec(*, synced: bool = True) -> Spec:
    """The GitOps-mode options (doc fragments gpufleet.upgrade.gitops and gpufleet.upgrade.gitops.synced)."""
    spec: Spec = {"gitops_managed": {"type": "list", "elements": "str", "default": []}}
    if synced:
        spec["gitops_synced"] = {"type": "bool", "default": False}
    return spec


def redfish_argument_spec(*, credentials_required: bool = False, aliases: Optional[Mapping[str, str]] = None) -> Spec:
    """How to reach a BMC (doc fragment gpufleet.upgrade.redfish); credentials fall back to REDFISH_* variables.

    ``aliases`` maps an option to an older name a module accepted before the
    options were shared, so existing playbooks keep working.
    """
    spec: Spec = {
        "bmc_username": {"type": "str", "fallback": (env_fallback, ["REDFISH_USERNAME"])},
        "bmc_password": {"type": "str", "no_log": True, "fallback": (env_fallback, ["REDFISH_PASSWORD"])},
        "bmc_validate_certs": {"type": "bool", "default": True},
        "bmc_ca_path": {"type": "path"},
        "bmc_timeout": {"type": "int", "default": 30},
    }
    if credentials_required:
        spec["bmc_username"]["required"] = True
        spec["bmc_password"]["required"] = True
    for name, alias in (aliases or {}).items():
        if name not in spec:
            raise ValueError(f"not a Redfish option: {name}")
        spec[name]["aliases"] = [alias]
    return spec


def firmware_components_argument_spec() -> Spec:
    """The firmware to flash (doc fragment gpufleet.upgrade.firmware_components); see _firmware_plan.component_specs."""
    return {
        "components": {
            "type": "list",
            "elements": "dict",
            "required": True,
            "options": {
                "match": {"type": "str", "required": True},
                "version": {"type": "str"},
                "image_path": {"type": "path"},
                "image_uri": {"type": "str"},
                "sha256": {"type": "str"},
                "name": {"type": "str"},
            },
        },
    }


def stage_lease_argument_spec() -> Spec:
    """The stage Lease's options: stage_lease's own, and upgrade_ledger's ``lease`` suboptions (documented there by
    reference to stage_lease's)."""
    return {
        "namespace": {"type": "str", "required": True},
        "name": {"type": "str", "default": "gpufleet-upgrade"},
        "holder": {"type": "str", "required": True},
        "duration": {"type": "int", "default": 300},
        "keep_renewed_for": {"type": "int", "default": 0},
    }


def milestone_argument_spec(milestones: Iterable[str]) -> Spec:
    """A stage milestone's Event options: upgrade_event's own (it adds ``group``), and upgrade_ledger's
    ``milestones`` suboptions (documented there by reference to upgrade_event's)."""
    return {
        "milestone": {"type": "str", "required": True, "choices": list(milestones)},
        "nodes": {"type": "list", "elements": "str", "default": []},
        "event_message": {"type": "str", "required": True},
    }


def finding_warnings(findings: Iterable[Mapping[str, Any]], *, prefix: str = "") -> Iterable[str]:
    """The warning-severity findings (preflight, interlock) as warning lines ``<prefix><check>: <message>``."""
    return [f"{prefix}{item['check']}: {item['message']}" for item in findings if item.get("severity") == "warning"]


def run_module(
    module: Any,
    work: Callable[[], Dict[str, Any]],
    *,
    failure: str,
    missing: Iterable[Tuple[str, Optional[str]]] = (),
    more_warnings: Optional[Callable[[Dict[str, Any]], Iterable[str]]] = None,
) -> None:
    """Run ``work`` (which returns the module's result) for ``module`` and exit; never returns.

    ``failure`` is the message's head, "Failed to <verb> <object>"; ``missing``
    lists (library, import traceback) pairs of libraries that did not import;
    ``more_warnings`` names warnings the result holds besides its ``warnings``.
    """
    for library, error in missing:
        module.fail_json(msg=missing_required_lib(library), exception=error)
    try:
        result = work()
    except GpuFleetError as err:
        for warning in err.result.pop("warnings", []):
            module.warn(warning)
        module.fail_json(msg=f"{failure}: {err.msg}", **err.result)
    for warning in result.pop("warnings", []):
        module.warn(warning)
    for warning in more_warnings(result) if more_warnings else ():
        module.warn(warning)
    module.exit_json(**result)
