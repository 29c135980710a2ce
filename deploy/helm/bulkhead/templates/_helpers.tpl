{{- define "bulkhead.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "bulkhead.serviceAccount" -}}
{{- default (include "bulkhead.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "bulkhead.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: node-agent
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "bulkhead.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "bulkhead.image" -}}
"{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
{{- end -}}

{{/* KUBERNETES_SERVICE_HOST/PORT when apiServer.host is set (no kube-proxy to reach the Service). */}}
{{- define "bulkhead.apiServerEnv" -}}
{{- if .Values.apiServer.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ .Values.apiServer.host | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ .Values.apiServer.port | default "443" | quote }}
{{- end }}
{{- end -}}
