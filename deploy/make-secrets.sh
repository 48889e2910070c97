#!/usr/bin/env bash
# Makes the TLS and token files deploy/compose/compose.yaml mounts and the Kubernetes secrets are
# made from (see the README), in deploy/secrets/ (or the folder given): a private CA (ca.pem:
# give it to clients, e.g. RolloutClient(tls_ca=...)), the servers' certificate and key (for
# localhost, the compose services and the Kubernetes services and writer pods in namespace
# rollout-ledger), and tokens.json with two new tokens of the tenant "default": one plain, one marked as an importer.
# Needs openssl.
# Every file is made private (umask 077). The containers run as uid 10001 and must read the key and
# the tokens: run as root, the script gives those two to uid 10001 (0400); run as another user it
# cannot, so it leaves them 0644 and says so (fine on a machine of your own; on a shared host, run
# it as root or chown them to 10001 and chmod 0400 yourself).
set -euo pipefail
umask 077
out="${1:-$(dirname "$0")/secrets}"
names="DNS:localhost,DNS:writer,DNS:reader,IP:127.0.0.1"
# The writers of deploy/compose/cluster.yaml, which its reader asks by these names.
names="$names,DNS:writer-1,DNS:writer-2,DNS:writer-3"
for service in rollout-writer rollout-reader; do
  names="$names,DNS:$service,DNS:$service.rollout-ledger.svc,DNS:$service.rollout-ledger.svc.cluster.local"
done
# Each writer of a cluster (deploy/kubernetes/cluster) advertises its pod's own name.
names="$names,DNS:*.rollout-writer.rollout-ledger.svc,DNS:*.rollout-writer.rollout-ledger.svc.cluster.local"
mkdir -p "$out"
chmod 0755 "$out"  # ca.pem is for every client; the private files keep their own modes
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
chmod 0644 ca.pem server.pem
if [ "$(id -u)" = 0 ]; then
  chown 10001:10001 server.key tokens.json
  chmod 0400 server.key tokens.json
else
  chmod 0644 server.key tokens.json
  echo "note: server.key and tokens.json are readable by every local user (0644) so the containers" \
    "(uid 10001) can read them; on a shared host, chown them to 10001 and chmod 0400" >&2
fi
echo "made $out: ca.pem (for clients), server.pem, server.key, tokens.json"
echo "agent token:    $agent"
echo "importer token: $importer"
