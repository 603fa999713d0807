# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Taking and giving up the stage Lease from a module: the stage_lease module's work, and upgrade_ledger's when it
takes the Lease before planning (``action=plan``) or gives it up after recording (``action=record``).

The Lease's rules are in _lease.py; this is the I/O around them: a client from the module's options and the keeper
process that renews the Lease between the stage's modules.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import KubeApi, forget_inherited_credential_files
from ansible_collections.gpufleet.upgrade.plugins.module_utils._lease import (
    LeaseSettings,
    StageLease,
    keep_renewed,
    run_stage_lease,
    start_keeper,
)


def lease_settings(namespace: str, options: Mapping[str, Any]) -> LeaseSettings:
    """The Lease named by a module's options (``name``, ``holder``, ``duration``)."""
    return LeaseSettings(
        namespace=namespace,
        name=options["name"],
        holder=options["holder"],
        duration_seconds=options["duration"],
    )


def take_or_release(
    api: KubeApi, params: Dict[str, Any], settings: LeaseSettings, *, state: str, keep_for: int, check_mode: bool
) -> Dict[str, Any]:
    """Take (``present``) or give up (``absent``) the Lease; once taken, a keeper renews it for ``keep_for`` s.

    ``api`` is the module's client; it must manage the Lease itself (built with ``keep_stage_lease=False``, so it
    does not renew one handed over in the environment). ``params`` holds the module's connection options, from
    which the keeper builds a client of its own."""
    result = run_stage_lease(api, settings=settings, state=state, check_mode=check_mode)
    if state == "present":
        held = result["held"] and keep_for > 0
        result["keeper_pid"] = start_keeper(lambda: keep(params, settings, keep_for=keep_for)) if held else 0
    return result


def keep(params: Dict[str, Any], settings: LeaseSettings, *, keep_for: int) -> str:
    """The keeper's work, in the child: a client of its own (no connection or certificate file shared with the
    module, which exits), renewing until the stage ends."""
    delete_credential_files = forget_inherited_credential_files()
    try:
        api = KubeApi.from_params(params, keep_stage_lease=False)
        return keep_renewed(StageLease(api, settings), keep_for=keep_for)
    finally:
        delete_credential_files()
