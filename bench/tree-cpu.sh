#!/bin/bash
# Daemon CPU of a plain tar extract and rm -rf of /usr/include and /usr/share/man through
# `uext4 mount` (or `uext4 mount-null` with "null" as the second argument), FUSE over
# io_uring, a 4 GiB image in /dev/shm; CPU from /proc/PID/stat around each step (root).
# usage: bench/tree-cpu.sh BIN [null]  -> prints "tar wall cpu rm wall cpu" (daemon CPU seconds from /proc/PID/stat)
set -euo pipefail
bin=$1; w=/dev/shm/ab; img=$w/img; mnt=$w/mnt
[ -f $w/tree.tar ] || tar -C / -cf $w/tree.tar usr/include usr/share/man
mkdir -p $mnt; rm -f $img; truncate -s 4G $img
mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 $img
echo Y > /sys/module/fuse/parameters/enable_uring
if [ "${2:-}" = null ]; then
  $bin mount-null $mnt -o rw,transport=uring,log=warn --foreground 2>>$w/log &
else
  $bin mount $img $mnt -o rw,transport=uring,log=warn --foreground 2>>$w/log &
fi
pid=$!
for i in $(seq 1 300); do mountpoint -q $mnt && break; sleep 0.1; done
tick=$(getconf CLK_TCK)
cpu() { awk -v t=$tick '{print ($14+$15)/t}' /proc/$pid/stat; }
c0=$(cpu); t0=$(date +%s.%N)
tar -C $mnt -xf $w/tree.tar; sync -f $mnt/usr
t1=$(date +%s.%N); c1=$(cpu)
rm -rf $mnt/usr; sync -f $mnt
t2=$(date +%s.%N); sleep 2; c2=$(cpu)  # FORGETs (deletions) may still be served after rm returns
umount $mnt; wait $pid || true
if [ "${2:-}" = null ]; then ok=n/a; else
  e2fsck -fn $img >/dev/null 2>&1 && ok=clean || ok=UNCLEAN
fi
n=$(tar -tf $w/tree.tar | wc -l)
echo "$n entries: tar wall $(echo "$t1-$t0"|bc) s cpu $(echo "$c1-$c0"|bc) s; rm wall $(echo "$t2-$t1"|bc) s cpu $(echo "$c2-$c1"|bc) s; fsck $ok"
