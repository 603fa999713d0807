#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: olm_subscription_upgrade
short_description: Move an operator forward through its OLM Subscription (channel, InstallPlan approval, CSV)
version_added: 0.1.0
description:
  - Reads the Subscription. When its installed CSV (C(status.installedCSV)) is already the target, changes nothing
    (and waits for that CSV to end its install, reads only).
  - Otherwise switches the Subscription's C(spec.channel) to O(channel) when it differs, waits for OLM to plan
    (C(status.currentCSV) and C(status.installPlanRef), or a C(ResolutionFailed) condition), approves the
    InstallPlan when OLM plans the target (C(installPlanApproval=Manual); a plan approved already is left alone), and
    waits for the target ClusterServiceVersion to reach C(Succeeded) or C(Failed).
  - OLM installs the head of the channel, never a CSV in between, and never downgrades. When OLM plans another CSV
    than the target, or cannot resolve the channel, the task fails naming the Subscription, the channel, what OLM
    plans and OLM's C(ResolutionFailed) message, followed by O(advice). A CSV that ends C(Failed) fails the task with
    its message. An approved InstallPlan is not undone; a re-run continues from what the cluster shows.
  - Taking an operator back to an older release is not done by this module (OLM does not downgrade through a
    Subscription); roles/gpu_operator's operator_olm_reinstall.yml uninstalls and installs the older CSV.
  - Without a target (neither O(csv) nor O(version)) the module approves what OLM plans at its first read after the
    channel switch, if that differs from the installed CSV.
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gpufleet.upgrade.wait.timeout
  - gpufleet.upgrade.wait.sleep
attributes:
  check_mode:
    support: full
    description: Reads only; C(changed) says whether the run would switch the channel or approve a plan.
  diff_mode:
    support: full
    description: Before and after of the Subscription's channel and installed CSV.
options:
  name:
    description: Name of the Subscription.
    type: str
    required: true
  namespace:
    description: Namespace of the Subscription (the operator's).
    type: str
    required: true
  channel:
    description:
      - The channel to subscribe on (for the GPU Operator one per release line, C(v25.3)). Empty keeps the
        Subscription's channel.
    type: str
    default: ""
  csv:
    description: The target CSV's name, for example C(gpu-operator-certified.v25.3.0). Exclusive with O(version).
    type: str
  version:
    description:
      - The target version instead of a CSV name. A CSV matches when its version (the text after its last C(.v)) is
        O(version) or continues it after a dot, dash or plus (C(4.17) matches C(sriov-network-operator.v4.17.0-202411)).
    type: str
  package:
    description: With O(version), only CSVs of this package (named C(<package>.v<version>)) match.
    type: str
  advice:
    description: What to do when OLM plans another CSV than the target, appended to that failure's message.
    type: str
    default: "OLM installs the channel's head; pin the matrix to it or use a catalog that ends at the target"
  wait_timeout:
    description: How many seconds OLM's plan and the CSV's install may take together.
    default: 1800
  wait_sleep:
    description: Seconds between two reads of the Subscription or CSV.
    default: 5
requirements:
  - kubernetes >= 24.2.0
seealso:
  - name: GPU Operator upgrades in this collection
    description: docs/gpu_operator.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/gpu_operator.md
"""

EXAMPLES = r"""
- name: Move the GPU Operator to 25.3.0 on its release line's channel
  gpufleet.upgrade.olm_subscription_upgrade:
    name: gpu-operator-certified
    namespace: nvidia-gpu-operator
    channel: v25.3
    csv: gpu-operator-certified.v25.3.0
    wait_timeout: 900
  register: operator

- name: Move the SR-IOV Network Operator to the build of OpenShift 4.17
  gpufleet.upgrade.olm_subscription_upgrade:
    name: sriov-network-operator-subscription
    namespace: openshift-sriov-network-operator
    version: "4.17"
    advice: "Red Hat publishes the build of an OpenShift minor once the cluster runs it: update OpenShift first"
"""

RETURN = r"""
changed:
  description: Whether the run switched the channel or approved an InstallPlan (in check mode, whether it would).
  returned: always
  type: bool
installed_before:
  description: The Subscription's installed CSV when the module started.
  returned: always
  type: str
  sample: gpu-operator-certified.v24.9.0
installed:
  description: The installed CSV at the end (in check mode, the one the run would install).
  returned: always
  type: str
  sample: gpu-operator-certified.v25.3.0
target:
  description: The target as given (the CSV's name, or the package and version).
  returned: always
  type: str
channel:
  description: The Subscription's channel at the end (in check mode, the one the run would set).
  returned: always
  type: str
  sample: v25.3
channel_before:
  description: The Subscription's channel when the module started.
  returned: always
  type: str
current_csv:
  description: What OLM plans or installed last (C(status.currentCSV)).
  returned: always
  type: str
install_plan:
  description: The name of the InstallPlan the Subscription references ("" when none).
  returned: always
  type: str
  sample: install-4b2c1
csv_phase:
  description: The target CSV's phase when the wait ended (C(Succeeded)); "" in check mode.
  returned: always
  type: str
  sample: Succeeded
diff:
  description: Before and after of the Subscription's C(channel) and C(installedCSV).
  returned: in check mode or diff mode
  type: dict
  sample:
    before: {channel: v24.9, installedCSV: gpu-operator-certified.v24.9.0}
    after: {channel: v25.3, installedCSV: gpu-operator-certified.v25.3.0}
elapsed:
  description: Seconds the module ran.
  returned: always
  type: float
api_requests:
  description: API requests the module sent.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
    k8s_auth_argument_spec,
    missing_libraries,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module, wait_argument_spec
from ansible_collections.gpufleet.upgrade.plugins.module_utils._olm import DEFAULT_PLAN_ADVICE
from ansible_collections.gpufleet.upgrade.plugins.module_utils._olm_upgrade import (
    SubscriptionUpgradeOptions,
    run_subscription_upgrade,
)


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        name={"type": "str", "required": True},
        namespace={"type": "str", "required": True},
        channel={"type": "str", "default": ""},
        csv={"type": "str"},
        version={"type": "str"},
        package={"type": "str"},
        advice={"type": "str", "default": DEFAULT_PLAN_ADVICE},
    )
    spec.update(wait_argument_spec(options=("wait_timeout", "wait_sleep"), wait_timeout=1800, wait_sleep=5))
    return spec


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        mutually_exclusive=[("csv", "version")],
        supports_check_mode=True,
    )
    params = module.params
    options = SubscriptionUpgradeOptions(
        name=params["name"],
        namespace=params["namespace"],
        channel=params["channel"] or "",
        csv=params["csv"] or "",
        version=params["version"] or "",
        package=params["package"] or "",
        advice=params["advice"] or "",
        wait_timeout=float(params["wait_timeout"]),
        wait_sleep=float(params["wait_sleep"]),
        check_mode=module.check_mode,
        diff=module._diff,
    )
    run_module(
        module,
        lambda: run_subscription_upgrade(KubeApi.from_params(module.params), options),
        failure="Failed to upgrade the operator through its OLM Subscription",
        missing=missing_libraries(),
    )


if __name__ == "__main__":
    main()
