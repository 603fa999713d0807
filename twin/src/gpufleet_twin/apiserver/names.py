"""Object names: what kube-apiserver accepts as the name of an object of each kind.

Object names are DNS-1123 subdomains, namespace names DNS-1123 labels; a few kinds (Events, RBAC objects) need only
valid path segments. The messages are apimachinery's, so a refused name reads as on a real cluster.
"""

from __future__ import annotations

import json
import re

from ..machinery import errors
from ..machinery.registry import ResourceType
from ..machinery.store import Obj

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# apimachinery pkg/util/validation/validation.go: dns1123LabelErrMsg / dns1123SubdomainErrorMsg as RegexError
# renders them with their examples and pattern.
DNS1123_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
# Kinds whose names need only be valid path segments, not DNS subdomains (RBAC's ValidateRBACName too:
# "system:discovery").
_NAMES_AS_PATH_SEGMENTS = frozenset(
    {
        ("", "events"),
        ("events.k8s.io", "events"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "clusterroles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("rbac.authorization.k8s.io", "clusterrolebindings"),
    }
)


def validate_object_name(operation: str, rtype: ResourceType, obj: Obj, old: Obj | None) -> None:
    """Object names are DNS subdomains; namespace names are DNS labels."""
    if operation != "CREATE" or rtype.key in _NAMES_AS_PATH_SEGMENTS:
        return
    name = obj["metadata"].get("name", "")
    if rtype.key == ("", "namespaces"):
        valid, limit = bool(DNS1123_LABEL.match(name)), 63
        rule = DNS1123_LABEL_MESSAGE
    else:
        valid, limit = bool(DNS1123_SUBDOMAIN.match(name)), 253
        rule = DNS1123_SUBDOMAIN_MESSAGE
    # apimachinery pkg/util/validation: IsDNS1123Label/IsDNS1123Subdomain give a MaxLenError and a
    # RegexError; ValidateObjectMeta turns each into field.Invalid on metadata.name.
    problems = [f"must be no more than {limit} characters"] if len(name) > limit else []
    if not valid:
        problems.append(rule)
    if problems:
        raise errors.invalid(
            rtype.kind,
            name,
            [
                {
                    "reason": "FieldValueInvalid",
                    "field": "metadata.name",
                    "message": f"Invalid value: {json.dumps(name)}: {p}",
                }
                for p in problems
            ],
            rtype.group,
        )


def dns_label_causes(value: str, field_path: str) -> list[dict[str, str]]:
    if DNS1123_LABEL.match(value or "") and len(value) <= 63:
        return []
    return [
        {
            "reason": "FieldValueInvalid",
            "field": field_path,
            "message": f"Invalid value: {json.dumps(value)}: {DNS1123_LABEL_MESSAGE}",
        }
    ]
