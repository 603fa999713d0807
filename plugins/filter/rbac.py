# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The filters rbac_objects (roles/rbac) and forbidden_explained (documented in <name>.yml beside this file)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.upgrade.plugins.module_utils._permissions import (
    CLUSTER_ROLES,
    POD_CLUSTER_ROLES,
    forbidden_detail_of_message,
)

BOUND_IN = "gpufleet.io/bound-in"
# Which accounts each shipped ClusterRole is bound to (the permission table's): one account per playbook.
_ACCOUNTS_OF = {info.name: info.accounts for info in (*CLUSTER_ROLES, *POD_CLUSTER_ROLES)}


def _accounts_for(role_name):
    if role_name not in _ACCOUNTS_OF:
        raise AnsibleFilterError(f"rbac_objects: ClusterRole {role_name} is not one the collection ships")
    return _ACCOUNTS_OF[role_name]


def _meta(name, namespace=""):
    meta = {"name": name, "labels": {"app.kubernetes.io/part-of": "gpufleet.upgrade"}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def rbac_objects(cluster_roles, accounts, namespaces, create_accounts=True):
    """The ServiceAccounts, ClusterRoles and bindings to apply, in that order (reverse it to remove them).

    ``accounts`` maps the account keys (audit, rehearse, diagnose, remediate, upgrade, rbac, scc) to {name,
    namespace}; a ClusterRole is bound to those of its accounts given (one missing them all is an error), so a
    role shared by two accounts (the diagnosis' reads: diagnose and remediate) has a binding with both as
    subjects. ``namespaces`` maps the namespace keys of the RoleBindings (an empty one binds nothing).
    """
    documents = []
    for document in cluster_roles or []:
        # The shipped files hold one kind: List each.
        if isinstance(document, dict) and document.get("kind") == "List":
            documents += document.get("items") or []
        else:
            documents.append(document)
    roles = [role for role in documents if isinstance(role, dict) and role.get("kind") == "ClusterRole"]
    used = []
    bindings = []
    for role in roles:
        name = role["metadata"]["name"]
        keys = [key for key in _accounts_for(name) if key in (accounts or {})]
        if not keys:
            raise AnsibleFilterError(f"rbac_objects: no account for {' or '.join(_accounts_for(name))} ({name})")
        subjects = []
        for key in keys:
            account = accounts[key] or {}
            if not account.get("name") or not account.get("namespace"):
                raise AnsibleFilterError(f"rbac_objects: no account (name and namespace) for {key} ({name})")
            if key not in used:
                used.append(key)
            subjects.append({"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]})
        ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
        scope = ((role["metadata"].get("annotations") or {}).get(BOUND_IN)) or "cluster"
        if scope == "cluster":
            bindings.append(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": _meta(name),
                    "roleRef": ref,
                    "subjects": subjects,
                }
            )
            continue
        namespace = "default" if scope == "node_events" else str((namespaces or {}).get(scope) or "")
        if namespace:
            bindings.append(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": _meta(name, namespace),
                    "roleRef": ref,
                    "subjects": subjects,
                }
            )
    service_accounts = []
    if create_accounts:
        for key in used:
            account = accounts[key]
            service_accounts.append(
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(account["name"], account["namespace"])}
            )
    return service_accounts + roles + bindings


def forbidden_explained(message):
    """The failure message, with the missing rule and the shipped ClusterRole granting it when it is an RBAC 403
    in kube-apiserver's words that nothing explained yet (the collection's own modules already do)."""
    text = "" if message is None else str(message)
    if "missing permission:" in text:
        return text
    detail = forbidden_detail_of_message(text)
    return f"{text} ({detail})" if detail else text


class FilterModule:
    def filters(self):
        return {"rbac_objects": rbac_objects, "forbidden_explained": forbidden_explained}
