{{/*
The chart name, or nameOverride.
*/}}
{{- define "dependency-controller.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of all object names: fullnameOverride, or "<release>-<chart name>"
(just the release name if it contains the chart name). Truncated so that
"<fullname>-controller-metrics" and "<fullname>-webhook-metrics" stay within
the 63 characters of a Service name.
*/}}
{{- define "dependency-controller.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 44 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 44 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 44 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version for the helm.sh/chart label.
*/}}
{{- define "dependency-controller.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object. Call with (dict "ctx" $ "component" "controller"|"webhook"|"tls"|"monitoring").
*/}}
{{- define "dependency-controller.labels" -}}
helm.sh/chart: {{ include "dependency-controller.chart" .ctx }}
{{ include "dependency-controller.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: {{ include "dependency-controller.name" .ctx }}
{{- end }}

{{/*
Selector labels of a component. Call with (dict "ctx" $ "component" ...).
*/}}
{{- define "dependency-controller.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dependency-controller.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
Name of a component's objects: "<fullname>-controller" or "<fullname>-webhook".
Call with (dict "ctx" $ "component" ...).
*/}}
{{- define "dependency-controller.componentName" -}}
{{- printf "%s-%s" (include "dependency-controller.fullname" .ctx) .component }}
{{- end }}

{{/*
Name of a component's ServiceAccount. Call with (dict "ctx" $ "component" ...).
*/}}
{{- define "dependency-controller.serviceAccountName" -}}
{{- $sa := (index .ctx.Values .component).serviceAccount }}
{{- if $sa.create }}
{{- default (include "dependency-controller.componentName" .) $sa.name }}
{{- else }}
{{- default "default" $sa.name }}
{{- end }}
{{- end }}

{{/*
Image reference of a component: repository@digest if a digest is set,
repository:tag otherwise (tag defaults to the chart's appVersion).
Call with (dict "ctx" $ "image" .Values.<component>.image).
*/}}
{{- define "dependency-controller.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{/*
Name of the webhook's Service.
*/}}
{{- define "dependency-controller.webhookServiceName" -}}
{{- include "dependency-controller.componentName" (dict "ctx" . "component" "webhook") }}
{{- end }}

{{/*
The DNS names of the webhook's Service, as a list.
*/}}
{{- define "dependency-controller.webhookServiceDNSNames" -}}
{{- $svc := include "dependency-controller.webhookServiceName" . -}}
- {{ $svc }}
- {{ $svc }}.{{ .Release.Namespace }}
- {{ $svc }}.{{ .Release.Namespace }}.svc
- {{ $svc }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end }}

{{/*
The URL kcp calls: controller.webhookURL, or the webhook Service's.
*/}}
{{- define "dependency-controller.webhookURL" -}}
{{- if .Values.controller.webhookURL }}
{{- .Values.controller.webhookURL }}
{{- else }}
{{- printf "https://%s.%s.svc:%d%s" (include "dependency-controller.webhookServiceName" .) .Release.Namespace (int .Values.webhook.service.port) .Values.webhook.path }}
{{- end }}
{{- end }}

{{/*
Name of the Secret with the webhook's serving certificate (tls.crt, tls.key,
ca.crt).
*/}}
{{- define "dependency-controller.servingSecretName" -}}
{{- if eq .Values.tls.mode "secret" }}
{{- required "tls.secret.name is required with tls.mode=secret" .Values.tls.secret.name }}
{{- else }}
{{- printf "%s-webhook-tls" (include "dependency-controller.fullname" .) }}
{{- end }}
{{- end }}

{{/*
Name of the Secret the controller's --webhook-ca-bundle comes from.
*/}}
{{- define "dependency-controller.caBundleSecretName" -}}
{{- default (include "dependency-controller.servingSecretName" .) .Values.controller.webhookCABundle.secretName }}
{{- end }}

{{/*
Logging flags of a component. Call with (dict "ctx" $ "component" ...).
*/}}
{{- define "dependency-controller.loggingArgs" -}}
{{- $l := .ctx.Values.logging -}}
- --zap-log-level={{ default $l.level (index .ctx.Values .component).logLevel }}
- --zap-encoder={{ $l.encoder }}
- --zap-stacktrace-level={{ $l.stacktraceLevel }}
- --zap-time-encoding={{ $l.timeEncoding }}
{{- if $l.development }}
- --zap-devel=true
{{- end }}
{{- end }}

{{/*
--metrics-bind-address of a component. Call with (dict "ctx" $ "component" ...).
*/}}
{{- define "dependency-controller.metricsBindAddress" -}}
{{- if .ctx.Values.metrics.enabled }}
{{- printf ":%d" (int (index .ctx.Values .component).metricsPort) }}
{{- else }}
{{- print "0" }}
{{- end }}
{{- end }}

{{/*
Topology spread constraints of a component: the values', or spread over
nodes. Call with (dict "ctx" $ "component" ...).
*/}}
{{- define "dependency-controller.topologySpreadConstraints" -}}
{{- $v := index .ctx.Values .component }}
{{- if $v.topologySpreadConstraints }}
{{- toYaml $v.topologySpreadConstraints }}
{{- else -}}
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- include "dependency-controller.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end }}

{{/*
Name of the Secret with the keys that sign the records of deferred
deletions: webhook.recordKeys.existingSecret, or the chart's
"<fullname>-record-keys".
*/}}
{{- define "dependency-controller.recordKeysSecretName" -}}
{{- default (printf "%s-record-keys" (include "dependency-controller.fullname" .)) .Values.webhook.recordKeys.existingSecret }}
{{- end }}
