#!/usr/bin/env bash
# Build the guest of the VM tier (tests/vm/README.md): a Debian bookworm root filesystem made
# with debootstrap (minbase + python3 + Debian's own kernel and initramfs), packed as an ext4 disk
# image, into a cache directory outside the repo:
#   ${NUMADRA_VM_CACHE:-$HOME/.cache/numadra-vm}/{vmlinuz,initrd.img,rootfs.ext4,.stamp}
# The guest boots that kernel and initramfs with the image as its virtio-blk root (read-only,
# QEMU snapshot mode: the cached image never changes) and runs /sbin/numadra-vm-init as PID 1.
#
# Usage: tests/vm/build-image.sh [--force] [--check]
#   --force  rebuild even when the stamp matches
#   --check  build nothing; exit 0 when the image is up to date, 1 otherwise
#
# Up to date means: the three files exist and .stamp holds the sha256 of this script (which names
# every package and the guest init). Exit codes: 0 ok, 3 a prerequisite is missing (not root, no
# debootstrap or mkfs.ext4: nothing was tried), 4 the Debian mirror failed us, 1 a real failure.
#
# Environment: NUMADRA_VM_CACHE (output dir), DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

cache="${NUMADRA_VM_CACHE:-$HOME/.cache/numadra-vm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
stamp="$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)"
# python3 runs numadra; libudev1 is what pyudev loads; linux-image-amd64 brings the guest kernel,
# initramfs-tools its initramfs (virtio_blk, ext4; zstd compresses it, quicker to unpack than
# gzip under emulation); kmod loads the 9p modules of the shares.
packages=python3,libudev1,kmod,zstd,initramfs-tools,linux-image-amd64

force=0 check=0
for a in "$@"; do
	case "$a" in
	--force) force=1 ;;
	--check) check=1 ;;
	-h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "build-image.sh: unknown argument: $a" >&2; exit 2 ;;
	esac
done

log() { printf 'vm build-image: %s\n' "$*" >&2; }

up_to_date() {
	[[ -s "$cache/vmlinuz" && -s "$cache/initrd.img" && -s "$cache/rootfs.ext4" ]] \
		&& [[ "$(cat "$cache/.stamp" 2>/dev/null)" == "$stamp" ]]
}

if [[ "$force" == 0 ]] && up_to_date; then
	log "up to date in $cache"
	exit 0
fi
if [[ "$check" == 1 ]]; then
	log "not up to date in $cache"
	exit 1
fi
if [[ "$(id -u)" != 0 ]]; then
	log "needs root (debootstrap)"
	exit 3
fi
for tool in debootstrap mkfs.ext4; do
	command -v "$tool" >/dev/null || { log "$tool not found (apt-get install -y debootstrap e2fsprogs)"; exit 3; }
done

t0=$SECONDS
mkdir -p "$cache"
work="$(mktemp -d "$cache/build.XXXXXX")"
# the chroot's /proc is mounted while its initramfs is rebuilt: unmount before removing anything
# (set -e holds in the trap too: a failed umount, the usual case, must not skip the rm)
trap 'umount "$work/rootfs/proc" 2>/dev/null || true; rm -rf --one-file-system "$work"' EXIT
rootfs="$work/rootfs"

log "debootstrap bookworm ($packages) into $rootfs"
debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" "$mirror" \
	>"$work/debootstrap.log" 2>&1 || { tail -n 20 "$work/debootstrap.log" >&2; exit 4; }
log "debootstrap done in $((SECONDS - t0)) s"

# The package built an initramfs with MODULES=most (29 MiB): under TCG unpacking it alone takes
# 12 s. The guest needs four modules to mount its root; the rest come from the root filesystem.
printf 'MODULES=list\n' >"$rootfs/etc/initramfs-tools/conf.d/numadra-vm"
printf '%s\n' virtio_pci virtio_blk ext4 crc32c_generic >>"$rootfs/etc/initramfs-tools/modules"
mount -t proc proc "$rootfs/proc"
chroot "$rootfs" update-initramfs -u -k all >"$work/initramfs.log" 2>&1 \
	|| { tail -n 20 "$work/initramfs.log" >&2; exit 1; }
umount "$rootfs/proc"

kernel="$(find "$rootfs/boot" -maxdepth 1 -name 'vmlinuz-*' | sort | tail -n1)"
initrd="$(find "$rootfs/boot" -maxdepth 1 -name 'initrd.img-*' | sort | tail -n1)"
[[ -n "$kernel" && -n "$initrd" ]] || { log "no kernel or initramfs in $rootfs/boot"; exit 1; }

# PID 1 of the guest: mount the host's checkout (9p tag "repo") and hand over to
# tests/vm/guest-init.sh in it. Everything else the tier does lives in the repo, so changing a
# check never rebuilds the image.
cat >"$rootfs/sbin/numadra-vm-init" <<'INIT'
#!/bin/sh
# numadra VM tier: PID 1 (written by tests/vm/build-image.sh); the rest is the checkout's
# tests/vm/guest-init.sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/numadra-vm/repo
modprobe -a 9p 9pnet_virtio
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose,ro repo /run/numadra-vm/repo \
	&& exec /bin/sh /run/numadra-vm/repo/tests/vm/guest-init.sh
echo "numadra-vm: cannot mount the checkout (9p tag repo) or run its guest-init.sh" >/dev/console
echo o >/proc/sysrq-trigger
sleep 30
INIT
chmod 0755 "$rootfs/sbin/numadra-vm-init"
printf 'numadra-vm\n' >"$rootfs/etc/hostname"

cp "$kernel" "$work/vmlinuz"
cp "$initrd" "$work/initrd.img"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*
size_mb=$(($(du -sm "$rootfs" | cut -f1) * 5 / 4 + 64))
log "mkfs.ext4 -d ($size_mb MiB)"
mkfs.ext4 -q -F -L numadra-vm -d "$rootfs" "$work/rootfs.ext4" "${size_mb}M"

for f in vmlinuz initrd.img rootfs.ext4; do mv -f "$work/$f" "$cache/$f"; done
printf '%s\n' "$stamp" >"$cache/.stamp"
log "built in $((SECONDS - t0)) s: $cache ($(basename "$kernel"))"
