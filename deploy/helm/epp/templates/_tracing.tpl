{{/*
OpenTelemetry tracing (docs/operations.md): the native `tracing` values with upstream's
`inferenceExtension.tracing` (the same keys, llm-d/llm-d-router:config/charts/routerlib/values.yaml) laid
over them. As YAML, for `include "epp.tracing" . | fromYaml`.
*/}}
{{- define "epp.tracing" -}}
{{- $upstream := (include "epp.ie" . | fromYaml).tracing | default dict }}
{{- toYaml (mergeOverwrite (deepCopy .Values.tracing) $upstream) }}
{{- end }}

{{/*
The OTEL_* EnvVars tracing sets, as upstream's chart sets them (OTLP to the endpoint, the sampler, the
pod's namespace, node and name as resource attributes); a name also set in env or inferenceExtension.env is
left to that entry. Empty when tracing is off.
*/}}
{{- define "epp.tracingEnv" -}}
{{- $env := list }}
{{- $tracing := include "epp.tracing" . | fromYaml }}
{{- if $tracing.enabled }}
{{- $taken := dict }}
{{- range concat .Values.env ((include "epp.ie" . | fromYaml).env | default list) }}
{{- $_ := set $taken (toString .name) true }}
{{- end }}
{{- $sampling := $tracing.sampling | default dict }}
{{- $all := list
  (dict "name" "OTEL_TRACES_EXPORTER" "value" "otlp")
  (dict "name" "OTEL_EXPORTER_OTLP_ENDPOINT" "value" (toString $tracing.otelExporterEndpoint))
  (dict "name" "OTEL_TRACES_SAMPLER" "value" (toString $sampling.sampler))
  (dict "name" "OTEL_TRACES_SAMPLER_ARG" "value" (toString $sampling.samplerArg))
  (dict "name" "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "spec.nodeName")))
  (dict "name" "OTEL_RESOURCE_ATTRIBUTES" "value" "k8s.namespace.name=$(NAMESPACE),k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),k8s.pod.name=$(POD_NAME)") }}
{{- range $all }}
{{- if not (hasKey $taken .name) }}
{{- $env = append $env . }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml (dict "env" $env) }}
{{- end }}
