#!/usr/bin/env bash
# FUSE requests per operation through `uext4 mount`, counted from the
# daemon's debug log (fuser logs every request it decodes at log=debug).
#
#   bench/request-counts.sh [EXTRA_MOUNT_OPTIONS]        (root; e.g. readdirplus=off)
#   bench/request-counts.sh tree [EXTRA_MOUNT_OPTIONS]   (root; the tree mode, below)
#
# An image made by mkfs.ext4 -d with a 10,000-entry directory and one
# 100-byte file is mounted with `-o log=debug,logfile=...`; each operation
# is preceded by a stat(1) of a unique absent name (its LOOKUP is the
# marker that starts the operation's count). Requests from other
# processes (a `df` somewhere: STATFS) land in whatever operation runs.
# Prints one line per operation: total, then per opcode. The image is
# checked with e2fsck -fn at the end. Uses target/debug/uext4 unless
# UEXT4 names another binary.
#
# Tree mode: a tar archive of FILES small files (default 2000, 100 B to
# 6 KB, in DIRS directories, default 4) is extracted into a fresh
# `uext4 mount` and into `uext4 mount-null` (TARGETS, default "uext4
# null"), then, each after the kernel dropped its dentries and inodes
# (`echo 2 > /proc/sys/vm/drop_caches`: a cold walk, as on a fresh
# mount), `find` (names only), `ls -lR`, `du -s` and `rm -rf` of the tree.
# Each target runs twice: once at log=debug for the requests per file
# (total and per opcode), once at log=warn for the daemon's CPU time per
# file (the sum of its threads' on-CPU time, /proc/PID/task/*/schedstat,
# around the operation; meaningful with a release build). Prints a
# markdown table and the uext4 image's e2fsck -fn.
set -u
cd "$(dirname "$0")/.."
bin=${UEXT4:-$PWD/target/debug/uext4}
[ "$(id -u)" = 0 ] || { echo "needs root (FUSE mounts)" >&2; exit 1; }
if [ "${1:-}" = tree ]; then
  extra=${2:-}
  files=${FILES:-2000}
  ndirs=${DIRS:-4}
  targets=${TARGETS:-uext4 null}
  d=$(mktemp -d /tmp/uext4-reqcount.XXXXXX)
  pid=""
  cleanup() {
    mountpoint -q "$d/mnt" && { umount "$d/mnt" || umount -l "$d/mnt"; }
    [ -n "$pid" ] && { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
    rm -rf "$d"
  }
  trap cleanup EXIT
  mkdir -p "$d/mnt" "$d/src"
  python3 -c "
import os, random
r = random.Random(1)
per = $files // $ndirs
for k in range($ndirs):
    os.makedirs(f'$d/src/d{k}')
    for i in range(per):
        open(f'$d/src/d{k}/file-{i:05d}', 'wb').write(r.randbytes(r.randrange(100, 6000)))"
  tar -C "$d/src" -cf "$d/tree.tar" .
  rm -rf "$d/src"
  m=$d/mnt
  # cpu_ns: the daemon's threads' time on CPU so far (ns).
  cpu_ns() { cat /proc/"$pid"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d", s}'; }
  mark() { stat "$m/.MARK-$1" >/dev/null 2>&1; }
  cold() { sync; echo 2 >/proc/sys/vm/drop_caches; sleep 0.5; }
  ops="tar_extract find ls_lR du rm_rf"
  run_op() {
    case $1 in
      tar_extract) tar -C "$m" -xf "$d/tree.tar" ;;
      find) find "$m" -name nothing-matches >/dev/null ;;
      ls_lR) ls -lR "$m" >/dev/null ;;
      du) du -s "$m" >/dev/null ;;
      rm_rf) rm -rf "$m"/d* ;;
    esac
  }
  : >"$d/results"
  for t in $targets; do
    for pass in count cpu; do
      if [ $pass = count ]; then log="log=debug,logfile=$d/log.$t"; else log=log=warn; fi
      if [ "$t" = uext4 ]; then
        rm -f "$d/img"
        mkfs.ext4 -q -F -b 4096 "$d/img" 512M
        "$bin" mount "$d/img" "$m" -o "rw${extra:+,$extra},$log" --foreground 2>/dev/null &
      else
        "$bin" mount-null "$m" -o "rw${extra:+,$extra},$log" --foreground 2>/dev/null &
      fi
      pid=$!
      for _ in $(seq 100); do mountpoint -q "$m" && break; sleep 0.1; done
      mountpoint -q "$m" || { echo "$t: mount failed" >&2; exit 1; }
      sleep 0.3
      for op in $ops; do
        [ "$op" = tar_extract ] || cold
        mark "$op"
        c0=$(cpu_ns)
        run_op "$op"
        c1=$(cpu_ns)
        mark "end_$op"
        [ $pass = cpu ] && echo "$t $op cpu $(( (c1 - c0) / files ))" >>"$d/results"
      done
      # Retried: a process scanning /tmp may hold the mount for a moment.
      for _ in $(seq 50); do umount "$m" 2>/dev/null && break; sleep 0.2; done
      mountpoint -q "$m" && umount -l "$m"
      wait "$pid"
      pid=""
      if [ "$t" = uext4 ] && [ $pass = cpu ]; then
        if e2fsck -fn "$d/img" >/dev/null 2>&1; then echo "uext4 image: e2fsck -fn clean" >&2; else echo "uext4 image: e2fsck -fn NOT clean" >&2; fi
      fi
    done
    python3 - "$d/log.$t" "$t" "$files" >>"$d/results" <<'PY'
import collections, re, sys
log, target, files = sys.argv[1], sys.argv[2], int(sys.argv[3])
cur, counts = None, collections.OrderedDict()
for line in open(log, errors="replace"):
    m = re.search(r"FUSE\(\s*\d+\) ino 0x[0-9a-f]+ ([A-Z_0-9]+)\b", line)
    if not m:
        continue
    mk = re.search(r'\.MARK-([\w.]+)"', line)
    if mk:
        cur = None if mk.group(1).startswith("end_") else mk.group(1)
        if cur:
            counts.setdefault(cur, collections.Counter())
    elif cur:
        counts[cur][m.group(1)] += 1
for op, c in counts.items():
    per = ", ".join(f"{o} {n / files:.2f}" for o, n in c.most_common())
    print(f"{target} {op} req {sum(c.values()) / files:.2f} {per}")
PY
  done
  echo "$files files in $ndirs directories; options: rw${extra:+,$extra}; $(basename "$bin") at $bin"
  echo
  echo "| operation | target | requests/file | daemon CPU us/file | requests per file by opcode |"
  echo "|---|---|---:|---:|---|"
  for op in $ops; do
    for t in $targets; do
      req=$(awk -v t="$t" -v o="$op" '$1 == t && $2 == o && $3 == "req" {print $4}' "$d/results")
      per=$(awk -v t="$t" -v o="$op" '$1 == t && $2 == o && $3 == "req" {$1 = $2 = $3 = $4 = ""; sub(/^ +/, ""); print}' "$d/results")
      cpu=$(awk -v t="$t" -v o="$op" '$1 == t && $2 == o && $3 == "cpu" {printf "%.1f", $4 / 1000}' "$d/results")
      echo "| $op | $t | $req | $cpu | $per |"
    done
  done
  exit 0
fi
extra=${1:-}
d=$(mktemp -d /tmp/uext4-reqcount.XXXXXX)
trap 'mountpoint -q "$d/mnt" && umount "$d/mnt"; rm -rf "$d"' EXIT
mkdir -p "$d/mnt" "$d/tree/big"
python3 -c "
import sys
for i in range(10000): open(f'$d/tree/big/f{i:05d}', 'w').close()
open('$d/tree/existing', 'w').write('x' * 100)"
mkfs.ext4 -q -F -b 4096 -d "$d/tree" "$d/img" 512M
"$bin" mount "$d/img" "$d/mnt" -o "rw${extra:+,$extra},log=debug,logfile=$d/log" --foreground 2>/dev/null &
pid=$!
for _ in $(seq 100); do mountpoint -q "$d/mnt" && break; sleep 0.1; done
m=$d/mnt
mark() { stat "$m/.MARK-$1" >/dev/null 2>&1; }
sleep 0.3
mark stat_first_time; stat "$m/existing" >/dev/null
mark stat_again; stat "$m/existing" >/dev/null
sleep 1.2
mark stat_after_1.2s; stat "$m/existing" >/dev/null
create() { python3 -c "
import os; fd = os.open('$1', os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644); os.write(fd, b'a' * 4096); os.close(fd)"; }
mark create_write4k_close; create "$m/new1"
mark create_write4k_close_2nd; create "$m/new2"
mark rename; mv "$m/new1" "$m/new1r"
mark unlink_after_rename; rm "$m/new1r"
mark unlink; rm "$m/new2"
mark mkdir; mkdir "$m/dir1"
mark ls_U_10k; ls -U "$m/big" >/dev/null
mark ls_l_10k; ls -l "$m/big" >/dev/null
mark ls_l_10k_again; ls -l "$m/big" >/dev/null
w5() { python3 -c "
import os
os.makedirs('$m/w5', exist_ok=True)
data = os.urandom(65536)
for n in range(100):
    fd = os.open('$m/w5/$1%d' % n, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, data)
    if $2: os.fsync(fd)
    os.close(fd)"; }
# An existing 1 MiB file: 100 random 8 KiB overwrites through one open,
# then a read of the whole file through another (W2's two sides).
python3 -c "open('$m/db', 'wb').write(b'z' * (1 << 20))"
mark overwrite_8k_x100_close; python3 -c "
import os, random
fd = os.open('$m/db', os.O_WRONLY); r = random.Random(1)
for _ in range(100): os.pwrite(fd, b'y' * 8192, r.randrange(128) * 8192)
os.close(fd)"
mark read_1m_after_writes; cat "$m/db" >/dev/null
mark w5_100_files_64k; w5 f 0
mark w5_100_files_64k_fsync; w5 g 1
mark end
sleep 0.5
umount "$m"
wait "$pid"
python3 - "$d/log" <<'PY'
import collections, re, sys
cur, counts = None, collections.OrderedDict()
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"FUSE\(\s*\d+\) ino 0x[0-9a-f]+ ([A-Z_0-9]+)\b", line)
    if not m:
        continue
    mk = re.search(r'\.MARK-([\w.]+)"', line)
    if mk:
        cur = mk.group(1)
        counts.setdefault(cur, collections.Counter())
    elif cur:
        counts[cur][m.group(1)] += 1
for k, c in counts.items():
    if k != "end":
        print(f"{k:28s} {sum(c.values()):6d}  " + ", ".join(f"{o} {n}" for o, n in c.most_common()))
PY
if e2fsck -fn "$d/img" >/dev/null 2>&1; then echo "e2fsck -fn: clean"; else echo "e2fsck -fn: NOT clean"; fi
