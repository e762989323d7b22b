#!/usr/bin/env bash
# Renders an Envoy bootstrap template from deploy/envoy/ to stdout: each `${NAME}` takes the environment
# variable NAME, each `${NAME:-default}` takes NAME or else the default. Comment lines are left as they are
# (they document the placeholders). Fails if a placeholder has neither a value nor a default.
# Same rules as crates/testkit::render_template.
#   usage: LISTEN_PORT=8080 ADMIN_PORT=9901 EXTPROC_PORT=9002 scripts/render-envoy-config.sh deploy/envoy/envoy-full-duplex.yaml
set -euo pipefail

template=${1:?usage: render-envoy-config.sh TEMPLATE}
placeholder='\$\{([A-Z_][A-Z0-9_]*)(:-([^}]*))?\}'
while IFS= read -r line || [[ -n $line ]]; do
  if [[ ! $line =~ ^[[:space:]]*# ]]; then
    while [[ $line =~ $placeholder ]]; do
      name=${BASH_REMATCH[1]}
      if [[ -n ${!name+x} ]]; then
        value=${!name}
      elif [[ -n ${BASH_REMATCH[2]} ]]; then
        value=${BASH_REMATCH[3]}
      else
        echo "render-envoy-config: $template needs \$$name" >&2
        exit 1
      fi
      line=${line/"${BASH_REMATCH[0]}"/$value}
    done
  fi
  printf '%s\n' "$line"
done <"$template"
