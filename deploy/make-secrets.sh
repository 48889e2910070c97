#!/usr/bin/env bash
# Makes the TLS and token files deploy/compose/compose.yaml mounts and the Kubernetes secrets are
# made from (see the README), in deploy/secrets/ (or the folder given): a private CA (ca.pem:
# give it to clients, e.g. RolloutClient(tls_ca=...)), the servers' certificate and key (for
# localhost, the compose services and the Kubernetes services in namespace rollout-ledger), and
# tokens.json with two new tokens of the tenant "default": one plain, one marked as an importer.
# Needs openssl.
# The containers run as uid 10001: the files are made readable by it (0644: for a machine of
# your own; on a shared host, chown them to 10001 and chmod 0400 instead).
set -euo pipefail
out="${1:-$(dirname "$0")/secrets}"
names="DNS:localhost,DNS:writer,DNS:reader,IP:127.0.0.1"
for service in rollout-writer rollout-reader; do
  names="$names,DNS:$service,DNS:$service.rollout-ledger.svc,DNS:$service.rollout-ledger.svc.cluster.local"
done
mkdir -p "$out"
cd "$out"
if [ -e server.key ]; then
  echo "$out already holds secrets; remove it to make new ones" >&2
  exit 1
fi
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
  -subj "/CN=rollout-ledger local CA" -keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj "/CN=localhost" -keyout server.key -out server.csr 2>/dev/null
printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' "$names" > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
  -extfile server.ext -out server.pem 2>/dev/null
rm -f server.csr server.ext ca.srl
agent="$(openssl rand -hex 24)"
importer="$(openssl rand -hex 24)"
printf '{"%s": "default", "%s": {"tenant": "default", "importer": true}}\n' "$agent" "$importer" > tokens.json
chmod 0600 ca.key
chmod 0644 ca.pem server.pem server.key tokens.json
echo "made $out: ca.pem (for clients), server.pem, server.key, tokens.json"
echo "agent token:    $agent"
echo "importer token: $importer"
