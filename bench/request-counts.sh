#!/usr/bin/env bash
# FUSE requests per operation through `uext4 mount`, counted from the
# daemon's debug log (fuser logs every request it decodes at log=debug).
#
#   bench/request-counts.sh [EXTRA_MOUNT_OPTIONS]     (root; e.g. readdirplus=off)
#
# An image made by mkfs.ext4 -d with a 10,000-entry directory and one
# 100-byte file is mounted with `-o log=debug,logfile=...`; each operation
# is preceded by a stat(1) of a unique absent name (its LOOKUP is the
# marker that starts the operation's count). Requests from other
# processes (a `df` somewhere: STATFS) land in whatever operation runs.
# Prints one line per operation: total, then per opcode. The image is
# checked with e2fsck -fn at the end. Uses target/debug/uext4 unless
# UEXT4 names another binary.
set -u
cd "$(dirname "$0")/.."
bin=${UEXT4:-$PWD/target/debug/uext4}
extra=${1:-}
[ "$(id -u)" = 0 ] || { echo "needs root (FUSE mounts)" >&2; exit 1; }
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
