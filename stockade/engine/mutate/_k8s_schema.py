"""Merge strategies of the built-in Kubernetes types, as kustomize's kyaml sees them.

Kyverno applies patchStrategicMerge through kyaml, which decides per list whether it is
associative (merged element by element on merge keys) or replaced wholesale, using the
OpenAPI schema of Kubernetes 1.21.2 that kyaml embeds.  This table keeps only the types that
lead to an associative list; every other field behaves as if it had no schema (lists are
replaced, maps merged).  It was derived mechanically from that schema's
`x-kubernetes-patch-strategy`, `x-kubernetes-patch-merge-key` and
`x-kubernetes-list-map-keys` extensions.

Field entries: ("obj", type) | ("map", value type) | ("list", element type or None, merge keys).
A list entry always means patch strategy "merge"; empty merge keys mean a list of scalars
merged by value (e.g. finalizers).
"""

from typing import Any

# fmt: off
TYPES: dict[str, dict[str, tuple[Any, ...]]] = {
    'admissionregistration.v1.MutatingWebhookConfiguration': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'webhooks': ('list', None, ('name',)),
    },
    'admissionregistration.v1.ValidatingWebhookConfiguration': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'webhooks': ('list', None, ('name',)),
    },
    'admissionregistration.v1beta1.MutatingWebhookConfiguration': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'webhooks': ('list', None, ('name',)),
    },
    'admissionregistration.v1beta1.ValidatingWebhookConfiguration': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'webhooks': ('list', None, ('name',)),
    },
    'apps.v1.ControllerRevision': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'apps.v1.DaemonSet': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'apps.v1.DaemonSetSpec'),
        'status': ('obj', 'apps.v1.DaemonSetStatus'),
    },
    'apps.v1.DaemonSetSpec': {
        'template': ('obj', 'core.v1.PodTemplateSpec'),
    },
    'apps.v1.DaemonSetStatus': {
        'conditions': ('list', None, ('type',)),
    },
    'apps.v1.Deployment': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'apps.v1.DeploymentSpec'),
        'status': ('obj', 'apps.v1.DeploymentStatus'),
    },
    'apps.v1.DeploymentSpec': {
        'template': ('obj', 'core.v1.PodTemplateSpec'),
    },
    'apps.v1.DeploymentStatus': {
        'conditions': ('list', None, ('type',)),
    },
    'apps.v1.ReplicaSet': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'apps.v1.ReplicaSetSpec'),
        'status': ('obj', 'apps.v1.ReplicaSetStatus'),
    },
    'apps.v1.ReplicaSetSpec': {
        'template': ('obj', 'core.v1.PodTemplateSpec'),
    },
    'apps.v1.ReplicaSetStatus': {
        'conditions': ('list', None, ('type',)),
    },
    'apps.v1.StatefulSet': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'apps.v1.StatefulSetSpec'),
        'status': ('obj', 'apps.v1.StatefulSetStatus'),
    },
    'apps.v1.StatefulSetSpec': {
        'template': ('obj', 'core.v1.PodTemplateSpec'),
    },
    'apps.v1.StatefulSetStatus': {
        'conditions': ('list', None, ('type',)),
    },
    'authentication.v1.TokenRequest': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'authentication.v1.TokenReview': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'authentication.v1beta1.TokenReview': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'authorization.v1.LocalSubjectAccessReview': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'authorization.v1.SelfSubjectAccessReview': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'authorization.v1.SelfSubjectRulesReview': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'authorization.v1.SubjectAccessReview': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'authorization.v1beta1.LocalSubjectAccessReview': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'authorization.v1beta1.SelfSubjectAccessReview': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'authorization.v1beta1.SelfSubjectRulesReview': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'authorization.v1beta1.SubjectAccessReview': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'autoscaling.v1.HorizontalPodAutoscaler': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'autoscaling.v1.Scale': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'autoscaling.v2beta1.HorizontalPodAutoscaler': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'autoscaling.v2beta2.HorizontalPodAutoscaler': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'batch.v1.CronJob': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'batch.v1.CronJobSpec'),
    },
    'batch.v1.CronJobSpec': {
        'jobTemplate': ('obj', 'batch.v1.JobTemplateSpec'),
    },
    'batch.v1.Job': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'batch.v1.JobSpec'),
        'status': ('obj', 'batch.v1.JobStatus'),
    },
    'batch.v1.JobSpec': {
        'template': ('obj', 'core.v1.PodTemplateSpec'),
    },
    'batch.v1.JobStatus': {
        'conditions': ('list', None, ('type',)),
    },
    'batch.v1.JobTemplateSpec': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'batch.v1.JobSpec'),
    },
    'batch.v1beta1.CronJob': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'batch.v1beta1.CronJobSpec'),
    },
    'batch.v1beta1.CronJobSpec': {
        'jobTemplate': ('obj', 'batch.v1beta1.JobTemplateSpec'),
    },
    'batch.v1beta1.JobTemplateSpec': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'batch.v1.JobSpec'),
    },
    'certificates.v1.CertificateSigningRequest': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'certificates.v1beta1.CertificateSigningRequest': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'coordination.v1.Lease': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'coordination.v1beta1.Lease': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'core.v1.Binding': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'core.v1.ComponentStatus': {
        'conditions': ('list', None, ('type',)),
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'core.v1.ConfigMap': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'core.v1.Container': {
        'env': ('list', None, ('name',)),
        'ports': ('list', None, ('containerPort', 'protocol')),
        'volumeDevices': ('list', None, ('devicePath',)),
        'volumeMounts': ('list', None, ('mountPath',)),
    },
    'core.v1.Endpoints': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'core.v1.EphemeralContainer': {
        'env': ('list', None, ('name',)),
        'volumeDevices': ('list', None, ('devicePath',)),
        'volumeMounts': ('list', None, ('mountPath',)),
    },
    'core.v1.EphemeralVolumeSource': {
        'volumeClaimTemplate': ('obj', 'core.v1.PersistentVolumeClaimTemplate'),
    },
    'core.v1.Event': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'core.v1.LimitRange': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'core.v1.Namespace': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'status': ('obj', 'core.v1.NamespaceStatus'),
    },
    'core.v1.NamespaceStatus': {
        'conditions': ('list', None, ('type',)),
    },
    'core.v1.Node': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'core.v1.NodeSpec'),
        'status': ('obj', 'core.v1.NodeStatus'),
    },
    'core.v1.NodeSpec': {
        'podCIDRs': ('list', None, ()),
    },
    'core.v1.NodeStatus': {
        'addresses': ('list', None, ('type',)),
        'conditions': ('list', None, ('type',)),
    },
    'core.v1.PersistentVolume': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'core.v1.PersistentVolumeClaim': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'status': ('obj', 'core.v1.PersistentVolumeClaimStatus'),
    },
    'core.v1.PersistentVolumeClaimStatus': {
        'conditions': ('list', None, ('type',)),
    },
    'core.v1.PersistentVolumeClaimTemplate': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'core.v1.Pod': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'core.v1.PodSpec'),
        'status': ('obj', 'core.v1.PodStatus'),
    },
    'core.v1.PodSpec': {
        'containers': ('list', 'core.v1.Container', ('name',)),
        'ephemeralContainers': ('list', 'core.v1.EphemeralContainer', ('name',)),
        'hostAliases': ('list', None, ('ip',)),
        'imagePullSecrets': ('list', None, ('name',)),
        'initContainers': ('list', 'core.v1.Container', ('name',)),
        'topologySpreadConstraints': ('list', None, ('topologyKey', 'whenUnsatisfiable')),
        'volumes': ('list', 'core.v1.Volume', ('name',)),
    },
    'core.v1.PodStatus': {
        'conditions': ('list', None, ('type',)),
        'podIPs': ('list', None, ('ip',)),
    },
    'core.v1.PodTemplate': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'template': ('obj', 'core.v1.PodTemplateSpec'),
    },
    'core.v1.PodTemplateSpec': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'core.v1.PodSpec'),
    },
    'core.v1.ReplicationController': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'core.v1.ReplicationControllerSpec'),
        'status': ('obj', 'core.v1.ReplicationControllerStatus'),
    },
    'core.v1.ReplicationControllerSpec': {
        'template': ('obj', 'core.v1.PodTemplateSpec'),
    },
    'core.v1.ReplicationControllerStatus': {
        'conditions': ('list', None, ('type',)),
    },
    'core.v1.ResourceQuota': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'core.v1.Secret': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'core.v1.Service': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'core.v1.ServiceSpec'),
        'status': ('obj', 'core.v1.ServiceStatus'),
    },
    'core.v1.ServiceAccount': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'secrets': ('list', None, ('name',)),
    },
    'core.v1.ServiceSpec': {
        'ports': ('list', None, ('port', 'protocol')),
    },
    'core.v1.ServiceStatus': {
        'conditions': ('list', None, ('type',)),
    },
    'core.v1.Volume': {
        'ephemeral': ('obj', 'core.v1.EphemeralVolumeSource'),
    },
    'discovery.v1.EndpointSlice': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'discovery.v1beta1.EndpointSlice': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'events.v1.Event': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'events.v1beta1.Event': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'extensions.v1beta1.Ingress': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'flowcontrol.v1beta1.FlowSchema': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'flowcontrol.v1beta1.PriorityLevelConfiguration': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'networking.v1.Ingress': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'networking.v1.IngressClass': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'networking.v1.NetworkPolicy': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'networking.v1beta1.Ingress': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'networking.v1beta1.IngressClass': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'node.v1.RuntimeClass': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'node.v1beta1.RuntimeClass': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'policy.v1.PodDisruptionBudget': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'status': ('obj', 'policy.v1.PodDisruptionBudgetStatus'),
    },
    'policy.v1.PodDisruptionBudgetStatus': {
        'conditions': ('list', None, ('type',)),
    },
    'policy.v1beta1.Eviction': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'policy.v1beta1.PodDisruptionBudget': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'status': ('obj', 'policy.v1beta1.PodDisruptionBudgetStatus'),
    },
    'policy.v1beta1.PodDisruptionBudgetStatus': {
        'conditions': ('list', None, ('type',)),
    },
    'policy.v1beta1.PodSecurityPolicy': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'rbac.v1.ClusterRole': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'rbac.v1.ClusterRoleBinding': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'rbac.v1.Role': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'rbac.v1.RoleBinding': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'rbac.v1beta1.ClusterRole': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'rbac.v1beta1.ClusterRoleBinding': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'rbac.v1beta1.Role': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'rbac.v1beta1.RoleBinding': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'scheduling.v1.PriorityClass': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'scheduling.v1beta1.PriorityClass': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'storage.v1.CSIDriver': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'storage.v1.CSINode': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'storage.v1.CSINodeSpec'),
    },
    'storage.v1.CSINodeSpec': {
        'drivers': ('list', None, ('name',)),
    },
    'storage.v1.StorageClass': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'storage.v1.VolumeAttachment': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'storage.v1beta1.CSIDriver': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'storage.v1beta1.CSINode': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'spec': ('obj', 'storage.v1beta1.CSINodeSpec'),
    },
    'storage.v1beta1.CSINodeSpec': {
        'drivers': ('list', None, ('name',)),
    },
    'storage.v1beta1.CSIStorageCapacity': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'storage.v1beta1.StorageClass': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'storage.v1beta1.VolumeAttachment': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'apiextensions.v1.CustomResourceDefinition': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'apiextensions.v1beta1.CustomResourceDefinition': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
    },
    'meta.v1.ObjectMeta': {
        'finalizers': ('list', None, ()),
        'ownerReferences': ('list', None, ('uid',)),
    },
    'apiregistration.v1.APIService': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'status': ('obj', 'apiregistration.v1.APIServiceStatus'),
    },
    'apiregistration.v1.APIServiceStatus': {
        'conditions': ('list', None, ('type',)),
    },
    'apiregistration.v1beta1.APIService': {
        'metadata': ('obj', 'meta.v1.ObjectMeta'),
        'status': ('obj', 'apiregistration.v1beta1.APIServiceStatus'),
    },
    'apiregistration.v1beta1.APIServiceStatus': {
        'conditions': ('list', None, ('type',)),
    },
}

ROOTS: dict[str, str] = {
    'admissionregistration.k8s.io/v1 MutatingWebhookConfiguration': 'admissionregistration.v1.MutatingWebhookConfiguration',
    'admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration': 'admissionregistration.v1.ValidatingWebhookConfiguration',
    'admissionregistration.k8s.io/v1beta1 MutatingWebhookConfiguration': 'admissionregistration.v1beta1.MutatingWebhookConfiguration',
    'admissionregistration.k8s.io/v1beta1 ValidatingWebhookConfiguration': 'admissionregistration.v1beta1.ValidatingWebhookConfiguration',
    'apiextensions.k8s.io/v1 CustomResourceDefinition': 'apiextensions.v1.CustomResourceDefinition',
    'apiextensions.k8s.io/v1beta1 CustomResourceDefinition': 'apiextensions.v1beta1.CustomResourceDefinition',
    'apiregistration.k8s.io/v1 APIService': 'apiregistration.v1.APIService',
    'apiregistration.k8s.io/v1beta1 APIService': 'apiregistration.v1beta1.APIService',
    'apps/v1 ControllerRevision': 'apps.v1.ControllerRevision',
    'apps/v1 DaemonSet': 'apps.v1.DaemonSet',
    'apps/v1 Deployment': 'apps.v1.Deployment',
    'apps/v1 ReplicaSet': 'apps.v1.ReplicaSet',
    'apps/v1 StatefulSet': 'apps.v1.StatefulSet',
    'authentication.k8s.io/v1 TokenRequest': 'authentication.v1.TokenRequest',
    'authentication.k8s.io/v1 TokenReview': 'authentication.v1.TokenReview',
    'authentication.k8s.io/v1beta1 TokenReview': 'authentication.v1beta1.TokenReview',
    'authorization.k8s.io/v1 LocalSubjectAccessReview': 'authorization.v1.LocalSubjectAccessReview',
    'authorization.k8s.io/v1 SelfSubjectAccessReview': 'authorization.v1.SelfSubjectAccessReview',
    'authorization.k8s.io/v1 SelfSubjectRulesReview': 'authorization.v1.SelfSubjectRulesReview',
    'authorization.k8s.io/v1 SubjectAccessReview': 'authorization.v1.SubjectAccessReview',
    'authorization.k8s.io/v1beta1 LocalSubjectAccessReview': 'authorization.v1beta1.LocalSubjectAccessReview',
    'authorization.k8s.io/v1beta1 SelfSubjectAccessReview': 'authorization.v1beta1.SelfSubjectAccessReview',
    'authorization.k8s.io/v1beta1 SelfSubjectRulesReview': 'authorization.v1beta1.SelfSubjectRulesReview',
    'authorization.k8s.io/v1beta1 SubjectAccessReview': 'authorization.v1beta1.SubjectAccessReview',
    'autoscaling/v1 HorizontalPodAutoscaler': 'autoscaling.v1.HorizontalPodAutoscaler',
    'autoscaling/v1 Scale': 'autoscaling.v1.Scale',
    'autoscaling/v2beta1 HorizontalPodAutoscaler': 'autoscaling.v2beta1.HorizontalPodAutoscaler',
    'autoscaling/v2beta2 HorizontalPodAutoscaler': 'autoscaling.v2beta2.HorizontalPodAutoscaler',
    'batch/v1 CronJob': 'batch.v1.CronJob',
    'batch/v1 Job': 'batch.v1.Job',
    'batch/v1beta1 CronJob': 'batch.v1beta1.CronJob',
    'certificates.k8s.io/v1 CertificateSigningRequest': 'certificates.v1.CertificateSigningRequest',
    'certificates.k8s.io/v1beta1 CertificateSigningRequest': 'certificates.v1beta1.CertificateSigningRequest',
    'coordination.k8s.io/v1 Lease': 'coordination.v1.Lease',
    'coordination.k8s.io/v1beta1 Lease': 'coordination.v1beta1.Lease',
    'discovery.k8s.io/v1 EndpointSlice': 'discovery.v1.EndpointSlice',
    'discovery.k8s.io/v1beta1 EndpointSlice': 'discovery.v1beta1.EndpointSlice',
    'events.k8s.io/v1 Event': 'events.v1.Event',
    'events.k8s.io/v1beta1 Event': 'events.v1beta1.Event',
    'extensions/v1beta1 Ingress': 'extensions.v1beta1.Ingress',
    'flowcontrol.apiserver.k8s.io/v1beta1 FlowSchema': 'flowcontrol.v1beta1.FlowSchema',
    'flowcontrol.apiserver.k8s.io/v1beta1 PriorityLevelConfiguration': 'flowcontrol.v1beta1.PriorityLevelConfiguration',
    'networking.k8s.io/v1 Ingress': 'networking.v1.Ingress',
    'networking.k8s.io/v1 IngressClass': 'networking.v1.IngressClass',
    'networking.k8s.io/v1 NetworkPolicy': 'networking.v1.NetworkPolicy',
    'networking.k8s.io/v1beta1 Ingress': 'networking.v1beta1.Ingress',
    'networking.k8s.io/v1beta1 IngressClass': 'networking.v1beta1.IngressClass',
    'node.k8s.io/v1 RuntimeClass': 'node.v1.RuntimeClass',
    'node.k8s.io/v1beta1 RuntimeClass': 'node.v1beta1.RuntimeClass',
    'policy/v1 PodDisruptionBudget': 'policy.v1.PodDisruptionBudget',
    'policy/v1beta1 Eviction': 'policy.v1beta1.Eviction',
    'policy/v1beta1 PodDisruptionBudget': 'policy.v1beta1.PodDisruptionBudget',
    'policy/v1beta1 PodSecurityPolicy': 'policy.v1beta1.PodSecurityPolicy',
    'rbac.authorization.k8s.io/v1 ClusterRole': 'rbac.v1.ClusterRole',
    'rbac.authorization.k8s.io/v1 ClusterRoleBinding': 'rbac.v1.ClusterRoleBinding',
    'rbac.authorization.k8s.io/v1 Role': 'rbac.v1.Role',
    'rbac.authorization.k8s.io/v1 RoleBinding': 'rbac.v1.RoleBinding',
    'rbac.authorization.k8s.io/v1beta1 ClusterRole': 'rbac.v1beta1.ClusterRole',
    'rbac.authorization.k8s.io/v1beta1 ClusterRoleBinding': 'rbac.v1beta1.ClusterRoleBinding',
    'rbac.authorization.k8s.io/v1beta1 Role': 'rbac.v1beta1.Role',
    'rbac.authorization.k8s.io/v1beta1 RoleBinding': 'rbac.v1beta1.RoleBinding',
    'scheduling.k8s.io/v1 PriorityClass': 'scheduling.v1.PriorityClass',
    'scheduling.k8s.io/v1beta1 PriorityClass': 'scheduling.v1beta1.PriorityClass',
    'storage.k8s.io/v1 CSIDriver': 'storage.v1.CSIDriver',
    'storage.k8s.io/v1 CSINode': 'storage.v1.CSINode',
    'storage.k8s.io/v1 StorageClass': 'storage.v1.StorageClass',
    'storage.k8s.io/v1 VolumeAttachment': 'storage.v1.VolumeAttachment',
    'storage.k8s.io/v1beta1 CSIDriver': 'storage.v1beta1.CSIDriver',
    'storage.k8s.io/v1beta1 CSINode': 'storage.v1beta1.CSINode',
    'storage.k8s.io/v1beta1 CSIStorageCapacity': 'storage.v1beta1.CSIStorageCapacity',
    'storage.k8s.io/v1beta1 StorageClass': 'storage.v1beta1.StorageClass',
    'storage.k8s.io/v1beta1 VolumeAttachment': 'storage.v1beta1.VolumeAttachment',
    'v1 Binding': 'core.v1.Binding',
    'v1 ComponentStatus': 'core.v1.ComponentStatus',
    'v1 ConfigMap': 'core.v1.ConfigMap',
    'v1 Endpoints': 'core.v1.Endpoints',
    'v1 Event': 'core.v1.Event',
    'v1 LimitRange': 'core.v1.LimitRange',
    'v1 Namespace': 'core.v1.Namespace',
    'v1 Node': 'core.v1.Node',
    'v1 PersistentVolume': 'core.v1.PersistentVolume',
    'v1 PersistentVolumeClaim': 'core.v1.PersistentVolumeClaim',
    'v1 Pod': 'core.v1.Pod',
    'v1 PodTemplate': 'core.v1.PodTemplate',
    'v1 ReplicationController': 'core.v1.ReplicationController',
    'v1 ResourceQuota': 'core.v1.ResourceQuota',
    'v1 Secret': 'core.v1.Secret',
    'v1 Service': 'core.v1.Service',
    'v1 ServiceAccount': 'core.v1.ServiceAccount',
}
