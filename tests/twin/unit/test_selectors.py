"""Label and field selectors, against the grammar and messages of the real API server."""

from __future__ import annotations

import pytest

from gpufleet_twin.machinery import errors
from gpufleet_twin.machinery.selectors import (
    label_selector_from_dict,
    label_selector_from_map,
    parse_field_selector,
    parse_label_selector,
    selectable_fields,
)

GPU_NODE = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
    "node-role.kubernetes.io/worker": "",
    "nvidia.com/cuda.driver-version.major": "550",
}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("nvidia.com/gpu.present=true", True),
        ("nvidia.com/gpu.present==true", True),
        ("nvidia.com/gpu.present=false", False),
        ("nvidia.com/gpu.present!=false", True),
        ("missing!=x", True),  # != also selects objects without the label
        ("nvidia.com/gpu-driver-upgrade-state in (upgrade-done,upgrade-failed)", True),
        ("nvidia.com/gpu-driver-upgrade-state in (upgrade-required)", False),
        ("nvidia.com/gpu-driver-upgrade-state notin (upgrade-done)", False),
        ("missing notin (x)", True),  # notin also selects objects without the label
        ("node-role.kubernetes.io/worker", True),  # exists, even with an empty value
        ("missing", False),
        ("!missing", True),
        ("!nvidia.com/gpu.present", False),
        ("node-role.kubernetes.io/worker=", True),  # "key=" means the empty value
        ("node-role.kubernetes.io/worker in ()", True),  # "()" is the empty value too
        ("nvidia.com/cuda.driver-version.major>535", True),
        ("nvidia.com/cuda.driver-version.major<535", False),
        ("nvidia.com/gpu.present>1", False),  # not an integer: never matches
        ("nvidia.com/gpu.present=true,!missing,node-role.kubernetes.io/worker", True),
        ("nvidia.com/gpu.present=true,missing", False),
        ("  nvidia.com/gpu.present = true ,\tmissing notin ( a , b )  ", True),
        ("", True),
    ],
)
def test_label_selector_operators(selector: str, expected: bool) -> None:
    assert parse_label_selector(selector).matches(GPU_NODE) is expected


def test_keywords_are_plain_words_where_values_stand() -> None:
    selector = parse_label_selector("in in (in,notin)")
    assert selector.matches({"in": "notin"})
    assert not selector.matches({"in": "x"})


def test_no_labels_at_all() -> None:
    assert parse_label_selector("!a").matches(None)
    assert not parse_label_selector("a").matches(None)
    assert parse_label_selector("").matches(None)


def test_canonical_string_sorts_keys_and_values() -> None:
    selector = parse_label_selector("z notin (b,a), a=1, !m, k")
    assert str(selector) == "a=1,k,!m,z notin (a,b)"


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("a in b", "unable to parse requirement: found 'b' expected: '('"),
        ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("a notin", "unable to parse requirement: found '' expected: '('"),
        ("a=(b)", "unable to parse requirement: found '(', expected: identifier"),
        ("a,", "found '', expected: identifier after ','"),
        ("a=b,,c", "found ',', expected: identifier after ','"),
        (",a", "found ',', expected: !, identifier, or 'end of string'"),
        ("=b", "found '=', expected: !, identifier, or 'end of string'"),
        ("a=b=c", "found '=', expected: ',' or 'end of string'"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
        ("a@b=c", 'unable to parse requirement: <nil>: Invalid value: "a@b": name part must consist of'),
        ("a/b/c", 'unable to parse requirement: <nil>: Invalid value: "a/b/c": a valid label key must consist'),
        ("Example.com/a=b", 'Invalid value: "Example.com/a": prefix part a lowercase RFC 1123 subdomain'),
        ("a=b!c", "found '!', expected: ',' or 'end of string'"),
        ("a=" + "x" * 64, "unable to parse requirement: values[0][a]: Invalid value: "),
        ("a=-x", "a valid label must be an empty string or consist of alphanumeric characters"),
    ],
)
def test_malformed_label_selectors_are_bad_requests(selector: str, message: str) -> None:
    with pytest.raises(errors.ApiError) as failure:
        parse_label_selector(selector)
    assert failure.value.code == 400
    assert failure.value.reason == "BadRequest"
    assert message in failure.value.message


def test_overlong_value_names_the_limit() -> None:
    with pytest.raises(errors.ApiError) as failure:
        parse_label_selector("a=" + "x" * 64)
    assert "must be no more than 63 bytes" in failure.value.message


def test_label_selector_object_with_every_operator() -> None:
    selector = label_selector_from_dict(
        {
            "matchLabels": {"app": "nvidia-driver-daemonset"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["gpu", "dpu"]},
                {"key": "canary", "operator": "NotIn", "values": ["false"]},
                {"key": "nvidia.com/gpu.present", "operator": "Exists"},
                {"key": "nvidia.com/gpu-driver-upgrade.skip", "operator": "DoesNotExist"},
            ],
        }
    )
    labels = {"app": "nvidia-driver-daemonset", "tier": "gpu", "nvidia.com/gpu.present": "true"}
    assert selector.matches(labels)
    assert not selector.matches({**labels, "nvidia.com/gpu-driver-upgrade.skip": "true"})
    assert not selector.matches({**labels, "canary": "false"})
    assert not selector.matches({**labels, "tier": "cpu"})
    assert not selector.matches({key: value for key, value in labels.items() if key != "app"})


def test_nil_selector_selects_nothing_and_empty_selects_everything() -> None:
    # metav1.LabelSelectorAsSelector: nil -> labels.Nothing(), {} -> labels.Everything().
    assert not label_selector_from_dict(None).matches({"a": "b"})
    assert label_selector_from_dict({}).matches({"a": "b"})
    assert label_selector_from_dict({"matchLabels": {}, "matchExpressions": []}).matches(None)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ({"key": "a", "operator": "Gt", "values": ["1"]}, '"Gt" is not a valid label selector operator'),
        ({"key": "a", "operator": "In", "values": []}, "values: Invalid value: null: for 'in', 'notin' operators"),
        ({"key": "a", "operator": "Exists", "values": ["x"]}, "values set must be empty for exists and does not exist"),
        ({"key": "a b", "operator": "Exists"}, 'key: Invalid value: "a b": name part must consist of'),
    ],
)
def test_bad_label_selector_objects(expression: dict, message: str) -> None:
    with pytest.raises(errors.ApiError) as failure:
        label_selector_from_dict({"matchExpressions": [expression]})
    assert failure.value.code == 400
    assert message in failure.value.message


def test_plain_map_selector() -> None:
    node_selector = label_selector_from_map({"nvidia.com/gpu.present": "true", "canary": "yes"})
    assert node_selector.matches({**GPU_NODE, "canary": "yes"})
    assert not node_selector.matches(GPU_NODE)
    assert label_selector_from_map({}).matches({"any": "thing"})
    assert label_selector_from_map(None).matches(None)


# -- field selectors ----------------------------------------------------------------------------

SCHEDULED_POD = {
    "metadata": {"name": "nvidia-driver-daemonset-abcde", "namespace": "gpu-operator"},
    "spec": {
        "nodeName": "gpu-node-1",
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "serviceAccountName": "nvidia-driver",
        "hostNetwork": True,
    },
    "status": {"phase": "Running", "podIP": "10.128.0.7", "podIPs": [{"ip": "10.128.0.7"}, {"ip": "fd00::7"}]},
}
PENDING_POD = {
    "metadata": {"name": "pending", "namespace": "default"},
    "spec": {"restartPolicy": "Never"},
    "status": {"phase": "Pending", "nominatedNodeName": "gpu-node-2"},
}


@pytest.mark.parametrize(
    ("selector", "scheduled", "pending"),
    [
        ("spec.nodeName=gpu-node-1", True, False),
        ("spec.nodeName=", False, True),  # unscheduled pods have no nodeName: compares as ""
        ("spec.nodeName!=", True, False),
        ("spec.host=gpu-node-1", True, False),  # the old v1 spelling, renamed by the server
        ("metadata.namespace=gpu-operator", True, False),
        ("metadata.name==pending", False, True),
        ("status.phase!=Running", False, True),
        ("status.phase=Running,spec.nodeName=gpu-node-1", True, False),
        ("spec.restartPolicy=Never", False, True),
        ("spec.schedulerName=default-scheduler", True, False),
        ("spec.serviceAccountName=nvidia-driver", True, False),
        ("spec.hostNetwork=true", True, False),
        ("spec.hostNetwork=false", False, True),  # absent is false
        ("status.podIP=10.128.0.7", True, False),
        ("status.nominatedNodeName=gpu-node-2", False, True),
        ("", True, True),
    ],
)
def test_pod_field_selectors(selector: str, scheduled: bool, pending: bool) -> None:
    predicate = parse_field_selector(selector, "Pod")
    assert predicate(SCHEDULED_POD) is scheduled
    assert predicate(PENDING_POD) is pending


def test_pod_ip_is_the_first_of_pod_ips() -> None:
    pod = {"metadata": {"name": "p"}, "status": {"podIPs": [{"ip": "fd00::9"}, {"ip": "10.0.0.9"}]}}
    assert parse_field_selector("status.podIP=fd00::9", "Pod")(pod)
    assert not parse_field_selector("status.podIP=10.0.0.9", "Pod")(pod)


def test_node_field_selectors() -> None:
    cordoned = {"metadata": {"name": "gpu-node-1"}, "spec": {"unschedulable": True}}
    schedulable = {"metadata": {"name": "gpu-node-2"}, "spec": {}}
    unschedulable = parse_field_selector("spec.unschedulable=true", "Node")
    assert unschedulable(cordoned)
    assert not unschedulable(schedulable)
    assert parse_field_selector("spec.unschedulable=false", "Node")(schedulable)
    assert parse_field_selector("metadata.name=gpu-node-2", "Node")(schedulable)


def test_event_field_selectors() -> None:
    event = {
        "metadata": {"name": "gpu-node-1.17f", "namespace": "default"},
        "involvedObject": {
            "kind": "Node",
            "name": "gpu-node-1",
            "uid": "u-1",
            "apiVersion": "v1",
            "resourceVersion": "42",
            "fieldPath": "",
        },
        "reason": "NodeNotSchedulable",
        "type": "Normal",
        "reportingComponent": "node-controller",
        "source": {},
    }
    selector = "involvedObject.kind=Node,involvedObject.name=gpu-node-1,reason=NodeNotSchedulable,type=Normal"
    assert parse_field_selector(selector, "Event")(event)
    assert parse_field_selector("involvedObject.uid=u-1,involvedObject.resourceVersion=42", "Event")(event)
    assert parse_field_selector("involvedObject.namespace=,involvedObject.fieldPath=", "Event")(event)
    assert parse_field_selector("involvedObject.apiVersion=v1,reportingComponent=node-controller", "Event")(event)
    # With no source.component the server selects "source" on the reporting component.
    assert parse_field_selector("source=node-controller", "Event")(event)
    assert parse_field_selector("source=kubelet", "Event")({**event, "source": {"component": "kubelet"}})


def test_other_kinds_with_their_own_fields() -> None:
    assert parse_field_selector("status.phase=Active", "Namespace")({"status": {"phase": "Active"}})
    assert parse_field_selector("type=kubernetes.io/tls", "Secret")({"type": "kubernetes.io/tls"})
    assert parse_field_selector("status.successful=1", "Job")({"status": {"succeeded": 1}})
    assert parse_field_selector("status.successful=0", "Job")({"status": {}})
    assert parse_field_selector("spec.type=ClusterIP", "Service")({"spec": {"type": "ClusterIP"}})


@pytest.mark.parametrize(
    ("kind", "selector", "message"),
    [
        ("Pod", "spec.containers=x", "field label not supported: spec.containers"),
        ("Node", "metadata.namespace=x", "field label not supported: metadata.namespace"),
        ("Node", "spec.taints=x", "field label not supported: spec.taints"),
        ("Namespace", "spec.finalizers=x", "field label not supported: spec.finalizers"),
        ("Event", "message=x", "field label not supported: message"),
        (
            "DaemonSet",
            "spec.updateStrategy.type=OnDelete",
            '"spec.updateStrategy.type" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
        (
            "ClusterPolicy",
            "spec.driver.version=550",
            '"spec.driver.version" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
        ("Pod", "spec.nodeName", "invalid selector: 'spec.nodeName'; can't understand 'spec.nodeName'"),
        ("Pod", "metadata.name=a=b", "invalid field selector: unescaped character in value: ="),
        ("Pod", "metadata.name=a\\q", "invalid field selector: invalid escape sequence: \\q"),
    ],
)
def test_unsupported_or_malformed_field_selectors(kind: str, selector: str, message: str) -> None:
    with pytest.raises(errors.ApiError) as failure:
        parse_field_selector(selector, kind)
    assert failure.value.code == 400
    assert failure.value.message == message or message in failure.value.message


def test_field_selector_value_escapes() -> None:
    predicate = parse_field_selector("metadata.name=a\\,b\\=c\\\\d", "ConfigMap")
    assert predicate({"metadata": {"name": "a,b=c\\d"}})
    assert not predicate({"metadata": {"name": "a"}})


def test_custom_resources_select_on_metadata_only() -> None:
    policy = {"metadata": {"name": "cluster-policy"}}
    assert parse_field_selector("metadata.name=cluster-policy", "ClusterPolicy")(policy)
    # The default conversion accepts metadata.namespace even for cluster-scoped kinds: it is "".
    assert parse_field_selector("metadata.namespace=", "ClusterPolicy")(policy)
    assert selectable_fields("ClusterPolicy") == ("metadata.name", "metadata.namespace")
    assert "spec.host" in selectable_fields("Pod")
