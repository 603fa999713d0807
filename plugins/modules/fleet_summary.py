#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_summary
short_description: Summarise a run over a fleet of clusters, or merge the summaries of AWX job slices
version_added: 0.1.0
description:
  - A fleet is an inventory, one host per cluster. Each host of C(playbooks/audit.yml) or C(playbooks/upgrade.yml)
    hands back one cluster result (outcome, versions, drift, the reports and ledger it wrote); this module lists them,
    says which clusters failed, and writes the summary as C(fleet-summary-<run>.json), C(fleet-summary-<run>.md) and
    C(fleet-summary-<run>.html) (one self-contained page, when Jinja2 is importable).
  - Summaries written by other jobs (the slices of a sliced AWX job template, each over part of the inventory) merge
    into one with O(summary_files) or O(summaries); a cluster found twice keeps its latest result.
  - Outcomes C(failed), C(refused), C(drift) and C(unreachable) make the fleet fail (RV(failed_clusters)).
  - The Kubernetes connection options are accepted so that one C(module_defaults) block for
    C(group/gpufleet.upgrade.k8s) serves every module of the collection; this module does not connect anywhere.
  - It runs in the controller (an action plugin), where the hosts' results are and its files are written.
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
attributes:
  action:
    support: full
    description: The work is done by the action plugin of the same name, in the controller.
  check_mode:
    support: full
    description: Builds the summary and says whether its files would change; writes nothing.
  diff_mode:
    support: none
    description: The summary's files are replaced whole; RV(summary) is what they hold.
options:
  run:
    description: What ran over the fleet (C(audit), or the upgrade stage C(canary), C(bake), C(promote), C(rollback)).
    type: str
    required: true
  results:
    description:
      - One result per cluster of this run. Keys C(cluster) (required, the inventory host name), C(outcome) (one of
        C(success), C(unchanged), C(drift), C(failed), C(refused), C(unreachable), C(skipped), C(stuck)), C(message),
        C(api_server), C(versions), C(versions_before), C(drift) (C(nodes_with_drift), C(nodes_total),
        C(components)), C(reports) (paths), C(ledger) (path) and C(finished_at).
    type: list
    elements: dict
    default: []
  summary_files:
    description: Fleet summary JSON files of the same O(run) to merge (one per job slice).
    type: list
    elements: path
    default: []
  summaries:
    description: Fleet summaries of the same O(run) given as data (for example AWX artifacts of earlier jobs).
    type: list
    elements: dict
    default: []
  dest:
    description: Directory to write the summary's files to (created if missing). Without it nothing is written.
    type: path
  actor:
    description: Who ran it (AWX's C(awx_user_name)), shown in the summary.
    type: str
    default: ""
seealso:
  - name: Fleets, AWX job slicing and instance groups
    description: docs/fleet.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/fleet.md
"""

EXAMPLES = r"""
- name: Summarise the fleet once every cluster has finished
  gpufleet.upgrade.fleet_summary:
    run: audit
    results: >-
      {{ ansible_play_hosts_all | map('extract', hostvars) | selectattr('gpufleet_cluster_result', 'defined')
         | map(attribute='gpufleet_cluster_result') | list }}
    dest: /runner/artifacts/gpufleet
  run_once: true
  delegate_to: localhost

- name: Merge the summaries of the slices of a sliced AWX job
  gpufleet.upgrade.fleet_summary:
    run: canary
    summary_files:
      - results/slice-1/fleet-summary-canary.json
      - results/slice-2/fleet-summary-canary.json
    dest: results/fleet
"""

RETURN = r"""
summary:
  description: The summary, as written to C(fleet-summary-<run>.json).
  returned: always
  type: dict
  sample:
    kind: gpufleet.upgrade/fleet-summary
    run: audit
    clusters_total: 3
    failed: true
    failed_clusters: [gpu-west]
    by_outcome: {success: [gpu-east, gpu-north], drift: [gpu-west]}
    clusters:
      - cluster: gpu-west
        outcome: drift
        drift: {nodes_with_drift: [gpu-worker-002], nodes_total: 6, components: []}
failed_clusters:
  description: Names of the clusters whose outcome fails the fleet run.
  returned: always
  type: list
  elements: str
  sample: [gpu-west]
files:
  description: The summary's files (C(json), C(markdown), C(html)); empty without O(dest).
  returned: always
  type: dict
  sample: {json: results/fleet-summary-audit.json, markdown: results/fleet-summary-audit.md,
           html: results/fleet-summary-audit.html}
"""
