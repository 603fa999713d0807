#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rehearsal
short_description: Calibrate a cluster snapshot for a rehearsal, and report what the rehearsal predicts
version_added: 0.2.0
description:
  - Works on local files only (never on a cluster); C(playbooks/rehearse.yml) calls it around the rehearsal run.
  - O(action=calibrate) takes the per-node step durations of a GPU driver rollout (drain, driver build and load,
    validation) from the snapshot's history (the ledger's timelines of earlier runs, else the upgrade controller's
    C(GPUDriverUpgrade) Events), else documented defaults, and writes the driver step (with an optional seeded
    O(jitter)) into the snapshot's Nodes as the twin's C(twin.gpufleet.io/driver-load-seconds) annotation.
  - O(action=report) reads the rehearsal run's ledger entry and the rehearsal twin's recorder report and writes the
    prediction as Markdown and HTML into O(report_dir).
author:
  - gpufleet.upgrade maintainers (@gpufleet)
attributes:
  check_mode:
    support: full
    description: Computes the same result and whether a file would change; writes no file.
  diff_mode:
    support: none
    description: Only local files are written.
options:
  action:
    description: What to do.
    type: str
    choices: [calibrate, report]
    required: true
  snapshot_dir:
    description: The snapshot folder (M(gpufleet.upgrade.cluster_snapshot)).
    type: path
    required: true
  jitter:
    description: With O(action=calibrate), vary each node's driver step by up to this fraction (seeded by O(seed)).
    type: float
    default: 0.0
  seed:
    description: Seed of the jitter.
    type: int
    default: 0
  calibration:
    description: With O(action=report), the RV(calibration) O(action=calibrate) returned.
    type: dict
    default: {}
  ledger_file:
    description: With O(action=report), the rehearsal run's ledger file (its last entry is the run).
    type: path
  recorder:
    description: With O(action=report), the rehearsal twin's recorder report (C(GET /admin/report)).
    type: dict
    default: {}
  report_dir:
    description: With O(action=report), where to write C(rehearsal-<stage>.md) and C(rehearsal-<stage>.html).
    type: path
  estimate_file:
    description:
      - With O(action=report), the window estimator's runs (C(python -m gpufleet_twin.estimate --out FILE)); adds the
        table of candidate settings, its chart (C(rehearsal-estimate.svg)) and the smallest setting that fits.
    type: path
  window_hours:
    description: With O(estimate_file), the maintenance window a setting's p90 duration must fit in.
    type: float
    default: 8.0
  max_capacity_loss:
    description: With O(estimate_file), the largest share of GPUs (0-1) a setting may take away at once.
    type: float
    default: 0.25
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
notes:
  - The Kubernetes connection options are accepted so that one C(module_defaults) block for
    C(group/gpufleet.upgrade.k8s) serves every module of the collection; this module does not use them.
"""

EXAMPLES = r"""
- name: Calibrate the snapshot from the cluster's history
  gpufleet.upgrade.rehearsal:
    action: calibrate
    snapshot_dir: /tmp/rehearsal/snapshot
  register: calibration

- name: Write the rehearsal report
  gpufleet.upgrade.rehearsal:
    action: report
    snapshot_dir: /tmp/rehearsal/snapshot
    calibration: "{{ calibration.calibration }}"
    ledger_file: /tmp/rehearsal/reports/upgrade-ledger.json
    recorder: "{{ twin_report.json }}"
    report_dir: /tmp/rehearsal
"""

RETURN = r"""
calibration:
  description: Per step (drain, driver, validation) its seconds, source (ledger, events or defaults) and samples.
  returned: always
  type: dict
  sample: {profile: openshift, source: ledger, steps: {driver: {seconds: 412.0, source: ledger, samples: 6}}}
annotated_nodes:
  description: GPU nodes whose driver step was written into the snapshot.
  returned: action=calibrate
  type: int
prediction:
  description:
    - Duration (twin clock), per-node timeline, GPU capacity curve, peak unavailable nodes, peak capacity loss,
      GPU-hours lost, pods disrupted, the PodDisruptionBudgets that blocked (named), nodes that failed or halted and
      the API requests the run sent.
  returned: action=report
  type: dict
reports:
  description: The Markdown and HTML files written.
  returned: action=report
  type: list
  elements: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import k8s_auth_argument_spec
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rehearsal import (
    apply_calibration,
    build_estimate,
    calibrate,
    estimate_svg,
    predict,
    render_html,
    render_markdown,
    write_report_files,
)


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        {
            "action": {"type": "str", "choices": ["calibrate", "report"], "required": True},
            "snapshot_dir": {"type": "path", "required": True},
            "jitter": {"type": "float", "default": 0.0},
            "seed": {"type": "int", "default": 0},
            "calibration": {"type": "dict", "default": {}},
            "ledger_file": {"type": "path"},
            "recorder": {"type": "dict", "default": {}},
            "report_dir": {"type": "path"},
            "estimate_file": {"type": "path"},
            "window_hours": {"type": "float", "default": 8.0},
            "max_capacity_loss": {"type": "float", "default": 0.25},
        }
    )
    return spec


def run(module):
    params = module.params
    directory = params["snapshot_dir"]
    if not os.path.isdir(directory):
        raise InvalidInputError(f"snapshot_dir {directory} is not a directory")
    if params["action"] == "calibrate":
        calibration = calibrate(directory)
        annotated, changed = apply_calibration(
            directory, calibration, jitter=params["jitter"], seed=params["seed"], check_mode=module.check_mode
        )
        return {"changed": changed, "calibration": calibration, "annotated_nodes": annotated}
    if not params["ledger_file"] or not params["report_dir"]:
        raise InvalidInputError("action=report needs ledger_file and report_dir")
    try:
        with open(params["ledger_file"], encoding="utf-8") as handle:
            entries = json.load(handle).get("entries") or []
    except (OSError, ValueError) as err:
        raise InvalidInputError(f"cannot read the rehearsal's ledger file {params['ledger_file']}: {err}") from err
    if not entries:
        raise InvalidInputError(f"the rehearsal's ledger file {params['ledger_file']} has no entry")
    entry = entries[-1]
    prediction = predict(
        directory=directory, entry=entry, recorder=params["recorder"], calibration=params["calibration"]
    )
    if params["estimate_file"]:
        try:
            with open(params["estimate_file"], encoding="utf-8") as handle:
                document = json.load(handle)
        except (OSError, ValueError) as err:
            raise InvalidInputError(f"cannot read the estimate {params['estimate_file']}: {err}") from err
        prediction["estimate"] = build_estimate(
            document, window_hours=params["window_hours"], max_capacity_loss=params["max_capacity_loss"]
        )
    title = f"Rehearsal of stage {entry.get('stage')} on a copy of the cluster"
    paths = [os.path.join(params["report_dir"], f"rehearsal-{entry.get('stage')}.{ext}") for ext in ("md", "html")]
    if prediction.get("estimate"):
        paths.append(os.path.join(params["report_dir"], "rehearsal-estimate.svg"))
    texts = {paths[0]: render_markdown(prediction, title=title), paths[1]: render_html(prediction, title=title)}
    if prediction.get("estimate"):
        texts[paths[-1]] = estimate_svg(prediction["estimate"]["rows"])
    changed = write_report_files(texts, check_mode=module.check_mode)
    return {
        "changed": changed,
        "prediction": prediction,
        "reports": paths,
        "calibration": params["calibration"],
    }


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: run(module), failure=f"Failed to {module.params['action']} the rehearsal")


if __name__ == "__main__":
    main()
