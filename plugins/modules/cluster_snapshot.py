#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_snapshot
short_description: Write a read-only snapshot of a GPU cluster that the twin can load
version_added: 0.2.0
description:
  - Reads the cluster (list and get only, never a write) and writes one C(kubectl get -o json)-shaped List file per
    kind into O(directory), which C(python -m gpufleet_twin serve --from-snapshot DIR) loads. C(playbooks/rehearse.yml)
    uses it to rehearse a stage on a copy of the cluster.
  - Holds nodes, pods (with owner references), DaemonSets and their ControllerRevisions, Deployments, ReplicaSets,
    StatefulSets, Jobs, PodDisruptionBudgets, namespaces, the operators' CRs (ClusterPolicy, NVIDIADriver,
    NicClusterPolicy, SR-IOV policies, node states and config, MachineConfigPools, ClusterVersion, CSVs,
    Subscriptions), the Events of earlier upgrades (the upgrade controllers' C(GPUDriverUpgrade) and
    C(OFEDDriverUpgrade) Events and the collection's own) and the collection's ledger ConfigMap.
  - Never reads Secrets, never lists ConfigMaps (the ledger is read by name), blanks containers' inline
    C(env[].value) and drops C(kubectl.kubernetes.io/last-applied-configuration) annotations.
  - Every list is read in pages of O(page_size) (C(limit)/C(continue)); a kind with more than O(max_objects) objects
    fails the module before anything is written. Kinds the cluster does not serve (no such operator, not OpenShift)
    are reported in RV(absent).
  - With O(anonymize), node names and workload namespace names (all but C(default), C(kube-*), C(openshift*),
    C(nvidia-*) and O(keep_namespaces)) are replaced everywhere by stable aliases keyed by O(anonymize_salt).
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
attributes:
  check_mode:
    support: full
    description: Reads the cluster and reports what it would write; writes no file.
  diff_mode:
    support: none
    description: The cluster is never changed; the files written are listed in RV(files).
options:
  directory:
    description: Folder to write the snapshot into (created if missing; files of an earlier snapshot are replaced).
    type: path
    required: true
  anonymize:
    description: Replace node and workload namespace names by stable aliases.
    type: bool
    default: false
  anonymize_salt:
    description: Key of the aliases (required with O(anonymize)); the same salt gives the same aliases.
    type: str
    default: ""
  keep_namespaces:
    description: Namespaces whose names O(anonymize) keeps besides the system and operator ones.
    type: list
    elements: str
    default: []
  ledger_namespaces:
    description:
      - Namespaces to read the ledger ConfigMap from; default the GPU Operator's namespace (its ClusterPolicy's
        C(status.namespace)).
    type: list
    elements: str
    default: []
  ledger_configmap:
    description: Name of the ledger ConfigMap (roles/upgrade's C(upgrade_ledger_configmap)).
    type: str
    default: gpufleet-upgrade-ledger
  page_size:
    description: Objects per list request (C(limit)).
    type: int
    default: 500
  max_objects:
    description: Most objects of one kind the snapshot takes; a bigger kind fails the module before any file is written.
    type: int
    default: 200000
requirements:
  - kubernetes >= 24.2.0
seealso:
  - name: Rehearsing an upgrade
    description: docs/rehearse.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/rehearse.md
"""

EXAMPLES = r"""
- name: Snapshot the cluster for a rehearsal
  gpufleet.upgrade.cluster_snapshot:
    directory: /tmp/rehearsal/snapshot

- name: Snapshot it with node and namespace names replaced
  gpufleet.upgrade.cluster_snapshot:
    directory: /tmp/rehearsal/snapshot
    anonymize: true
    anonymize_salt: "{{ lookup('ansible.builtin.env', 'SNAPSHOT_SALT') }}"
"""

RETURN = r"""
directory:
  description: The snapshot folder.
  returned: always
  type: str
files:
  description: The files written (or that would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [api_v1_nodes.json, api_v1_pods.json, snapshot-info.json]
counts:
  description: Objects per file.
  returned: always
  type: dict
  sample: {api_v1_nodes.json: 200, apis_policy_v1_poddisruptionbudgets.json: 12}
absent:
  description: Kinds the cluster does not serve.
  returned: always
  type: list
  elements: str
  sample: [NicClusterPolicy]
left_out:
  description: What was removed from the objects read, by what, with counts.
  returned: always
  type: dict
  sample: {container env values: 42}
anonymized:
  description: How many node and namespace names were replaced.
  returned: always
  type: dict
  sample: {nodes: 200, namespaces: 3}
api_requests:
  description: API requests the module sent (all of them reads).
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
    k8s_auth_argument_spec,
    missing_libraries,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module
from ansible_collections.gpufleet.upgrade.plugins.module_utils._snapshot import SnapshotSettings, take_snapshot
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        directory={"type": "path", "required": True},
        anonymize={"type": "bool", "default": False},
        anonymize_salt={"type": "str", "default": "", "no_log": True},
        keep_namespaces={"type": "list", "elements": "str", "default": []},
        ledger_namespaces={"type": "list", "elements": "str", "default": []},
        ledger_configmap={"type": "str", "default": "gpufleet-upgrade-ledger"},
        page_size={"type": "int", "default": 500},
        max_objects={"type": "int", "default": 200000},
    )
    return spec


def snapshot(module):
    params = module.params
    settings = SnapshotSettings(
        directory=params["directory"],
        anonymize=params["anonymize"],
        anonymize_salt=params["anonymize_salt"],
        keep_namespaces=tuple(params["keep_namespaces"]),
        ledger_namespaces=tuple(params["ledger_namespaces"]),
        ledger_configmap=params["ledger_configmap"],
        page_size=params["page_size"],
        max_objects=params["max_objects"],
    )
    api = KubeApi.from_params(params)
    # One clock: the snapshot is dated by the API server, as every timestamp the collection writes.
    return take_snapshot(api, settings=settings, check_mode=module.check_mode, taken_at=iso(api.cluster_now()))


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(
        module,
        lambda: snapshot(module),
        failure=f"Failed to snapshot the cluster into {module.params['directory']}",
        missing=missing_libraries(),
    )


if __name__ == "__main__":
    main()
