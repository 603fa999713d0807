# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Filters for the GPU Operator's operands (DCGM exporter, device plugin, container toolkit) the matrix names.

Documented in gpu_operand_plan.yml and gpu_operand_pending.yml beside this file.
"""

from __future__ import annotations

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_operands import (
    operand_plan,
    operand_rollout,
)


def gpu_operand_plan(policy, target):
    return operand_plan(policy or {}, target or {})


def gpu_operand_pending(operands, daemonsets):
    by_name = {(ds.get("metadata") or {}).get("name"): ds for ds in daemonsets or []}
    reasons = [operand_rollout(operand, by_name.get(operand["daemonset"])) for operand in operands or []]
    return [reason for reason in reasons if reason]


class FilterModule:
    def filters(self):
        return {"gpu_operand_plan": gpu_operand_plan, "gpu_operand_pending": gpu_operand_pending}
