{{/* Names, labels and the checks every template relies on. */}}

{{- define "epp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name when it already contains the chart name, else "<release>-<chart>". */}}
{{- define "epp.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "epp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "epp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "epp.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "epp.selectorLabels" . }}
app.kubernetes.io/version: {{ include "epp.imageTag" . | trunc 63 | quote }}
app.kubernetes.io/component: endpoint-picker
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "epp.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "epp.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "epp.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "epp.poolName" -}}
{{- .Values.pool.name | default .Release.Name }}
{{- end }}

{{/* Where the ConfigMap and the TLS Secret are mounted. */}}
{{- define "epp.configDir" -}}/config{{- end }}
{{- define "epp.certDir" -}}/etc/epp/tls{{- end }}
{{- define "epp.clientCaDir" -}}/etc/epp/client-ca{{- end }}
{{- define "epp.metricsCertDir" -}}/etc/epp/metrics-tls{{- end }}

{{/*
The EndpointPickerConfig text: inferenceExtension.pluginsCustomConfig, config.text, else the chart's copy
of the chosen example (epp.configExample). An unknown example fails the render with the list of the known
ones.
*/}}
{{/*
The config epp loads: the chosen one (epp.chosenConfigText), with activeActive's speculativePeers added.
*/}}
{{- define "epp.configText" -}}
{{- if .Values.activeActive.enabled }}
{{- include "epp.activeActiveConfig" (dict "root" . "text" (include "epp.chosenConfigText" .)) }}
{{- else }}
{{- include "epp.chosenConfigText" . }}
{{- end }}
{{- end }}

{{/* The headless Service the active-active replicas find each other by. */}}
{{- define "epp.peersServiceName" -}}
{{- printf "%s-peers" (include "epp.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
activeActive: the config with its precise-prefix-cache-producer's speculativePeers pointed at the peers
Service (every replica's address, this one's included: a replica ignores its own datagrams). The config
is parsed and written back, so it loses its comments and its keys come sorted.
*/}}
{{- define "epp.activeActiveConfig" -}}
{{- $root := .root }}
{{- $config := .text | fromYaml }}
{{- if hasKey $config "Error" }}
{{- fail (printf "activeActive: the config is not YAML: %s" $config.Error) }}
{{- end }}
{{- $port := int $root.Values.activeActive.peerPort }}
{{- $peer := printf "%s.%s.svc:%d" (include "epp.peersServiceName" $root) $root.Release.Namespace $port }}
{{- $found := 0 }}
{{- range $plugin := $config.plugins | default list }}
{{- if eq (toString $plugin.type) "precise-prefix-cache-producer" }}
{{- $found = add1 $found }}
{{- $params := $plugin.parameters | default dict }}
{{- if ne (toString $params.speculativeIndexing) "true" }}
{{- fail "activeActive: the config's precise-prefix-cache-producer needs speculativeIndexing: true (the replicas share their speculative entries)" }}
{{- end }}
{{- if hasKey $params "speculativePeers" }}
{{- fail "activeActive: the chart sets the precise-prefix-cache-producer's speculativePeers itself (to its peers Service); remove it from the config" }}
{{- end }}
{{- $_ := set $params "speculativePeers" (dict "listen" (printf ":%d" $port) "peers" (list $peer)) }}
{{- $_ := set $plugin "parameters" $params }}
{{- end }}
{{- end }}
{{- if ne $found 1 }}
{{- fail (printf "activeActive needs the config to have one precise-prefix-cache-producer (it has %d): active-active replicas share its speculative entries (docs/precise-prefix.md)" $found) }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{- define "epp.chosenConfigText" -}}
{{- $ie := include "epp.ie" . | fromYaml }}
{{- $custom := $ie.pluginsCustomConfig | default dict }}
{{- $file := $ie.pluginsConfigFile | default (ternary (keys $custom | first) "" (eq (len $custom) 1)) }}
{{- if hasKey $custom $file }}
{{- get $custom $file }}
{{- else if .Values.config.text }}
{{- .Values.config.text }}
{{- else }}
{{- $example := include "epp.configExample" . }}
{{- $path := printf "configs/%s.yaml" $example }}
{{- $text := .Files.Get $path }}
{{- if not $text }}
{{- $known := list }}
{{- range $file, $_ := .Files.Glob "configs/*.yaml" }}
{{- $known = append $known (base $file | trimSuffix ".yaml") }}
{{- end }}
{{- fail (printf "config.example %q: no such example; known: %s (or set config.text)" $example (join ", " $known)) }}
{{- end }}
{{- $text }}
{{- end }}
{{- end }}

{{/*
Flags the chart renders itself: setting one in .Values.flags as well would pass it twice, which epp
rejects at start-up, so the render fails first and names the value to use.
*/}}
{{- define "epp.managedFlags" -}}
grpc-port: ports.grpc
grpc-health-port: ports.health
metrics-port: ports.metrics
config-file: config.text / config.example
config-text: config.text
pool-name: pool.name
pool-namespace: the release namespace
pool-group: pool.group (or inferencePool.apiVersion)
ha-enable-leader-election: leaderElection.enabled (or inferenceExtension.replicas > 1)
endpoints: endpoints
secure-serving: secureServing
cert-path: tls.secretName
grpc-client-ca-file: tls.clientCaSecretName
metrics-cert-dir: metricsTls.secretName
log-level: logLevel
refresh-metrics-interval: refreshMetricsInterval
refresh-prometheus-metrics-interval: refreshPrometheusMetricsInterval
metrics-staleness-threshold: metricsStalenessThreshold
shutdown-grace-period: shutdownGracePeriod
latency-model-dir: latencyModels (the chart mounts /models when the config has a predicted-latency-producer)
metrics-endpoint-auth: metricsAuth.enabled
tracing: tracing.enabled
{{- end }}

{{- define "epp.validate" -}}
{{- if and .Values.tls.clientCaSecretName (not .Values.secureServing) }}
{{- fail "tls.clientCaSecretName is set but secureServing is false: mutual TLS is TLS (set secureServing: true)" }}
{{- end }}
{{- if and .Values.metricsTls.secretName (not (include "epp.metricsAuth" .)) }}
{{- fail "metricsTls.secretName without metrics auth: epp refuses TLS with nothing checking who scrapes (set metricsAuth.enabled: true)" }}
{{- end }}
{{- if and .Values.tls.secretName (not .Values.secureServing) }}
{{- fail "tls.secretName is set but secureServing is false: epp would ignore the certificate (set secureServing: true, or drop tls.secretName)" }}
{{- end }}
{{- if and .Values.activeActive.enabled .Values.leaderElection.enabled }}
{{- fail "activeActive.enabled and leaderElection.enabled: active-active replicas are all ready, leader election makes one ready; pick one" }}
{{- end }}
{{- if and (gt (int (include "epp.replicas" .)) 1) (not (include "epp.leaderElection" .)) (not .Values.activeActive.enabled) }}
{{- fail (printf "replicas=%s needs leaderElection.enabled: true, or activeActive.enabled with precise prefix routing (without either every replica is an independent picker with split state, all of them ready)" (include "epp.replicas" .)) }}
{{- end }}
{{- if .Values.activeActive.enabled }}
{{- $port := int .Values.activeActive.peerPort }}
{{- if has $port (list (int (include "epp.grpcPort" .)) (int .Values.ports.health) (int .Values.ports.metrics)) }}
{{- fail (printf "activeActive.peerPort %d is one of epp's other ports (ports.*)" $port) }}
{{- end }}
{{- end }}
{{- include "epp.validatePredictor" . }}
{{- $managed := include "epp.managedFlags" . | fromYaml }}
{{- range $flag, $_ := include "epp.flags" . | fromYaml }}
{{- $key := trimPrefix "--" $flag }}
{{- if hasKey $managed $key }}
{{- fail (printf "flags.%s: the chart sets --%s itself; use %s instead" $flag $key (get $managed $key)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"true" when the pool does not come from Kubernetes (endpoints, the config's `endpoints:`, or file
discovery through flags.endpoints-file): epp then never calls the API for discovery.
*/}}
{{- define "epp.staticEndpoints" -}}
{{- $fromFile := hasKey (include "epp.flags" . | fromYaml) "endpoints-file" }}
{{- if or .Values.endpoints (regexMatch "(?m)^endpoints:" (include "epp.configText" .)) $fromFile }}true{{ end }}
{{- end }}

{{/* "true" when epp calls the Kubernetes API: discovery (no static endpoints) or leader election. */}}
{{- define "epp.callsApi" -}}
{{- if or (not (include "epp.staticEndpoints" .)) (include "epp.leaderElection" .) }}true{{ end }}
{{- end }}

{{/*
"true" when /metrics and the route probe need a reviewed bearer token (--metrics-endpoint-auth):
inferenceExtension.monitoring.prometheus.auth.enabled, else metricsAuth.enabled, else epp's own rule (on
when it calls the API).
*/}}
{{- define "epp.metricsAuth" -}}
{{- $prom := (((include "epp.ie" . | fromYaml).monitoring | default dict).prometheus | default dict) }}
{{- $set := .Values.metricsAuth.enabled }}
{{- if hasKey ($prom.auth | default dict) "enabled" }}{{ $set = $prom.auth.enabled }}{{ end }}
{{- if kindIs "bool" $set }}{{ if $set }}true{{ end }}{{ else }}{{ include "epp.callsApi" . }}{{ end }}
{{- end }}

{{/* The Secret whose `token` the ServiceMonitor sends: upstream's auth.secretName, else tokenSecretName. */}}
{{- define "epp.metricsTokenSecret" -}}
{{- $prom := (((include "epp.ie" . | fromYaml).monitoring | default dict).prometheus | default dict) }}
{{- ($prom.auth | default dict).secretName | default .Values.serviceMonitor.tokenSecretName }}
{{- end }}

{{/*
The RBAC rules epp needs, from api-calls.yaml (the one list of the API calls epp makes): pods and the
InferencePool with discovery, leases with leader election.
*/}}
{{- define "epp.rbacRules" -}}
{{- $calls := .Files.Get "api-calls.yaml" | fromYaml }}
{{- $features := list }}
{{- if not (include "epp.staticEndpoints" .) }}
{{- $features = concat $features (list "discovery" "inferencePool") }}
{{- end }}
{{- if include "epp.leaderElection" . }}
{{- $features = append $features "leaderElection" }}
{{- end }}
{{- $rules := list }}
{{- range $features }}
{{- range (get $calls .) }}
{{- $group := ternary (include "epp.poolGroup" $) .group (eq .group "POOL_GROUP") }}
{{- $rules = append $rules (dict "apiGroups" (list $group) "resources" (list .resource) "verbs" .verbs) }}
{{- end }}
{{- end }}
{{- toYaml (dict "rules" $rules) }}
{{- end }}

{{/* serviceAccount.automountServiceAccountToken, else whether epp calls the API. */}}
{{- define "epp.automountToken" -}}
{{- $set := .Values.serviceAccount.automountServiceAccountToken }}
{{- if kindIs "bool" $set }}{{ $set }}{{ else }}{{ or (include "epp.callsApi" .) (include "epp.metricsAuth" .) | eq "true" }}{{ end }}
{{- end }}
