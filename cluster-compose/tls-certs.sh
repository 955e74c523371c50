#!/usr/bin/env bash
# tls-certs.sh DIR: test certificates for a TLS cluster, made with the
# openssl CLI: a CA (ca.crt), a server certificate valid for 127.0.0.1,
# localhost and redis1..redis5 (server.crt/.key, for the masters), and a
# client certificate (client.crt/.key, for --tls-auth-clients yes).
# Throwaway test material: 2 days of validity, unencrypted keys. Never
# commit what it makes.
set -euo pipefail
dir=${1:?usage: tls-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
[ -f ca.crt ] && [ -f server.crt ] && [ -f client.crt ] && exit 0
q() { "$@" >/dev/null 2>&1; }
q openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=redlock drill CA" \
  -keyout ca.key -out ca.crt
cert() {   # name CN SAN usage
  q openssl req -newkey rsa:2048 -nodes -subj "/CN=$2" -keyout "$1.key" -out "$1.csr"
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\n' "$3" "$4" >"$1.ext"
  q openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -days 2 -extfile "$1.ext" -out "$1.crt"
  rm -f "$1.csr" "$1.ext"
}
cert server localhost \
  'IP:127.0.0.1,DNS:localhost,DNS:redis1,DNS:redis2,DNS:redis3,DNS:redis4,DNS:redis5' \
  serverAuth
cert client redlock-client 'DNS:client' clientAuth
chmod 644 ./*.key   # the containers' redis user must read them
echo "$dir"
