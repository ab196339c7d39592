#!/bin/sh
# Certificates for a SASL_SSL or SSL broker, made with openssl alone (docs/how-to/security.md):
#
#   deploy/secure/make-certs.sh [-c CLIENT]... [-d DAYS] DIR HOST [HOST...]
#
# In DIR: a CA (ca.crt, ca.key), made once and reused on later runs so clients keep
# trusting it; a broker certificate (broker.crt, broker.key) valid for every HOST (DNS
# names or IP addresses, the first one also its CN), made anew on every run; with -c, a
# client certificate CLIENT.crt/CLIENT.key whose CN is CLIENT (principal User:CLIENT on
# an SSL listener with --ssl-client-auth). Keys are EC P-256, readable by their owner only.
# The certificates pass Python's VERIFY_X509_STRICT (the default from Python 3.13).
# A CA of your own is better than this one in production; the broker takes any PEM files.
set -eu

usage() {
    echo "usage: $0 [-c CLIENT]... [-d DAYS] DIR HOST [HOST...]" >&2
    exit 2
}

clients=""
days=365
while getopts "c:d:h" opt; do
    case "$opt" in
        c) case "$OPTARG" in
               ca | broker | "" | *[!A-Za-z0-9._-]*)
                   echo "$0: -c $OPTARG: a client name is letters, digits, . _ -, not ca or broker" >&2
                   exit 2 ;;
           esac
           clients="$clients $OPTARG" ;;
        d) days="$OPTARG" ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ "$#" -ge 2 ] || usage
dir="$1"
shift
command -v openssl >/dev/null 2>&1 || { echo "$0: openssl not found" >&2; exit 1; }

umask 077
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# quiet COMMAND...: openssl's progress output hidden, its errors shown when it fails.
quiet() {
    "$@" 2>"$tmp/stderr" || { cat "$tmp/stderr" >&2; exit 1; }
}

# The subjectAltName list: an IP address as IP:, anything else as DNS:.
san=""
for host in "$@"; do
    case "$host" in
        *[!0-9.]*) entry="DNS:$host" ;;
        *) entry="IP:$host" ;;
    esac
    case "$host" in *:*) entry="IP:$host" ;; esac  # IPv6
    san="${san:+$san,}$entry"
done

if [ ! -f "$dir/ca.key" ]; then
    quiet openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
        -subj "/CN=groupwire CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -keyout "$dir/ca.key" -out "$dir/ca.crt"
    echo "$dir/ca.crt: a new CA"
fi

# sign NAME CN EXTENDED_KEY_USAGE [SAN]: NAME.key and NAME.crt, signed by the CA.
sign() {
    quiet openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$2" \
        -keyout "$dir/$1.key" -out "$tmp/$1.csr"
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature"
        echo "extendedKeyUsage=$3"
        echo "subjectKeyIdentifier=hash"
        echo "authorityKeyIdentifier=keyid,issuer"
        if [ -n "${4:-}" ]; then echo "subjectAltName=$4"; fi
    } > "$tmp/$1.ext"
    quiet openssl x509 -req -in "$tmp/$1.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
        -set_serial "0x$(openssl rand -hex 16)" -days "$days" -extfile "$tmp/$1.ext" \
        -out "$dir/$1.crt"
    chmod 0644 "$dir/$1.crt"
}

chmod 0644 "$dir/ca.crt"
sign broker "$1" serverAuth "$san"
echo "$dir/broker.crt: for $san"
for client in $clients; do
    sign "$client" "$client" clientAuth
    echo "$dir/$client.crt: a client certificate, CN=$client"
done
