#!/bin/sh
# The VM tier's guest start-up, run by the image's PID 1 (/sbin/numadra-vm-init, written by
# tests/vm/build-image.sh) from the checkout it mounted at /run/numadra-vm/repo: mount what the
# checks need, run tests/vm/guest.py, power off. No systemd: the guest's cgroup v2 is mounted here.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
echo "numadra-vm: guest-init at $(cut -d' ' -f1 /proc/uptime) s uptime" >/dev/console
# no udev: load the drivers of the PCI devices as its coldplug would (the NIC's e1000e; the
# initramfs loaded only what the root needs)
cat /sys/bus/pci/devices/*/modalias | sort -u | xargs modprobe -a -q -b 2>/dev/null
echo "numadra-vm: PCI drivers loaded at $(cut -d' ' -f1 /proc/uptime) s uptime" >/dev/console
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
base=/run/numadra-vm
mkdir -p "$base/site" "$base/out"
opts=trans=virtio,version=9p2000.L,msize=262144
# the checkout and site-packages do not change while the guest runs: cache them (loose)
mount -t 9p -o "$opts,cache=loose,ro" site "$base/site"
mount -t 9p -o "$opts" out "$base/out"
cd "$base/repo" || exit 1
PYTHONPATH="$base/repo:$base/site" PYTHONDONTWRITEBYTECODE=1 \
	python3 -m tests.vm.guest "$base/out" >"$base/out/guest.log" 2>&1
echo "numadra-vm: guest exit $? at $(cut -d' ' -f1 /proc/uptime) s uptime" >/dev/console
umount "$base/out"
sync
echo o >/proc/sysrq-trigger
sleep 30
