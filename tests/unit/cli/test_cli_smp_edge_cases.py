"""Strategic-merge mutations whose outcome surprises, pinned to what Kyverno 1.19.1 produces for the same policy
and resource (checked with ``kubectl-kyverno apply``):

- dnsPolicy and dnsConfig replaced together: ``nameservers``/``searches``/``options`` carry no merge key, so the
  patch's lists replace the resource's (an ``options`` entry the patch does not name is gone);
- hostPath volumes removed by a ``(name)`` anchor with ``$patch: delete``: volumes merge on ``name`` so only the
  matching ones go, but volumeMounts merge on ``mountPath``, which the directive lacks, so every mount of the
  container goes;
- rules apply in order, each on the previous rule's output: a later rule sees a volume an earlier one added, a
  JSON patch renames it, and a strategic-merge delete after that finds it by the new name."""

from __future__ import annotations

import os
from pathlib import Path

from stockade.kyvernotest import runner
from stockade.kyvernotest.runner import TestRunner as CaseRunner
from stockade.kyvernotest.schema import load_test_files

DNS_POLICY = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: edge}
spec:
  rules:
  - name: mutate
    match:
      any:
      - resources: {kinds: [Pod]}
    mutate:
      patchStrategicMerge:
        spec:
          dnsPolicy: None
          dnsConfig:
            nameservers: [1.1.1.1]
            searches: [svc.cluster.local]
            options:
            - {name: ndots, value: "2"}
"""
DNS_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec:
  dnsPolicy: ClusterFirst
  dnsConfig:
    nameservers: [8.8.8.8]
    options:
    - {name: ndots, value: "5"}
    - {name: timeout, value: "1"}
  containers: [{name: c, image: nginx}]
"""
DNS_PATCHED = """\
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec:
  dnsPolicy: None
  dnsConfig:
    nameservers: [1.1.1.1]
    options:
    - {name: ndots, value: "2"}
    searches: [svc.cluster.local]
  containers: [{name: c, image: nginx}]
"""
HOSTPATH_POLICY = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: edge}
spec:
  rules:
  - name: mutate
    match:
      any:
      - resources: {kinds: [Pod]}
    mutate:
      patchStrategicMerge:
        spec:
          containers:
          - (name): "*"
            volumeMounts:
            - (name): "host-*"
              $patch: delete
          volumes:
          - (name): "host-*"
            $patch: delete
"""
HOSTPATH_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec:
  containers:
  - name: c
    image: nginx
    volumeMounts:
    - {name: host-logs, mountPath: /logs}
    - {name: data, mountPath: /data}
  - name: d
    image: busybox
    volumeMounts:
    - {name: host-etc, mountPath: /etc/x}
  volumes:
  - {name: host-logs, hostPath: {path: /var/log}}
  - {name: data, emptyDir: {}}
  - {name: host-etc, hostPath: {path: /etc}}
"""
HOSTPATH_PATCHED = """\
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec:
  containers:
  - {name: c, image: nginx, volumeMounts: []}
  - {name: d, image: busybox, volumeMounts: []}
  volumes:
  - {name: data, emptyDir: {}}
"""
ORDER_POLICY = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: edge}
spec:
  rules:
  - name: add-tmp
    match:
      any:
      - resources: {kinds: [Pod]}
    mutate:
      patchStrategicMerge:
        spec:
          volumes:
          - {name: tmp, emptyDir: {}}
          containers:
          - (name): "*"
            volumeMounts:
            - {name: tmp, mountPath: /tmp}
  - name: label-if-tmp
    match:
      any:
      - resources: {kinds: [Pod]}
    mutate:
      patchStrategicMerge:
        metadata:
          labels:
            +(has-tmp): "{{ length(request.object.spec.volumes[?name=='tmp']) }}"
  - name: rename
    match:
      any:
      - resources: {kinds: [Pod]}
    mutate:
      patchesJson6902: |-
        - {op: replace, path: /spec/volumes/0/name, value: scratch}
        - {op: replace, path: /spec/containers/0/volumeMounts/0/name, value: scratch}
  - name: drop-scratch
    match:
      any:
      - resources: {kinds: [Pod]}
    mutate:
      patchStrategicMerge:
        spec:
          volumes:
          - (name): scratch
            $patch: delete
"""
ORDER_POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec:\n  containers: [{name: c, image: nginx}]\n"
ORDER_PATCHED = """\
apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: default
  labels: {has-tmp: 1}
spec:
  containers:
  - name: c
    image: nginx
    volumeMounts: [{name: scratch, mountPath: /tmp}]
  volumes: []
"""


def _run(tmp_path: Path, policy: str, pod: str, patched: str, rule: str = "mutate") -> runner.TestRun:
    (tmp_path / "policy.yaml").write_text(policy)
    (tmp_path / "pod.yaml").write_text(pod)
    (tmp_path / "patched.yaml").write_text(patched)
    (tmp_path / "kyverno-test.yaml").write_text(
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\nresources: [pod.yaml]\n"
        f"results:\n- {{policy: edge, rule: {rule}, kind: Pod, resources: [p], result: pass, patchedResources: patched.yaml}}\n"
    )
    (case,) = load_test_files(os.path.join(str(tmp_path), "kyverno-test.yaml"))
    return CaseRunner(case).execute()


def _verdicts(run: runner.TestRun) -> list[tuple[bool, str]]:
    return [(row.ok, row.reason) for row in run.rows]


def test_dns_policy_and_config_replaced_together(tmp_path: Path) -> None:
    assert _verdicts(_run(tmp_path, DNS_POLICY, DNS_POD, DNS_PATCHED)) == [(True, "Ok")]
    # the resource's timeout option does not survive: lists without a merge key are replaced
    kept_timeout = DNS_PATCHED.replace('- {name: ndots, value: "2"}', '- {name: ndots, value: "2"}\n    - {name: timeout, value: "1"}')
    assert _verdicts(_run(tmp_path, DNS_POLICY, DNS_POD, kept_timeout)) == [(False, "Resource diff")]


def test_host_path_volumes_and_their_mounts_removed_by_anchor(tmp_path: Path) -> None:
    assert _verdicts(_run(tmp_path, HOSTPATH_POLICY, HOSTPATH_POD, HOSTPATH_PATCHED)) == [(True, "Ok")]
    kept_data_mount = HOSTPATH_PATCHED.replace("{name: c, image: nginx, volumeMounts: []}", "{name: c, image: nginx, volumeMounts: [{name: data, mountPath: /data}]}")
    assert _verdicts(_run(tmp_path, HOSTPATH_POLICY, HOSTPATH_POD, kept_data_mount)) == [(False, "Resource diff")]


def test_rules_patch_in_order_on_each_others_output(tmp_path: Path) -> None:
    for rule in ("add-tmp", "label-if-tmp", "rename", "drop-scratch"):
        assert _verdicts(_run(tmp_path, ORDER_POLICY, ORDER_POD, ORDER_PATCHED, rule)) == [(True, "Ok")], rule
    unrenamed = ORDER_PATCHED.replace("name: scratch", "name: tmp")
    assert _verdicts(_run(tmp_path, ORDER_POLICY, ORDER_POD, unrenamed, "rename")) == [(False, "Resource diff")]
