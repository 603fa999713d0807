"""olm_subscription_upgrade against the twin's OLM (openshift profile): the four passes and a channel OLM cannot
resolve, through real ansible-playbook runs of playbooks/module_once.yml (issue 22).

The twin's GPU Operator Subscription is on channel v24.9 with Manual approval and 24.9.0 installed. (1) Check mode
with --diff says it would move the Subscription to v25.3 and 25.3.0 and writes nothing; (2) the real run switches
the channel, approves OLM's InstallPlan and returns once the 25.3.0 CSV Succeeded; (3) check mode and (4) a real run
again change nothing and write nothing. Then a channel the catalog does not have: OLM's ResolutionFailed message is
named in the failure, and the module sets the channel back.
"""

from __future__ import annotations

import pytest

from .test_clusterpolicy_upgrade import get_json
from .test_four_passes import four_passes, once

pytestmark = pytest.mark.slow

NAMESPACE = "nvidia-gpu-operator"
PACKAGE = "gpu-operator-certified"
OLD_CSV, NEW_CSV = f"{PACKAGE}.v24.9.0", f"{PACKAGE}.v25.3.0"
MODULE = "olm_subscription_upgrade"


def test_four_passes_then_a_channel_olm_cannot_resolve(fresh_twin, tmp_path):
    twin = fresh_twin
    options = {"name": PACKAGE, "namespace": NAMESPACE, "channel": "v25.3", "csv": NEW_CSV,
               "wait_timeout": 120, "wait_sleep": 0.5}  # fmt: skip

    def observe() -> dict:
        sub = get_json(twin, "subscription", "-n", NAMESPACE, PACKAGE)
        plans = get_json(twin, "installplans", "-n", NAMESPACE)["items"]
        return {
            "channel": sub["spec"]["channel"],
            "installed": sub["status"].get("installedCSV"),
            "approved": sorted(p["metadata"]["name"] for p in plans if p["spec"].get("approved")),
        }

    start = observe()
    assert (start["channel"], start["installed"]) == ("v24.9", OLD_CSV)
    passes = four_passes(
        once(twin, tmp_path, {MODULE: options}),
        twin=twin,
        observe=observe,
        changed={MODULE: (True, True, False, False)},
    )
    check, real, _check_again, again = (p.results[MODULE] for p in passes)
    assert check["diff"] == {
        "before": {"channel": "v24.9", "installedCSV": OLD_CSV},
        "after": {"channel": "v25.3", "installedCSV": NEW_CSV},
    }
    assert (check["installed_before"], check["installed"], check["csv_phase"]) == (OLD_CSV, NEW_CSV, "")
    # The real run: the channel switched, OLM's plan approved, the CSV installed; what it wrote is those two patches.
    assert (real["installed_before"], real["installed"], real["channel"]) == (OLD_CSV, NEW_CSV, "v25.3")
    assert real["csv_phase"] == "Succeeded" and real["install_plan"]
    assert passes[1].writes == {
        "patch subscriptions.operators.coreos.com": 1,
        "patch installplans.operators.coreos.com": 1,
    }, passes[1].writes
    assert passes[1].after["approved"] == [real["install_plan"]]
    assert get_json(twin, "csv", "-n", NAMESPACE, NEW_CSV)["status"]["phase"] == "Succeeded"
    assert (again["installed_before"], again["installed"], again["csv_phase"]) == (NEW_CSV, NEW_CSV, "Succeeded")

    # A channel the catalog does not carry: OLM's own message, the Subscription and the channel are named, nothing
    # is approved and the channel is set back.
    newer = f"{PACKAGE}.v25.10.1"
    failed_run, results = once(twin, tmp_path, {MODULE: {**options, "channel": "v99.9", "csv": newer}})(False, False)
    failed = results[MODULE]
    assert failed_run.returncode != 0 and failed.get("failed") is True, failed_run.output[-3000:]
    assert f"OLM did not plan {newer} from channel v99.9 of Subscription {NAMESPACE}/{PACKAGE}" in failed["msg"]
    assert "ResolutionFailed: no operators found in channel v99.9" in failed["msg"], failed["msg"]
    assert "OLM installs the channel's head; pin the matrix to it" in failed["msg"]
    assert "channel was set back to v25.3" in failed["msg"]
    assert observe() == passes[3].after  # channel v25.3 again, 25.3.0 installed, no other plan approved
