{{/*
The upstream inferencepool chart's layout (kubernetes-sigs/gateway-api-inference-extension:
config/charts/inferencepool/values.yaml, llm-d/llm-d-router:config/charts/inferencepool/values.yaml)
mapped onto this chart's own values. Each helper answers one effective value; an upstream key, when
set, wins over the native one. deploy/helm/README.md lists the mapped and the ignored keys.
*/}}

{{/*
inferenceExtension as YAML, for `include "epp.ie" . | fromYaml`. The final newline matters: toYaml drops
it, and a block scalar that is last in the document (pluginsCustomConfig when no later key is set) would
then lose its own.
*/}}
{{- define "epp.ie" -}}
{{- toYaml (.Values.inferenceExtension | default dict) }}
{{ end }}

{{/* Replicas: inferenceExtension.replicas, else replicas. */}}
{{- define "epp.replicas" -}}
{{- $ie := include "epp.ie" . | fromYaml }}
{{- if hasKey $ie "replicas" }}{{ int $ie.replicas }}{{ else }}{{ int .Values.replicas }}{{ end }}
{{- end }}

{{/*
Leader election: leaderElection.enabled, or upstream's rule (its chart adds --ha-enable-leader-election
whenever inferenceExtension.replicas > 1) unless the replicas are active-active. "true" or "".
*/}}
{{- define "epp.leaderElection" -}}
{{- $ie := include "epp.ie" . | fromYaml }}
{{- $upstreamRule := and (hasKey $ie "replicas") (gt (int $ie.replicas) 1) (not .Values.activeActive.enabled) }}
{{- if or .Values.leaderElection.enabled $upstreamRule }}true{{ end }}
{{- end }}

{{/* The image: inferenceExtension.image as hub/name (GIE) or registry/repository (llm-d), else image.*. */}}
{{- define "epp.image" -}}
{{- $img := (include "epp.ie" . | fromYaml).image | default dict }}
{{- $repo := .Values.image.repository }}
{{- if and $img.hub $img.name }}{{ $repo = printf "%s/%s" $img.hub $img.name }}
{{- else if and $img.registry $img.repository }}{{ $repo = printf "%s/%s" $img.registry $img.repository }}
{{- else if $img.repository }}{{ $repo = $img.repository }}
{{- end }}
{{- printf "%s:%s" $repo ($img.tag | default (include "epp.imageTag" .)) }}
{{- end }}

{{- define "epp.pullPolicy" -}}
{{- ((include "epp.ie" . | fromYaml).image | default dict).pullPolicy | default .Values.image.pullPolicy }}
{{- end }}

{{/* ext_proc port: inferenceExtension.extProcPort, else ports.grpc. */}}
{{- define "epp.grpcPort" -}}
{{- (include "epp.ie" . | fromYaml).extProcPort | default .Values.ports.grpc | int }}
{{- end }}

{{/* Extra flags: flags, then inferenceExtension.flags (which wins on the same key). */}}
{{- define "epp.flags" -}}
{{- toYaml (merge (dict) ((include "epp.ie" . | fromYaml).flags | default dict) .Values.flags) }}
{{- end }}

{{/* The pool's API group: the group of inferencePool.apiVersion, else pool.group. */}}
{{- define "epp.poolGroup" -}}
{{- with .Values.inferencePool.apiVersion }}{{ (split "/" .)._0 }}{{ else }}{{ .Values.pool.group }}{{ end }}
{{- end }}

{{/* "true" when the chart creates the InferencePool: inferencePool.modelServers.matchLabels is set. */}}
{{- define "epp.createPool" -}}
{{- if ((.Values.inferencePool.modelServers | default dict).matchLabels) }}true{{ end }}
{{- end }}

{{/* ServiceMonitor: serviceMonitor.enabled or inferenceExtension.monitoring.prometheus.enabled. */}}
{{- define "epp.serviceMonitor" -}}
{{- $prom := (((include "epp.ie" . | fromYaml).monitoring | default dict).prometheus | default dict) }}
{{- if or .Values.serviceMonitor.enabled $prom.enabled }}true{{ end }}
{{- end }}

{{- define "epp.serviceMonitorLabels" -}}
{{- $prom := (((include "epp.ie" . | fromYaml).monitoring | default dict).prometheus | default dict) }}
{{- toYaml (merge (dict) ($prom.extraLabels | default dict) .Values.serviceMonitor.labels) }}
{{- end }}

{{- define "epp.serviceMonitorInterval" -}}
{{- ((include "epp.ie" . | fromYaml).monitoring | default dict).interval | default .Values.serviceMonitor.interval }}
{{- end }}
