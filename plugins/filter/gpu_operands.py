# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Filters for the GPU Operator's operands (DCGM exporter, device plugin, container toolkit) the matrix names."""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_operand_plan
short_description: What a GPU Operator target changes in the ClusterPolicy's operands
version_added: 0.1.0
description:
  - Given a ClusterPolicy and the matrix versions of a stage, the merge patch that pins the operands the
    stage names (C(dcgm) to C(spec.dcgmExporter), C(device_plugin) to C(spec.devicePlugin) and a C(spec.gfd)
    on the same image, C(container_toolkit) to C(spec.toolkit)), keeping each tag's OS suffix, and the list of
    operands to verify.
  - An operand the ClusterPolicy does not pin (no repository and version) is left to the operator release
    (the operator's own defaults) and only verified.
  - Companion filter C(gpu_operand_pending) takes that list and the operator namespace's DaemonSets and
    returns why each operand does not run its version everywhere yet (an empty list once they all do).
options:
  _input:
    description: The ClusterPolicy, as the API returns it.
    type: dict
    required: true
  target:
    description: The stage's versions (keys C(dcgm), C(device_plugin), C(container_toolkit)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Work out the operand patch
  ansible.builtin.set_fact:
    operands: "{{ policy | gpufleet.upgrade.gpu_operand_plan({'device_plugin': 'v0.17.1'}) }}"
"""

RETURN = r"""
_value:
  description: C(patch) (a merge patch, empty when nothing changes) and C(operands) (what to verify).
  type: dict
"""

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_operands import (  # noqa: E402
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
