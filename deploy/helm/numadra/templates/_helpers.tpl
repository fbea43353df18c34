{{/* Labels on every object; the kustomize base sets the same two (plus Helm's own). */}}
{{- define "numadra.labels" -}}
app.kubernetes.io/name: numadra
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The DaemonSet's selector and pod labels. */}}
{{- define "numadra.selectorLabels" -}}
app.kubernetes.io/name: numadra
app.kubernetes.io/component: kubeletplugin
{{- end }}

{{- define "numadra.pluginName" -}}
{{ .Release.Name }}-kubeletplugin
{{- end }}

{{- define "numadra.validateValues" -}}
{{- if not (has .Values.pinning.backend (list "nri" "hook" "cgroupfs" "off")) }}
{{- fail (printf "pinning.backend must be one of nri, hook, cgroupfs, off (got %q)" .Values.pinning.backend) }}
{{- end }}
{{- if not .Values.devices }}
{{- fail "devices must name at least one of gpu, nic, cpu, memory" }}
{{- end }}
{{- range .Values.devices }}
{{- if not (has . (list "gpu" "nic" "cpu" "memory")) }}
{{- fail (printf "devices: %q is not one of gpu, nic, cpu, memory" .) }}
{{- end }}
{{- end }}
{{- end }}
