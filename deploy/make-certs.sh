#!/usr/bin/env bash
# Makes a cluster's TLS files (common/tls.h): one certificate authority and a certificate for
# each node, whose subject alternative names are the node's addresses.
#
#   deploy/make-certs.sh DIR NODE=ADDRESS[,ADDRESS...] [NODE=...]
#   deploy/make-certs.sh /etc/fireflyer/tls head=10.0.0.1,head.example n01=10.0.1.1 n02=10.0.1.2
#
# Writes DIR/ca.pem and DIR/ca.key (the authority: keep ca.key off the nodes), and for each node
# DIR/NODE.pem and DIR/NODE.key. A node's daemons name them in their [tls] section:
#
#   [tls]
#   ca_file = "/etc/fireflyer/tls/ca.pem"
#   cert_file = "/etc/fireflyer/tls/n01.pem"
#   key_file = "/etc/fireflyer/tls/n01.key"
#
# Users' `hai` needs only the authority: FF_TLS_CA_FILE=/etc/fireflyer/tls/ca.pem. Run again with
# an existing DIR, it keeps the authority and makes (or remakes) the named nodes' certificates.
# Keys are EC P-256; certificates last DAYS days (default 825).
set -euo pipefail

if [ $# -lt 2 ]; then
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 64
fi
dir=$1
shift
days=${DAYS:-825}
command -v openssl >/dev/null || { echo "make-certs.sh: openssl is not installed" >&2; exit 69; }
mkdir -p "$dir"
umask 077

if [ ! -f "$dir/ca.pem" ] || [ ! -f "$dir/ca.key" ]; then
  openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" -days "$days" -subj "/CN=fireflyer cluster CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
  chmod 644 "$dir/ca.pem"
fi

for spec in "$@"; do
  node=${spec%%=*}
  addresses=${spec#*=}
  if [ -z "$node" ] || [ "$node" = "$spec" ] || [ -z "$addresses" ]; then
    echo "make-certs.sh: '$spec' is not NODE=ADDRESS[,ADDRESS...]" >&2
    exit 64
  fi
  case "$node" in */* | .* | ca) echo "make-certs.sh: '$node' is not a node name" >&2; exit 64 ;; esac
  san=""
  IFS=, read -ra list <<<"$addresses"
  for a in "${list[@]}"; do
    if [[ $a =~ ^[0-9.]+$ || $a == *:* ]]; then san+="IP:$a,"; else san+="DNS:$a,"; fi
  done
  san=${san%,}
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$tmp/key.pem" -out "$tmp/csr.pem" -subj "/CN=$node" 2>/dev/null
  printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n' \
    "$san" >"$tmp/ext.cnf"
  openssl x509 -req -in "$tmp/csr.pem" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -out "$tmp/cert.pem" -days "$days" -extfile "$tmp/ext.cnf" 2>/dev/null
  mv "$tmp/key.pem" "$dir/$node.key"
  mv "$tmp/cert.pem" "$dir/$node.pem"
  chmod 644 "$dir/$node.pem"
  rm -rf "$tmp"
  trap - EXIT
  echo "$dir/$node.pem: $san"
done
