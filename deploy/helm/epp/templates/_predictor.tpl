{{/*
The latency predictor. epp predicts in process (a predicted-latency-producer in the EndpointPickerConfig):
no training or prediction sidecars. Upstream's inferenceExtension.latencyPredictor
(kubernetes-sigs/gateway-api-inference-extension:config/charts/epplib/values.yaml,
llm-d/llm-d-router:config/charts/routerlib/values.yaml) maps onto the config, the training settings and a
model volume of the one epp container; its sidecar settings are ignored (deploy/helm/README.md lists them).
*/}}

{{- define "epp.latencyPredictor" -}}
{{- toYaml ((include "epp.ie" . | fromYaml).latencyPredictor | default dict) }}
{{- end }}

{{/* "true" when upstream's switch inferenceExtension.latencyPredictor.enabled is on. */}}
{{- define "epp.predictorEnabled" -}}
{{- if (include "epp.latencyPredictor" . | fromYaml).enabled }}true{{ end }}
{{- end }}

{{/*
The example config.example names; with the predictor enabled, the default example becomes
predicted-latency-epp, as upstream's chart renders its latency-predictor pipeline in place of the default
one (kubernetes-sigs/gateway-api-inference-extension:config/charts/epplib/templates/_config.yaml). epp's
recommended profile rather than upstream's SLO pipeline (predicted-latency-slo, still a config.example):
the latter loses to the default profile on every scenario of the lab's suite (BENCHMARKS.md §7).
*/}}
{{- define "epp.configExample" -}}
{{- if and (include "epp.predictorEnabled" .) (eq .Values.config.example "default") }}predicted-latency-epp
{{- else }}{{ .Values.config.example }}{{ end }}
{{- end }}

{{/* "true" when the config runs the predictor: one of its plugins is a predicted-latency-producer. */}}
{{- define "epp.predictorActive" -}}
{{- $plugins := (include "epp.configText" . | fromYaml).plugins }}
{{- $found := false }}
{{- if kindIs "slice" $plugins }}
{{- range $plugins }}
{{- if and (kindIs "map" .) (eq (toString .type) "predicted-latency-producer") }}{{ $found = true }}{{ end }}
{{- end }}
{{- end }}
{{- if $found }}true{{ end }}
{{- end }}

{{/* Where the models live: --latency-model-dir, the mount of the latency-models volume. */}}
{{- define "epp.modelDir" -}}/models{{- end }}

{{/* The training-server settings epp reads under the same names (src/cli/predictor.rs). */}}
{{- define "epp.predictorEnvNames" -}}
- LATENCY_RETRAINING_INTERVAL_SEC
- LATENCY_MIN_SAMPLES_FOR_RETRAIN
- LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET
- LATENCY_OBJECTIVE_TYPE
- LATENCY_QUANTILE_ALPHA
{{- end }}

{{/*
EnvVars for the mapped keys of latencyPredictor.trainingServer.config, when the predictor runs, and
LATENCY_OBJECTIVE_TYPE=log-mean for the predicted-latency-epp example when nothing sets it. A name also set
in env or inferenceExtension.env is left to that entry.
*/}}
{{- define "epp.predictorEnv" -}}
{{- $env := list }}
{{- if include "epp.predictorActive" . }}
{{- $config := ((include "epp.latencyPredictor" . | fromYaml).trainingServer | default dict).config | default dict }}
{{- $taken := dict }}
{{- range concat .Values.env ((include "epp.ie" . | fromYaml).env | default list) }}
{{- $_ := set $taken (toString .name) true }}
{{- end }}
{{- range $name := include "epp.predictorEnvNames" . | fromYamlArray }}
{{- if and (hasKey $config $name) (not (hasKey $taken $name)) }}
{{- $value := get $config $name }}
{{- if and (kindIs "float64" $value) (eq $value (float64 (int64 $value))) }}
{{- $value = int64 $value }}
{{- end }}
{{- $env = append $env (dict "name" $name "value" (toString $value)) }}
{{- end }}
{{- end }}
{{- /* The recommended profile runs with log-mean models (config/predicted-latency-epp.yaml says why) unless
the objective is set; a --latency-objective-type in flags wins over the env. */}}
{{- $ie := include "epp.ie" . | fromYaml }}
{{- $example := and (not .Values.config.text) (not $ie.pluginsCustomConfig) (eq (include "epp.configExample" .) "predicted-latency-epp") }}
{{- if and $example (not (hasKey $config "LATENCY_OBJECTIVE_TYPE")) (not (hasKey $taken "LATENCY_OBJECTIVE_TYPE")) }}
{{- $env = append $env (dict "name" "LATENCY_OBJECTIVE_TYPE" "value" "log-mean") }}
{{- end }}
{{- end }}
{{- toYaml (dict "env" $env) }}
{{- end }}

{{/* The latency-models volume's source: the PVC, else an emptyDir (sizeLimit from volumeSize or values). */}}
{{- define "epp.modelVolume" -}}
{{- if .Values.latencyModels.persistentVolumeClaim }}
persistentVolumeClaim:
  claimName: {{ .Values.latencyModels.persistentVolumeClaim }}
{{- else }}
{{- $size := ((include "epp.latencyPredictor" . | fromYaml).trainingServer | default dict).volumeSize }}
emptyDir:
  sizeLimit: {{ $size | default .Values.latencyModels.sizeLimit | quote }}
{{- end }}
{{- end }}

{{- define "epp.validatePredictor" -}}
{{- $lp := include "epp.latencyPredictor" . | fromYaml }}
{{- if and (include "epp.predictorEnabled" .) (not (include "epp.predictorActive" .)) }}
{{- $source := printf "config.example %s" (include "epp.configExample" .) }}
{{- if or .Values.config.text (include "epp.ie" . | fromYaml).pluginsCustomConfig }}
{{- $source = "config.text / inferenceExtension.pluginsCustomConfig" }}
{{- end }}
{{- fail (printf "inferenceExtension.latencyPredictor.enabled: the config (%s) has no predicted-latency-producer plugin, so nothing would predict; leave config.example at default (predicted-latency-epp is used), choose predicted-latency-epp, predicted-latency or predicted-latency-slo, or add the plugin to your config" $source) }}
{{- end }}
{{- range $server := list "trainingServer" "predictionServers" }}
{{- $type := ((get $lp $server | default dict).config | default dict).LATENCY_MODEL_TYPE }}
{{- if and $type (ne (lower (toString $type)) "xgboost") }}
{{- fail (printf "inferenceExtension.latencyPredictor.%s.config.LATENCY_MODEL_TYPE %q: epp's in-process predictor trains XGBoost models only (set xgboost, or drop the key)" $server (toString $type)) }}
{{- end }}
{{- end }}
{{- if and .Values.latencyModels.persistentVolumeClaim (gt (int (include "epp.replicas" .)) 1) }}
{{- fail (printf "latencyModels.persistentVolumeClaim with replicas=%s: every replica would write the same model files; use one replica, or the default emptyDir" (include "epp.replicas" .)) }}
{{- end }}
{{- end }}
