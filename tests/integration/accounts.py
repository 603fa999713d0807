"""The shipped rbac/ roles on a twin, and playbook runs with an account's token (issue 24).

playbooks/rbac.yml applies the roles and binds each playbook's ServiceAccount in the ``gpufleet`` namespace (as the
administrator); ``kubectl create token`` takes a token of one; a run then carries only that token, host and CA in its
environment, as an AWX bearer token credential injects them.
"""

from __future__ import annotations

from typing import Any

from gpufleet_twin.process import TwinProcess

from .conftest import PlaybookRun, kubectl, run_playbook

ACCOUNTS = "gpufleet"
NAMESPACES = {
    "ledger": "nvidia-gpu-operator",
    "gpu_operator": "nvidia-gpu-operator",
    "network_operator": "nvidia-network-operator",
    "sriov_operator": "openshift-sriov-network-operator",
    "matrix": "",
}


def apply_shipped_roles(twin: TwinProcess, playbooks: list[str] | None = None) -> None:
    variables: dict[str, Any] = {"rbac_namespaces": NAMESPACES}
    if playbooks:
        variables["rbac_playbooks"] = playbooks
    run = run_playbook("playbooks/rbac.yml", twin=twin, extra_vars=variables)
    assert run.returncode == 0, run.output[-4000:]


def token_of(twin: TwinProcess, account: str) -> str:
    # The twin's clock runs 600 times faster: a token of the default hour would expire within seconds.
    return kubectl(twin, "create", "token", account, "-n", ACCOUNTS, "--duration", "8760h").strip()


def account_env(twin: TwinProcess, token: str) -> dict[str, str]:
    """What an AWX bearer token credential injects: host, token and CA, no kubeconfig."""
    return {
        "K8S_AUTH_HOST": twin.api_url,
        "K8S_AUTH_API_KEY": token,
        "K8S_AUTH_SSL_CA_CERT": twin.companion["ca_file"],
    }


def upgrade_account_env(twin: TwinProcess) -> dict[str, str]:
    """The shipped roles applied, and the environment of a run as the upgrade account (gpufleet-upgrade)."""
    apply_shipped_roles(twin)
    return account_env(twin, token_of(twin, "gpufleet-upgrade"))


def run_as(twin: TwinProcess, token: str, playbook: str, **kwargs: Any) -> PlaybookRun:
    """ansible-playbook with only the account's credentials in the environment (not the twin's kubeconfig)."""
    return run_playbook(playbook, twin=None, environment=account_env(twin, token), **kwargs)


def refused(twin: TwinProcess) -> dict[str, int]:
    """Requests the twin refused with 403 since its report was last reset, by verb and resource."""
    return twin.report()["requests"].get("forbidden_by_verb_resource", {})
