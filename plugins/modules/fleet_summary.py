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
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
attributes:
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

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._fleet import (
    build_summary,
    render_html,
    render_markdown,
    summary_file_names,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import k8s_auth_argument_spec
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_write import write_text_atomically
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module
from ansible_collections.gpufleet.upgrade.plugins.module_utils._report_html import HAS_JINJA2
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, utc_now


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        run={"type": "str", "required": True},
        results={"type": "list", "elements": "dict", "default": []},
        summary_files={"type": "list", "elements": "path", "default": []},
        summaries={"type": "list", "elements": "dict", "default": []},
        dest={"type": "path"},
        actor={"type": "str", "default": ""},
    )
    return spec


def read_summary_file(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as err:
        raise InvalidInputError(f"Cannot read the fleet summary {path}: {err}") from err


def read_text(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def summarise(module):
    params = module.params
    summaries = [read_summary_file(path) for path in params["summary_files"]] + list(params["summaries"])
    summary = build_summary(
        run=params["run"],
        results=params["results"],
        summaries=summaries,
        actor=params["actor"],
        generated_at=iso(utc_now()),
    )
    result = {"changed": False, "summary": summary, "failed_clusters": summary["failed_clusters"], "files": {}}
    if not params["dest"]:
        return result
    texts = {
        "json": json.dumps(summary, indent=2, sort_keys=True) + "\n",
        "markdown": render_markdown(summary),
    }
    if HAS_JINJA2:
        texts["html"] = render_html(summary)
    for kind, name in summary_file_names(params["run"]).items():
        if kind not in texts:
            continue
        path = os.path.join(params["dest"], name)
        result["files"][kind] = path
        # The time it was generated always differs: compare without it.
        if _without_time(read_text(path), kind) == _without_time(texts[kind], kind):
            continue
        result["changed"] = True
        if not module.check_mode:
            try:
                write_text_atomically(path, texts[kind])
            except OSError as err:
                raise InvalidInputError(f"Cannot write the fleet summary to {path}: {err}") from err
    return result


def _without_time(text, kind):
    if text is None:
        return None
    if kind == "json":
        try:
            data = json.loads(text)
        except ValueError:
            return text
        if isinstance(data, dict):
            data.pop("generated_at", None)
        return data
    return "\n".join(line for line in text.splitlines() if not line.startswith("Generated "))


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: summarise(module), failure="Failed to summarise the fleet")


if __name__ == "__main__":
    main()
