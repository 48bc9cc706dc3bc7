#!/usr/bin/env bash
# Boots a throw-away QEMU VM with a given NUMA topology, runs one command in it and hands back
# the command's stdout (on stdout), stderr (on stderr) and exit status (as this script's).
#
#   tools/vm/boot.sh --nodes 2:256,2:256,0:256 [--dist 10,20,30/20,10,30/30,30,10] \
#       [--file HOST:GUEST]... [--locus PATH] [--timeout SECS] -- locus topo
#
#   --nodes    one CPUS:MIB entry per node, in node-id order; CPUS 0 makes a memory-only node.
#              CPUs are numbered contiguously: node 0 gets 0..CPUS0-1, node 1 the next, …
#   --dist     the full distance matrix, rows separated by '/' (default: 10 local, 20 remote)
#   --file     copies a host file into the guest (parent folders are made); repeatable
#   --locus    the static locus binary to install as /bin/locus
#              (default: target/x86_64-unknown-linux-gnu/release/locus; `make static` builds it)
#   --timeout  host-side limit in seconds for the whole boot (default 120)
#
# The guest is busybox + /init in an uncompressed newc initramfs on the cached cloud kernel
# (tools/vm/setup.sh fetches it into $LOCUS_VM_CACHE, default target/vm). /init runs the command
# with stdin from /dev/null, then prints its stdout and stderr (base64, so every byte survives)
# between marker lines that carry a random nonce, so nothing the kernel or the command prints
# can fake the exit status. LOCUS_VM_SERIAL=1 also copies the whole serial log to stderr;
# LOCUS_VM_TCG=1 forces TCG where KVM would be used.
#
# Exit status: the command's; 124 on host timeout; 125 when the VM gave no exit marker
# (the serial log is then printed on stderr); 2 for bad arguments or missing tools.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${LOCUS_VM_CACHE:-$ROOT/target/vm}"
KERNEL="$CACHE/vmlinuz"
LOCUS="$ROOT/target/x86_64-unknown-linux-gnu/release/locus"
NODES=""
DIST=""
TIMEOUT=120
FILES=()

die() { echo "vm boot: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --nodes) NODES="$2"; shift 2 ;;
        --dist) DIST="$2"; shift 2 ;;
        --file) FILES+=("$2"); shift 2 ;;
        --locus) LOCUS="$2"; shift 2 ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        --) shift; break ;;
        *) die "unknown argument '$1' (see the header of $0)" ;;
    esac
done
[ $# -gt 0 ] || die "no guest command after --"
[ -n "$NODES" ] || die "--nodes is required"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 missing; run tools/vm/setup.sh"
command -v cpio >/dev/null || die "cpio missing; run tools/vm/setup.sh"
[ -x /bin/busybox ] || die "/bin/busybox (busybox-static) missing; run tools/vm/setup.sh"
[ -s "$KERNEL" ] || die "kernel $KERNEL missing; run tools/vm/setup.sh"
[ -x "$LOCUS" ] || die "static locus binary $LOCUS missing; run make static"

# ---- the QEMU topology arguments ----
IFS=',' read -r -a node_specs <<<"$NODES"
n_nodes=${#node_specs[@]}
qemu_numa=()
total_cpus=0
total_mib=0
for i in "${!node_specs[@]}"; do
    spec="${node_specs[$i]}"
    [[ "$spec" =~ ^([0-9]+):([0-9]+)$ ]] || die "bad node spec '$spec' (want CPUS:MIB)"
    cpus=${BASH_REMATCH[1]}
    mib=${BASH_REMATCH[2]}
    [ "$mib" -gt 0 ] || die "node $i needs memory"
    qemu_numa+=(-object "memory-backend-ram,size=${mib}M,id=m$i")
    if [ "$cpus" -gt 0 ]; then
        qemu_numa+=(-numa "node,nodeid=$i,cpus=$total_cpus-$((total_cpus + cpus - 1)),memdev=m$i")
    else
        qemu_numa+=(-numa "node,nodeid=$i,memdev=m$i")
    fi
    total_cpus=$((total_cpus + cpus))
    total_mib=$((total_mib + mib))
done
[ "$total_cpus" -gt 0 ] || die "no node has CPUs"
if [ -n "$DIST" ]; then
    IFS='/' read -r -a dist_rows <<<"$DIST"
    [ ${#dist_rows[@]} -eq "$n_nodes" ] || die "--dist needs $n_nodes rows"
fi
if [ "$n_nodes" -gt 1 ]; then
    for ((i = 0; i < n_nodes; i++)); do
        if [ -n "$DIST" ]; then
            IFS=',' read -r -a row <<<"${dist_rows[$i]}"
            [ ${#row[@]} -eq "$n_nodes" ] || die "--dist row $i needs $n_nodes entries"
        fi
        for ((j = 0; j < n_nodes; j++)); do
            [ "$i" -ne "$j" ] || continue
            val=20
            [ -z "$DIST" ] || val=${row[$j]}
            qemu_numa+=(-numa "dist,src=$i,dst=$j,val=$val")
        done
    done
fi

# ---- the initramfs ----
work="$(mktemp -d "${TMPDIR:-/tmp}/locus-vm.XXXXXX")"
trap 'rm -rf "$work"' EXIT
rootfs="$work/root"
mkdir -p "$rootfs"/{bin,dev,proc,sys,tmp}
cp /bin/busybox "$rootfs/bin/busybox"
ln -s busybox "$rootfs/bin/sh"
cp "$LOCUS" "$rootfs/bin/locus"
for f in ${FILES[@]+"${FILES[@]}"}; do
    host="${f%%:*}"
    guest="${f#*:}"
    [ "$host" != "$f" ] && [ "${guest#/}" != "$guest" ] || die "bad --file '$f' (want HOST:/GUEST)"
    [ -f "$host" ] || die "--file: no such file '$host'"
    mkdir -p "$rootfs$(dirname "$guest")"
    cp "$host" "$rootfs$guest"
done

# The command, each argument single-quoted for the guest's sh.
cmd=""
for a in "$@"; do
    cmd+=" '${a//\'/\'\\\'\'}'"
done
nonce="$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
marker="LOCUS-VM-$nonce"
cat >"$rootfs/init" <<INIT
#!/bin/sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox --install -s /bin
export PATH=/bin HOME=/tmp
exec </dev/null >/dev/console 2>&1
stty -F /dev/console -onlcr
cd /tmp
($cmd) >/tmp/out 2>/tmp/err
rc=\$?
echo "$marker STDOUT"
base64 /tmp/out
echo "$marker STDERR"
base64 /tmp/err
echo "$marker EXIT \$rc"
stty -F /dev/console >/dev/null
poweroff -f
INIT
chmod +x "$rootfs/init"
(cd "$rootfs" && find . -print0 | cpio --null -o -H newc --quiet) >"$work/initrd.cpio"

# ---- the boot ----
# No vmx/svm: /dev/kvm may exist but be a software hypervisor that crawls and crashes; use TCG.
if grep -qE '\b(vmx|svm)\b' /proc/cpuinfo && [ -w /dev/kvm ] && [ -z "${LOCUS_VM_TCG:-}" ]; then
    accel=(-accel kvm -cpu host)
else
    accel=(-accel tcg -cpu max)
fi
serial="$work/serial.log"
start=$(date +%s.%N)
set +e
timeout --kill-after=5 "$TIMEOUT" qemu-system-x86_64 "${accel[@]}" -machine pc -no-user-config \
    -nodefaults -display none -serial "file:$serial" -monitor none -no-reboot \
    -m "${total_mib}M" -smp "$total_cpus,sockets=$total_cpus,cores=1,threads=1" \
    "${qemu_numa[@]}" -kernel "$KERNEL" -initrd "$work/initrd.cpio" \
    -append "console=ttyS0 quiet panic=-1 nokaslr numa_balancing=disable" </dev/null >"$work/qemu.log" 2>&1
qrc=$?
set -e
secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
if [ "$qrc" -eq 124 ] || [ "$qrc" -eq 137 ]; then
    echo "vm boot: timed out after ${TIMEOUT}s; serial log:" >&2
    cat "$serial" >&2 2>/dev/null || true
    exit 124
fi
status="$(grep -a "^$marker EXIT " "$serial" | tail -1 | awk '{print $3}')"
if [ -z "$status" ]; then
    echo "vm boot: no exit marker (qemu status $qrc); qemu said:" >&2
    cat "$work/qemu.log" >&2
    echo "vm boot: serial log:" >&2
    cat "$serial" >&2 2>/dev/null || true
    exit 125
fi
[ -z "${LOCUS_VM_SERIAL:-}" ] || { echo "vm boot: serial log:" >&2; cat "$serial" >&2; }
# The sections are base64 so any bytes (NULs, no final newline) come back exactly.
awk -v m="$marker" '$0 == m " STDOUT" {on=1; next} $0 == m " STDERR" {on=0} on' "$serial" | base64 -d
awk -v m="$marker" '$0 == m " STDERR" {on=1; next} index($0, m " EXIT ") == 1 {on=0} on' "$serial" | base64 -d >&2
[ -n "${LOCUS_VM_QUIET:-}" ] || echo "vm boot: ${n_nodes} nodes, ${total_cpus} cpus, ${total_mib} MiB, ${accel[1]}: exit $status in ${secs}s" >&2
exit "$status"
