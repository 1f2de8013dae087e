{{/*
Names are fixed, as in the kustomize base: serve's flags and the webhook configurations name
them (one topogate per cluster: two would both answer the same webhooks).
*/}}
{{- define "topogate.labels" -}}
app.kubernetes.io/name: topogate
{{- end }}

{{- define "topogate.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default "topogate-manager" }}
{{- else -}}
{{ required "serviceAccount.name: the ServiceAccount to run as, when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end -}}
{{- end }}

{{- define "topogate.leaderNamespace" -}}
{{ .Values.leaderElection.namespace | default .Release.Namespace }}
{{- end }}

{{- define "topogate.certMode" -}}
{{- $mode := .Values.webhook.certificate.mode -}}
{{- if not (has $mode (list "builtin" "certManager" "secret")) -}}
{{- fail (printf "webhook.certificate.mode: %q is not one of builtin, certManager, secret" $mode) -}}
{{- end -}}
{{ $mode }}
{{- end }}

{{/* The Secret holding tls.crt/tls.key/ca.crt in the certManager and secret modes. */}}
{{- define "topogate.certSecret" -}}
{{- if eq (include "topogate.certMode" .) "secret" -}}
{{ required "webhook.certificate.secretName: the Secret with tls.crt, tls.key and ca.crt (mode secret)" .Values.webhook.certificate.secretName }}
{{- else -}}
topogate-webhook-cert
{{- end -}}
{{- end }}
