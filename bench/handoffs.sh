#!/usr/bin/env bash
# Hand-offs per operation through the mount: what each request costs in
# context switches, system calls and thread hand-offs, counted (robust under
# load, unlike the rates), for uext4 and the null backend on both transports.
#
#   bench/handoffs.sh [SECONDS]              (root; default 4 s per run)
#
# Environment: TARGETS (default "uext4 null"), TRANSPORTS (default "dev uring"),
#   WORKLOADS (default "stat read w2-1 w2-2 w5-2 cold-seq cold-rand"), DIR (default /dev/shm/handoffs),
#   SIZE (image size, default 2G), UEXT4 (binary, default target/release/uext4, built
#   when missing), PERF_RECORD (a target/transport/workload, e.g. uext4/uring/w5-2: that
#   run is also recorded with `perf record -g` on the daemon; perf.data kept in DIR),
#   MALLOC (1: count the daemon's mallocs, see below).
#
# Workloads, each on a fresh mount (a fresh image for uext4):
#   stat    one process, stat(2) of one file in a loop, mounted attr_timeout=0 (every
#           call a GETATTR; as `uext4 bench requests`)
#   read    one process, 4 KiB pread(2) at offset 0 in a loop, mounted direct_io (every
#           call a READ of cached data)
#   w2-J    bench/fio-compare.sh's W2: 8 KiB buffered randread + randwrite on one
#           64 MiB file (written before the count starts), J readers + J writers
#   w5-J    bench/fio-compare.sh's W5: J processes create 4 KiB files (O_CREAT|O_EXCL,
#           one write, close) in 16 directories each
#   cold-seq   a 256 MiB file read once sequentially (1 MiB reads; an op is 1 MiB) with
#           neither the kernel's nor the daemon's cache holding it (uext4 mounted again
#           after writing it; the null backend's data is always in memory)
#   cold-rand  fio 4 KiB buffered random reads of that file, one job, uncached at first
# Per operation (an fio I/O, a file created, a stat or a read) it prints:
#   req     FUSE requests the kernel sent on the connection (tracepoint
#           fuse:fuse_request_send filtered on the connection, `perf stat -a`)
#   dcs     the daemon's context switches, voluntary + involuntary, from
#           /proc/PID/task/*/status before and after; "q" those of the threads that
#           receive requests (io_uring queue threads, or the /dev/fuse workers), "pool"
#           those of the io_uring slow-request pool
#   ccs     the callers' (fio's or python's) context switches, voluntary + involuntary
#           (getrusage of the workload's process tree)
#   sys     the daemon's system calls (`perf stat -p` on raw_syscalls:sys_enter), and of
#           them futex calls
#   pool    requests the io_uring queues lent to the pool (and the eventfd wake-ups that
#           brought them back), or on /dev/fuse the parks and unparks of workers, from
#           the daemon's own counts (logged when the session ends)
#   malloc  with MALLOC=1: the daemon's calls of libc's malloc (a uprobe, `perf probe -x LIBC
#           malloc`, added for the run and removed at the end; "-" without). The uprobe's
#           trap changes the timing, so the other counts of such a run are not comparable
#   cpu     the daemon's CPU time (user + system, /proc/PID/task/*/stat) in us
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
secs=${1:-4}
targets=${TARGETS:-uext4 null}
transports=${TRANSPORTS:-dev uring}
workloads=${WORKLOADS:-stat read w2-1 w2-2 w5-2 cold-seq cold-rand}
dir=${DIR:-/dev/shm/handoffs}
size=${SIZE:-2G}
bin=${UEXT4:-$root/target/release/uext4}
perf_record=${PERF_RECORD:-}
[ "$(id -u)" = 0 ] || { echo "needs root (FUSE mounts, perf -a)" >&2; exit 1; }
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
command -v fio >/dev/null || { apt-get update -qq && apt-get install -y -qq fio >/dev/null; }
command -v perf >/dev/null || { apt-get update -qq && apt-get install -y -qq linux-perf >/dev/null; }
[ -x "$bin" ] || cargo build --release --locked -q -p uext4-cli

uring_param=/sys/module/fuse/parameters/enable_uring
uring_was=$(cat "$uring_param" 2>/dev/null || true)
mkdir -p "$dir/mnt"
mnt=$dir/mnt
img=$dir/img
pid=""
perfpids=()
probe=""
malloc_ev=()
if [ "${MALLOC:-0}" = 1 ]; then
  libc=$(ldd "$bin" | awk '/libc\.so/ { print $3 }')
  if [ -n "$libc" ] && ! perf probe -l 2>/dev/null | grep -q "probe_libc:malloc "; then
    perf probe -q -x "$libc" -a malloc 2>/dev/null && probe=added
  fi
  perf probe -l 2>/dev/null | grep -q "probe_libc:malloc " && malloc_ev=(-e probe_libc:malloc)
fi
cleanup() {
  if [ "$probe" = added ]; then perf probe -q -d probe_libc:malloc 2>/dev/null || true; fi
  for p in "${perfpids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  if mountpoint -q "$mnt"; then umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; fi
  if [ -n "$pid" ]; then wait "$pid" 2>/dev/null || true; fi
  if [ -n "$uring_was" ]; then echo "$uring_was" >"$uring_param" 2>/dev/null || true; fi
  rm -f "$img"
}
trap cleanup EXIT

cat >"$dir/rusage.py" <<'PY'
# Runs a command; prints its process tree's context switches and CPU time.
import os, resource, subprocess, sys
rc = subprocess.call(sys.argv[2:], stdout=open(sys.argv[1], "w"))
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{r.ru_nvcsw} {r.ru_nivcsw} {r.ru_utime + r.ru_stime:.6f}", file=sys.stderr)
sys.exit(rc)
PY
cat >"$dir/loop.py" <<'PY'
# stat or read of one file in a loop for SECS; prints the count.
import os, sys, time
op, path, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
fd = os.open(path, os.O_RDONLY)
n, end = 0, time.monotonic() + secs
while True:
    for _ in range(256):
        if op == "stat":
            os.stat(path)
        else:
            os.pread(fd, 4096, 0)
    n += 256
    if time.monotonic() >= end:
        break
print(n)
PY
cat >"$dir/smallfiles.py" <<'PY'
# W5 as bench/fio-compare.sh: PROCS processes create 4 KiB files until SECS pass.
import multiprocessing as mp, os, sys, time
def worker(args):
    root, p, secs = args
    dirs = [os.path.join(root, f"p{p}", f"d{k}") for k in range(16)]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    data, n, end = os.urandom(4096), 0, time.monotonic() + secs
    while time.monotonic() < end:
        fd = os.open(os.path.join(dirs[n % 16], f"f{n}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        os.close(fd)
        n += 1
    return n
root, procs, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with mp.Pool(procs) as pool:
    print(sum(pool.map(worker, [(root, p, secs) for p in range(procs)])))
PY

# Per-thread-group context switches and CPU ticks of the daemon:
# "group vol invol ticks" lines (groups: q, pool, other).
snapshot() {
  local t comm g v n ticks
  for t in /proc/"$pid"/task/*; do
    comm=$(cat "$t/comm" 2>/dev/null) || continue
    case $comm in uring-q* | fuse-*) g=q ;; uring-slow*) g=pool ;; *) g=other ;; esac
    v=$(awk '/^voluntary_ctxt_switches/ { print $2 }' "$t/status" 2>/dev/null) || continue
    n=$(awk '/^nonvoluntary_ctxt_switches/ { print $2 }' "$t/status" 2>/dev/null) || continue
    ticks=$(sed 's/.*) //' "$t/stat" 2>/dev/null | awk '{ print $12 + $13 }') || continue
    echo "$g $v $n $ticks"
  done
}

# do_mount TARGET TRANSPORT OPTIONS [again]: "again" mounts the image as it is.
do_mount() {
  local t=$1 tr=$2 opts=$3 again=${4:-}
  echo "$tr" | grep -q uring && echo Y >"$uring_param"
  : >"$dir/daemon.log"
  if [ "$t" = uext4 ]; then
    if [ -z "$again" ]; then
      rm -f "$img"
      truncate -s "$size" "$img"
      mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 "$img"
    fi
    "$bin" mount "$img" "$mnt" -o "$opts,transport=$tr,log=info" --foreground 2>>"$dir/daemon.log" &
  else
    "$bin" mount-null "$mnt" -o "$opts,transport=$tr,log=info" --foreground 2>>"$dir/daemon.log" &
  fi
  pid=$!
  local _
  for _ in $(seq 1 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
  mountpoint -q "$mnt" || { echo "$t/$tr: mount failed" >&2; cat "$dir/daemon.log" >&2; exit 1; }
  if [ "$tr" = uring ]; then
    stat "$mnt" >/dev/null
    for _ in $(seq 1 50); do
      grep -q "requests arrive through the ring" "$dir/daemon.log" && return 0
      sleep 0.1
    done
    echo "$t/$tr: the daemon did not start io_uring" >&2
    exit 1
  fi
}

do_unmount() {
  local _
  for _ in $(seq 1 50); do umount "$mnt" 2>/dev/null && break; sleep 0.2; done
  mountpoint -q "$mnt" && umount -l "$mnt"
  wait "$pid" || true
  pid=""
}

: >"$dir/results"
for t in $targets; do
  for tr in $transports; do
    for w in $workloads; do
      opts=rw
      case $w in stat) opts=rw,attr_timeout=0 ;; read) opts=rw,direct_io ;; esac
      do_mount "$t" "$tr" "$opts"
      # What the workload needs, before the count starts.
      case $w in
        stat | read) head -c 1048576 /dev/zero >"$mnt/f"; cat "$mnt/f" >/dev/null ;;
        w2-*) head -c $((64 << 20)) /dev/zero >"$mnt/w2"; sync -f "$mnt/w2" ;;
        cold-*)
          # Neither the kernel nor the daemon has the file's pages: uext4 is
          # mounted again; the null backend keeps its data in memory (its
          # READs never wait), only the kernel's pages are dropped.
          head -c $((256 << 20)) /dev/zero >"$mnt/c"
          sync -f "$mnt/c"
          if [ "$t" = uext4 ]; then
            do_unmount
            do_mount "$t" "$tr" "$opts" again
          fi
          python3 -c "import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)" "$mnt/c"
          ;;
      esac
      minor=$(mountpoint -d "$mnt" | cut -d: -f2)
      before=$(snapshot)
      perf stat -a -x, -o "$dir/req.csv" -e fuse:fuse_request_send --filter "connection == $minor" &
      perfpids=($!)
      perf stat -p "$pid" -x, -o "$dir/sys.csv" -e raw_syscalls:sys_enter -e syscalls:sys_enter_futex \
        "${malloc_ev[@]}" &
      perfpids+=($!)
      rec=""
      if [ "$perf_record" = "$t/$tr/$w" ]; then
        perf record -g -o "$dir/perf.data" -p "$pid" 2>/dev/null &
        rec=$!
        perfpids+=("$rec")
      fi
      sleep 0.5
      case $w in
        stat | read) cmd=(python3 "$dir/loop.py" "$w" "$mnt/f" "$secs") ;;
        w2-*)
          j=${w#w2-}
          cmd=(fio --output-format=json --directory="$mnt" --group_reporting=1 --thread --filename=w2 --size=64m
            --bs=8k --ioengine=psync --direct=0 --norandommap=1 --randrepeat=0 --time_based=1 --runtime="$secs"
            --name=r --rw=randread --numjobs="$j" --name=w --rw=randwrite --numjobs="$j")
          ;;
        w5-*) cmd=(python3 "$dir/smallfiles.py" "$mnt" "${w#w5-}" "$secs") ;;
        cold-seq) cmd=(python3 -c "
import sys
n = 0
with open(sys.argv[1], 'rb', buffering=0) as f:
    while f.read(1 << 20):
        n += 1
print(n)" "$mnt/c") ;;
        cold-rand)
          cmd=(fio --output-format=json --directory="$mnt" --group_reporting=1 --thread --filename=c --size=256m
            --bs=4k --ioengine=psync --direct=0 --norandommap=1 --randrepeat=0 --time_based=1 --runtime="$secs"
            --name=r --rw=randread --numjobs=1)
          ;;
      esac
      caller=$(python3 "$dir/rusage.py" "$dir/out" "${cmd[@]}" 2>&1 >/dev/null | tail -1)
      for p in "${perfpids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
      for p in "${perfpids[@]}"; do wait "$p" 2>/dev/null || true; done
      perfpids=()
      after=$(snapshot)
      case $w in
        w2-* | cold-rand) ops=$(python3 -c "
import json, sys
t = open(sys.argv[1]).read(); d = json.loads(t[t.index('{'):])
print(sum(j['read']['total_ios'] + j['write']['total_ios'] for j in d['jobs']))" "$dir/out") ;;
        *) ops=$(tail -1 "$dir/out") ;;
      esac
      req=$(awk -F, '/fuse_request_send/ { print $1 }' "$dir/req.csv")
      sys=$(awk -F, '/raw_syscalls:sys_enter/ { print $1 }' "$dir/sys.csv")
      futex=$(awk -F, '/sys_enter_futex/ { print $1 }' "$dir/sys.csv")
      mallocs=$(awk -F, '/probe_libc:malloc/ { print $1 }' "$dir/sys.csv")
      find "$mnt" -mindepth 1 -maxdepth 1 -exec rm -rf {} + 2>/dev/null || true
      do_unmount
      if [ "$t" = uext4 ]; then
        e2fsck -fn "$img" >/dev/null 2>&1 || echo "$t/$tr/$w: image NOT e2fsck-clean" >&2
      fi
      # The daemon's own counts (the session's lines at its end).
      counts=$(python3 - "$dir/daemon.log" <<'PY'
import re, sys
lent = wake = park = unpark = 0
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"io_uring queue \d+ ended: (\d+) requests, (\d+) to the pool, (\d+) eventfd wake-ups", line)
    if m:
        lent += int(m.group(2)); wake += int(m.group(3))
    m = re.search(r"workers parked (\d+) times, unparked (\d+) times", line)
    if m:
        park += int(m.group(1)); unpark += int(m.group(2))
print(lent, wake, park, unpark)
PY
)
      {
        printf '%s\n' "$t $tr $w $ops ${req:-0} ${sys:-0} ${futex:-0} ${mallocs:--} $counts $caller"
        printf '%s\n' "$before" | sed 's/^/B /'
        printf '%s\n' "$after" | sed 's/^/A /'
      } >>"$dir/results"
      echo "  $t $tr $w: $ops ops" >&2
    done
  done
done

python3 - "$dir/results" "$(getconf CLK_TCK)" <<'PY'
import collections, sys
hz = int(sys.argv[2])
runs, cur = [], None
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] in ("B", "A"):
        g, v, n, ticks = f[1], int(f[2]), int(f[3]), int(f[4])
        s = cur[f[0]].setdefault(g, [0, 0, 0])
        s[0] += v; s[1] += n; s[2] += ticks
        continue
    t, tr, w, ops, req, sys_, futex, mallocs, lent, wake, park, unpark, cv, ci, ccpu = f
    cur = {"t": t, "tr": tr, "w": w, "ops": int(ops), "req": int(req), "sys": int(sys_), "futex": int(futex), "malloc": None if mallocs == "-" else int(mallocs),
           "lent": int(lent), "wake": int(wake), "park": int(park), "unpark": int(unpark),
           "cv": int(cv), "ci": int(ci), "B": {}, "A": {}}
    runs.append(cur)
print("| target | transport | workload | ops | req/op | daemon cs/op vol+invol (q; pool) | caller cs/op vol+invol | "
      "daemon syscalls/op (futex) | to pool / eventfd wake-ups per op (io_uring); parks / unparks per op (/dev/fuse) | daemon mallocs/op | daemon CPU us/op |")
print("|---|---|---|---:|---:|---|---|---|---|---:|---:|")
for r in runs:
    ops = max(r["ops"], 1)
    d = {g: [r["A"].get(g, [0, 0, 0])[k] - r["B"].get(g, [0, 0, 0])[k] for k in range(3)]
         for g in set(r["A"]) | set(r["B"])}
    vol = sum(x[0] for x in d.values()); inv = sum(x[1] for x in d.values())
    cpu = sum(x[2] for x in d.values()) / hz * 1e6
    q = d.get("q", [0, 0, 0]); p = d.get("pool", [0, 0, 0])
    if r["tr"] == "uring":
        h = f"{r['lent'] / ops:.3f} / {r['wake'] / ops:.3f}"
    else:
        h = f"{r['park'] / ops:.3f} / {r['unpark'] / ops:.3f}"
    m = "-" if r["malloc"] is None else f"{r['malloc'] / ops:.2f}"
    print(f"| {r['t']} | {r['tr']} | {r['w']} | {r['ops']} | {r['req'] / ops:.2f} | "
          f"{vol / ops:.2f}+{inv / ops:.2f} ({(q[0] + q[1]) / ops:.2f}; {(p[0] + p[1]) / ops:.2f}) | "
          f"{r['cv'] / ops:.2f}+{r['ci'] / ops:.2f} | {r['sys'] / ops:.2f} ({r['futex'] / ops:.2f}) | {h} | {m} | {cpu / ops:.1f} |")
PY
