#!/usr/bin/env bash
# Builds the epp image with no image registry (make image): Debian's mmdebstrap makes a distroless-like
# base from Debian's own packages (imported once as $BASE_IMAGE), and podman puts the stripped release
# binary on it (deploy/image/Containerfile). Needs root and Debian's mmdebstrap, podman and runc (.ci/run
# installs them). Prints the image's name and size.
#   usage: scripts/build-image.sh            (EPP_IMAGE=localhost/epp:<Cargo.toml version> by default)
#          REBUILD_BASE=1 scripts/build-image.sh   to remake the base
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
EPP_IMAGE=${EPP_IMAGE:-localhost/epp:$VERSION}
# The host's own Debian release: the binary is built against the host's glibc, so the image carries the
# same one (an older base would lack the symbol versions it needs).
SUITE=${DEBIAN_SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")}
BASE_IMAGE=${BASE_IMAGE:-localhost/epp-base:$SUITE}
# The Debian mirror apt already uses on this machine (the only package source it may reach).
MIRROR=${DEBIAN_MIRROR:-$(sed -n 's/^URIs: *\([^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
# glibc and libgcc (epp links them dynamically), CA certificates (HTTPS scrapes), zone data, /etc/services.
PACKAGES=libc6,libgcc-s1,ca-certificates,tzdata,netbase,base-files

for tool in mmdebstrap podman strip; do
  command -v "$tool" >/dev/null || { echo "build-image: $tool is missing (apt-get install mmdebstrap podman runc binutils)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

build_base() {
  echo "== base: mmdebstrap $SUITE ($PACKAGES) from $MIRROR"
  local root=$work/root
  # `extract` unpacks the packages and runs none of their scripts: no shell or dpkg in the image, so what
  # the scripts would have made (the CA bundle, the users) is written here.
  mmdebstrap --quiet --variant=extract --include="$PACKAGES" "$SUITE" "$root" "$MIRROR"
  mkdir -p "$root/etc/ssl/certs" "$root/home/nonroot" "$root/tmp"
  cat "$root"/usr/share/ca-certificates/mozilla/*.crt >"$root/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$root/etc/group"
  chown 65532:65532 "$root/home/nonroot"
  chmod 1777 "$root/tmp"
  rm -rf "$root"/usr/share/{doc,man,info,lintian} "$root"/var/cache/* "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | podman import --quiet - "$BASE_IMAGE" >/dev/null
}

if [ "${REBUILD_BASE:-0}" = 1 ] || ! podman image exists "$BASE_IMAGE"; then build_base; fi

echo "== epp and epp-pd-sidecar: cargo build --release --locked"
cargo build --release --locked -p epp --bin epp -p epp-pd-sidecar --bin epp-pd-sidecar
mkdir -p "$work/context"
strip -o "$work/context/epp" "$TARGET_DIR/release/epp"
# The P/D decode sidecar ships in the same image: a decode pod runs it with command /epp-pd-sidecar.
strip -o "$work/context/epp-pd-sidecar" "$TARGET_DIR/release/epp-pd-sidecar"
podman build --quiet --pull=never --build-arg BASE="$BASE_IMAGE" --build-arg VERSION="$VERSION" \
  -f deploy/image/Containerfile -t "$EPP_IMAGE" "$work/context" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$EPP_IMAGE")
echo "built $EPP_IMAGE: $((size / 1000000)) MB (binary $(( $(stat -c %s "$work/context/epp") / 1000000 )) MB)"
