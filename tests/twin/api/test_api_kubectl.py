"""kubectl against the twin, unchanged and without --validate=false."""

from __future__ import annotations

import json
import subprocess
import textwrap


def test_get_nodes_prints_the_columns_users_expect(twin, kit):
    name = kit.unique("gpu-worker")
    kit.node(name, labels={"node-role.kubernetes.io/worker": ""})
    out = twin.kubectl("get", "nodes", name).stdout.splitlines()
    assert out[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert out[1].split()[:3] == [name, "Ready", "worker"]
    assert out[1].split()[-1] == "v1.32.4"
    wide = twin.kubectl("get", "nodes", name, "-o", "wide").stdout.splitlines()
    assert "INTERNAL-IP" in wide[0] and "10.0.0.10" in wide[1]


def test_get_pods_with_label_and_field_selectors(twin, kit, namespace):
    node_a, node_b = kit.unique("node-a"), kit.unique("node-b")
    kit.node(node_a)
    kit.node(node_b)
    kit.running_pod(namespace, "web-1", node=node_a, labels={"app": "web"})
    kit.running_pod(namespace, "web-2", node=node_b, labels={"app": "web"})
    kit.running_pod(namespace, "db-1", node=node_a, labels={"app": "db"})
    by_label = twin.kubectl("get", "pods", "-n", namespace, "-l", "app=web", "-o", "name").stdout.split()
    assert by_label == ["pod/web-1", "pod/web-2"]
    by_field = twin.kubectl(
        "get", "pods", "-A", "--field-selector", f"spec.nodeName={node_a}", "-o", "name"
    ).stdout.split()
    assert by_field == ["pod/db-1", "pod/web-1"]
    table = twin.kubectl("get", "pods", "-n", namespace, "-l", "app in (db)").stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert table[1].split()[:4] == ["db-1", "1/1", "Running", "0"]
    wide = twin.kubectl("get", "pods", "-n", namespace, "db-1", "-o", "wide").stdout
    assert node_a in wide and "10.128.0.5" in wide
    bad = twin.kubectl("get", "pods", "-n", namespace, "--field-selector", "spec.bogus=x", check=False)
    assert bad.returncode != 0 and "field label not supported" in bad.stderr


def test_label_annotate_cordon_uncordon(twin, kit):
    name = kit.unique("gpu-worker")
    kit.node(name)
    twin.kubectl("label", "node", name, "nvidia.com/gpu-driver-upgrade-state=upgrade-required")
    twin.kubectl("annotate", "node", name, "gpufleet.io/note=canary")
    twin.kubectl("cordon", name)
    node = json.loads(twin.kubectl("get", "node", name, "-o", "json").stdout)
    assert node["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-required"
    assert node["metadata"]["annotations"]["gpufleet.io/note"] == "canary"
    assert node["spec"]["unschedulable"] is True
    assert "Ready,SchedulingDisabled" in twin.kubectl("get", "node", name).stdout
    twin.kubectl("uncordon", name)
    twin.kubectl("label", "node", name, "nvidia.com/gpu-driver-upgrade-state-")
    node = json.loads(twin.kubectl("get", "node", name, "-o", "json").stdout)
    assert not node["spec"].get("unschedulable")
    assert "nvidia.com/gpu-driver-upgrade-state" not in node["metadata"]["labels"]


def test_patch_json_merge_and_strategic(twin, kit, namespace):
    kit.node(node := kit.unique("node"))
    kit.running_pod(namespace, "app", node=node, labels={"app": "x"})
    twin.kubectl(
        "patch",
        "pod",
        "app",
        "-n",
        namespace,
        "--type",
        "json",
        "-p",
        '[{"op":"add","path":"/metadata/labels/tier","value":"front"}]',
    )
    twin.kubectl(
        "patch", "pod", "app", "-n", namespace, "--type", "merge", "-p", '{"metadata":{"labels":{"app":null}}}'
    )
    twin.kubectl(
        "patch",
        "pod",
        "app",
        "-n",
        namespace,
        "--type",
        "strategic",
        "-p",
        '{"spec":{"containers":[{"name":"main","image":"registry.local/app:2.0"}]}}',
    )
    pod = json.loads(twin.kubectl("get", "pod", "app", "-n", namespace, "-o", "json").stdout)
    assert pod["metadata"]["labels"] == {"tier": "front"}
    # Strategic merge matched the container by name: one container, new image, rest kept.
    assert [(c["name"], c["image"]) for c in pod["spec"]["containers"]] == [("main", "registry.local/app:2.0")]
    assert pod["spec"]["containers"][0]["terminationMessagePolicy"] == "File"
    failed = twin.kubectl(
        "patch",
        "pod",
        "app",
        "-n",
        namespace,
        "--type",
        "json",
        "-p",
        '[{"op":"test","path":"/spec/nodeName","value":"other"}]',
        check=False,
    )
    assert failed.returncode != 0


def test_apply_twice_computes_a_patch(twin, kit, namespace, tmp_path):
    manifest = tmp_path / "objects.yaml"
    node = kit.unique("node")
    kit.node(node)

    def write(value: str, extra_label: str) -> None:
        manifest.write_text(
            textwrap.dedent(f"""\
                apiVersion: v1
                kind: ConfigMap
                metadata:
                  name: matrix
                  namespace: {namespace}
                  labels: {{app: gpufleet, {extra_label}}}
                data:
                  driver: "{value}"
                ---
                apiVersion: v1
                kind: Pod
                metadata:
                  name: pinned
                  namespace: {namespace}
                  labels: {{app: gpufleet}}
                spec:
                  nodeName: {node}
                  containers:
                  - name: main
                    image: registry.local/app:1.0
                    env:
                    - {{name: DRIVER, value: "{value}"}}
                    ports:
                    - {{containerPort: 8080}}
                    resources:
                      limits: {{cpu: 1, memory: 1Gi}}
            """)
        )

    write("550.90.07", "stage: canary")
    first = twin.kubectl("apply", "-f", str(manifest))
    assert "configmap/matrix created" in first.stdout and "pod/pinned created" in first.stdout
    write("570.124.06", "stage: bake")
    second = twin.kubectl("apply", "-f", str(manifest), "-v=6")
    assert "configmap/matrix configured" in second.stdout and "pod/pinned configured" in second.stdout
    assert "warning" not in second.stderr.lower()
    config_map = json.loads(twin.kubectl("get", "cm", "matrix", "-n", namespace, "-o", "json").stdout)
    assert config_map["data"] == {"driver": "570.124.06"}
    assert config_map["metadata"]["labels"] == {"app": "gpufleet", "stage": "bake"}
    pod = json.loads(twin.kubectl("get", "pod", "pinned", "-n", namespace, "-o", "json").stdout)
    assert pod["spec"]["containers"][0]["env"] == [{"name": "DRIVER", "value": "570.124.06"}]
    # The quantity written as a number comes back as a string, as a real server normalizes it.
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    third = twin.kubectl("apply", "-f", str(manifest))
    assert "configmap/matrix unchanged" in third.stdout


def test_a_merge_patch_that_replaces_containers_gets_their_defaults_back(twin, namespace):
    """A real server defaults on every write, so a template patched in never differs by defaults alone."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "agent", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "agent", "image": "registry.local/agent:1.0"}]},
            },
        },
    }
    twin.kubectl("create", "-f", "-", stdin=json.dumps(deployment))
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "registry.local/agent:2.0"}]}}}}
    twin.kubectl("patch", "deployment", "agent", "-n", namespace, "--type", "merge", "-p", json.dumps(patch))
    stored = json.loads(twin.kubectl("get", "deployment", "agent", "-n", namespace, "-o", "json").stdout)
    (container,) = stored["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.local/agent:2.0"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["resources"] == {}
    # What only Pods get (SetDefaults_Pod, ServiceAccount admission) stays off the template.
    template_spec = stored["spec"]["template"]["spec"]
    assert "serviceAccountName" not in template_spec and "enableServiceLinks" not in template_spec


def test_apply_rejects_unknown_fields_of_built_ins_with_strict_validation(twin, namespace, tmp_path):
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: typo, namespace: {namespace}}}\ndatta: {{a: b}}\n"
    )
    result = twin.kubectl("apply", "-f", str(manifest), check=False)
    assert result.returncode != 0
    assert 'unknown field "datta"' in result.stderr
    ignored = twin.kubectl("apply", "--validate=false", "-f", str(manifest))
    assert "created" in ignored.stdout
    stored = json.loads(twin.kubectl("get", "cm", "typo", "-n", namespace, "-o", "json").stdout)
    assert "datta" not in stored


def test_server_side_apply_creates_then_merges(twin, namespace, tmp_path):
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ssa, namespace: {namespace}}}\ndata: {{a: '1'}}\n"
    )
    assert "serverside-applied" in twin.kubectl("apply", "--server-side", "-f", str(manifest)).stdout
    manifest.write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ssa, namespace: {namespace}}}\ndata: {{b: '2'}}\n"
    )
    twin.kubectl("apply", "--server-side", "-f", str(manifest))
    data = json.loads(twin.kubectl("get", "cm", "ssa", "-n", namespace, "-o", "json").stdout)["data"]
    # Minimal server-side apply: fields are merged; removing a field an earlier apply set is not modelled.
    assert data == {"a": "1", "b": "2"}


def test_describe_node_lists_its_pods(twin, kit, namespace):
    node = kit.unique("gpu-worker")
    kit.node(node, labels={"node-role.kubernetes.io/worker": ""})
    kit.running_pod(namespace, "on-node", node=node)
    out = twin.kubectl("describe", "node", node).stdout
    assert f"Name:               {node}" in out
    assert "Roles:              worker" in out
    assert "Non-terminated Pods:          (1 in total)" in out
    assert "on-node" in out


def test_get_watch_streams_changes(twin, kit, namespace):
    kit.running_pod(namespace, "watched", node=kit.node(kit.unique("node"))["metadata"]["name"])
    watcher = subprocess.Popen(
        ["kubectl", "--kubeconfig", str(twin.kubeconfig), "get", "pods", "-n", namespace, "-w", "--request-timeout=5s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=twin.env,
    )
    try:
        assert watcher.stdout is not None
        lines = [watcher.stdout.readline().split(), watcher.stdout.readline().split()]  # header, current state
        twin.kubectl("label", "pod", "watched", "-n", namespace, "changed=yes")
        twin.kubectl("delete", "pod", "watched", "-n", namespace, "--wait=false")
        out, _ = watcher.communicate(timeout=15)
    finally:
        watcher.kill()
    lines += [line.split() for line in out.splitlines()]
    assert lines[0][:3] == ["NAME", "READY", "STATUS"]
    assert lines.count(lines[0]) == 1  # the header is printed once
    assert lines[1][:3] == ["watched", "1/1", "Running"]
    assert any(line[:3] == ["watched", "1/1", "Terminating"] for line in lines[2:])


def test_scale_and_delete(twin, namespace, tmp_path):
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(
        textwrap.dedent(f"""\
            apiVersion: apps/v1
            kind: Deployment
            metadata: {{name: operator, namespace: {namespace}}}
            spec:
              replicas: 1
              selector: {{matchLabels: {{app: operator}}}}
              template:
                metadata: {{labels: {{app: operator}}}}
                spec:
                  containers: [{{name: op, image: registry.local/operator:v25.3.0}}]
        """)
    )
    twin.kubectl("apply", "-f", str(manifest))
    assert "scaled" in twin.kubectl("scale", "deployment", "operator", "-n", namespace, "--replicas=0").stdout
    deployment = json.loads(twin.kubectl("get", "deploy", "operator", "-n", namespace, "-o", "json").stdout)
    assert deployment["spec"]["replicas"] == 0
    out = twin.kubectl("get", "deploy", "-n", namespace).stdout.splitlines()
    assert out[0].split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert out[1].split()[:2] == ["operator", "0/0"]
    assert "deleted" in twin.kubectl("delete", "deployment", "operator", "-n", namespace).stdout
    gone = twin.kubectl("get", "deployment", "operator", "-n", namespace, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_kubectl_commands_that_send_protobuf(twin, kit):
    # kubectl's typed clients (create <generator>, auth) send protobuf bodies.
    namespace = kit.unique("proto")
    twin.kubectl("create", "namespace", namespace)
    twin.kubectl("create", "configmap", "cm", "-n", namespace, "--from-literal=driver=550.90.07", "--from-literal=b=2")
    twin.kubectl("create", "secret", "generic", "s", "-n", namespace, "--from-literal=password=Gpuf1eet")
    twin.kubectl("create", "serviceaccount", "sa", "-n", namespace)
    twin.kubectl("create", "pdb", "budget", "-n", namespace, "--selector=app=train", "--max-unavailable=1")
    config_map = json.loads(twin.kubectl("get", "cm", "cm", "-n", namespace, "-o", "json").stdout)
    assert config_map["data"] == {"driver": "550.90.07", "b": "2"}
    secret = json.loads(twin.kubectl("get", "secret", "s", "-n", namespace, "-o", "json").stdout)
    assert secret["type"] == "Opaque" and secret["data"] == {"password": "R3B1ZjFlZXQ="}
    budget = json.loads(twin.kubectl("get", "pdb", "budget", "-n", namespace, "-o", "json").stdout)
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "train"}}}
    assert twin.kubectl("auth", "can-i", "delete", "nodes").stdout.strip() == "yes"
    assert "system:masters" in twin.kubectl("auth", "whoami").stdout
    refused = twin.kubectl("create", "deployment", "d", "--image=i:1", "-n", namespace, check=False)
    assert refused.returncode != 0 and "send JSON" in refused.stderr
    twin.kubectl("delete", "namespace", namespace)
