{{- define "stockade.name" -}}stockade{{- end -}}

{{/* Labels on every object we create; app.kubernetes.io/part-of lets uninstall checks find leftovers. */}}
{{- define "stockade.labels" -}}
{{ include "stockade.selectorLabels" . }}
app.kubernetes.io/part-of: stockade
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "stockade.selectorLabels" -}}
app.kubernetes.io/name: stockade
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* By digest when image.digest is set (what a signed release is verified by), otherwise by tag. */}}
{{- define "stockade.image" -}}
{{- if .Values.image.digest -}}{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
{{- end -}}

{{/* Cluster-scoped objects are named after the namespace so releases in two namespaces do not collide. */}}
{{- define "stockade.clusterName" -}}stockade-{{ .Release.Namespace }}{{- end -}}

{{- define "stockade.tlsSecretName" -}}{{ .Values.tls.secretName | default "stockade-tls" }}{{- end -}}

{{/* The PSS "restricted" container settings, shared by the webhook and the cleanup hook. */}}
{{- define "stockade.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "stockade.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}
