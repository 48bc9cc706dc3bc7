#!/usr/bin/env bash
# Installs what the multi-node VM tests need and caches the guest kernel.
#
#   qemu-system-x86_64  Debian qemu-system-x86 (from bookworm-backports where the stable one
#                       would remove the image's backported qemu-utils)
#   busybox (static)    busybox-static, the guest's userland
#   cpio                builds the initramfs
#   vmlinuz             the Debian cloud kernel, extracted (not installed) into $LOCUS_VM_CACHE
#
# Idempotent: when everything is present it only checks and exits (well under a second).
# Needs root (or sudo) only for the apt steps. See ../../../shared/docs/numa-vm-notes.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE="${LOCUS_VM_CACHE:-$PWD/target/vm}"
KERNEL="$CACHE/vmlinuz"

have_tools() {
    command -v qemu-system-x86_64 >/dev/null && command -v cpio >/dev/null &&
        [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1
}

if have_tools && [ -s "$KERNEL" ]; then
    echo "vm setup: ready (qemu $(qemu-system-x86_64 --version | head -1 | awk '{print $4}'), kernel $(cat "$CACHE/vmlinuz.version" 2>/dev/null || echo '?'))"
    exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then SUDO="sudo"; else
        echo "vm setup: needs root or sudo for apt-get (packages: qemu-system-x86 busybox-static cpio)" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
apt_updated=""
apt_update() { [ -n "$apt_updated" ] || { $SUDO apt-get update -q; apt_updated=1; }; }

if ! have_tools; then
    # The backported qemu-utils on this image needs a matching qemu-system-x86.
    codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
    if [ -n "$codename" ] && ! grep -rqs "${codename}-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
        echo "vm setup: adding ${codename}-backports to apt sources"
        printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$codename" | $SUDO tee /etc/apt/sources.list.d/backports.sources >/dev/null
    fi
    apt_update
    pkgs=(qemu-system-x86 busybox-static cpio)
    install=($SUDO apt-get install -y -q --no-install-recommends --no-remove)
    if ! "${install[@]}" "${pkgs[@]}"; then
        echo "vm setup: retrying from ${codename}-backports"
        "${install[@]}" -t "${codename}-backports" "${pkgs[@]}"
    fi
    have_tools || { echo "vm setup: tools still missing after apt-get" >&2; exit 1; }
fi

if [ ! -s "$KERNEL" ]; then
    apt_update
    mkdir -p "$CACHE"
    tmp="$(mktemp -d)"
    chmod 755 "$tmp" # apt-get download drops to the _apt user
    trap 'rm -rf "$tmp"' EXIT
    # The metapackage names the versioned image; download that and take only vmlinuz.
    img="$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')"
    [ -n "$img" ] || { echo "vm setup: cannot resolve linux-image-cloud-amd64" >&2; exit 1; }
    (cd "$tmp" && apt-get download -q "$img")
    dpkg-deb --fsys-tarfile "$tmp"/"$img"_*.deb | tar -x -C "$tmp" --wildcards './boot/vmlinuz-*'
    cp "$tmp"/boot/vmlinuz-* "$KERNEL.tmp"
    mv "$KERNEL.tmp" "$KERNEL"
    echo "$img" >"$CACHE/vmlinuz.version"
    echo "vm setup: kernel $img -> $KERNEL"
fi
echo "vm setup: done"
