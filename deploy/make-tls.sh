#!/usr/bin/env bash
# Self-signed TLS for a braid deployment: a private CA and a server
# certificate it signs, so braid-server serves gRPC (and its HTTP dashboard)
# over TLS and workers, the CLI and launchers verify it with the CA.
#
#   deploy/make-tls.sh DIR [NAME...]
#
# DIR gets ca.crt (give it to every client: --tls-ca), tls.crt and tls.key
# (the server's: --tls-cert, --tls-key) and ca.key (keep it off the servers;
# it signs more certificates). The server certificate names localhost,
# 127.0.0.1, ::1 and the Kubernetes Service `braid` (braid, braid.NS,
# braid.NS.svc, braid.NS.svc.cluster.local with NS = $BRAID_TLS_NAMESPACE,
# default "default"), plus each NAME (a host name or an IP address) clients
# use to reach the server, e.g. braid.internal. Valid for $BRAID_TLS_DAYS
# (default 825) days. An existing DIR/tls.key is never overwritten.
#
#   deploy/make-tls.sh /etc/braid/tls braid.internal        # systemd units
#   deploy/make-tls.sh tls && kubectl create secret generic braid-tls \
#     --from-file=tls.crt=tls/tls.crt --from-file=tls.key=tls/tls.key \
#     --from-file=ca.crt=tls/ca.crt                            # deploy/k8s
#
# A certificate from your own CA works the same way: the deployments only
# expect the files tls.crt, tls.key and ca.crt.
set -euo pipefail

usage() {
  echo "usage: $0 DIR [NAME...]  (NAME: extra DNS name or IP address of the server)" >&2
  exit 2
}
(($# >= 1)) || usage
case "$1" in -h | --help) usage ;; esac
dir=$1
shift
days=${BRAID_TLS_DAYS:-825}
ns=${BRAID_TLS_NAMESPACE:-default}
[[ "$days" =~ ^[1-9][0-9]{0,4}$ ]] || { echo "$0: BRAID_TLS_DAYS must be a positive number of days" >&2; exit 2; }
[[ "$ns" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || { echo "$0: BRAID_TLS_NAMESPACE is not a Kubernetes namespace name" >&2; exit 2; }
command -v openssl >/dev/null || { echo "$0: openssl not found (apt-get install openssl)" >&2; exit 1; }

san="DNS:localhost,IP:127.0.0.1,IP:::1,DNS:braid,DNS:braid.$ns,DNS:braid.$ns.svc,DNS:braid.$ns.svc.cluster.local"
for name in "$@"; do
  if [[ "$name" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ || "$name" == *:* ]]; then
    san+=",IP:$name"
  elif [[ "$name" =~ ^[A-Za-z0-9*]([-A-Za-z0-9.]*[A-Za-z0-9])?$ ]]; then
    san+=",DNS:$name"
  else
    echo "$0: '$name' is neither a host name nor an IP address" >&2
    exit 2
  fi
done

if [[ -e "$dir/tls.key" ]]; then
  echo "$0: $dir/tls.key exists: not overwriting a deployment's key (remove it first)" >&2
  exit 1
fi
mkdir -p "$dir"
umask 077
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# EC P-256 keys: small and fast, and accepted by gRPC and the HTTP dashboard.
curve=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${curve[@]}" -keyout "$tmp/ca.key" -out "$tmp/ca.crt" -days "$days" \
  -subj "/CN=braid deployment CA" \
  -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
openssl req -new "${curve[@]}" -keyout "$tmp/tls.key" -out "$tmp/tls.csr" \
  -subj "/CN=braid" 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
printf '%s\n' "subjectAltName=$san" "basicConstraints=critical,CA:FALSE" \
  "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >"$tmp/ext"
openssl x509 -req -in "$tmp/tls.csr" -CA "$tmp/ca.crt" -CAkey "$tmp/ca.key" \
  -set_serial "0x$(openssl rand -hex 16)" -days "$days" -extfile "$tmp/ext" \
  -out "$tmp/tls.crt" 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }

# Certificates are public; keys stay readable by their owner only.
chmod 0644 "$tmp/ca.crt" "$tmp/tls.crt"
chmod 0600 "$tmp/ca.key" "$tmp/tls.key"
for f in ca.crt ca.key tls.crt tls.key; do mv -f "$tmp/$f" "$dir/$f"; done
echo "braid TLS: $dir/{ca.crt,tls.crt,tls.key,ca.key}, server names: ${san//,/ }" >&2
