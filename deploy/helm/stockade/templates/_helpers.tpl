{{- define "stockade.name" -}}stockade{{- end -}}
{{- define "stockade.labels" -}}
app.kubernetes.io/name: stockade
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
{{- define "stockade.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
