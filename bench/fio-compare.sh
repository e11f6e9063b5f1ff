#!/usr/bin/env bash
# The seeds' workloads through real mounts, in one run, driven by fio:
#   uext4     `uext4 mount -o transport=dev` (FUSE, read/write on /dev/fuse) on an image
#             file in /dev/shm
#   uext4-uring  the same with -o transport=uring (FUSE over io_uring, Linux 6.14+ with
#             CONFIG_FUSE_IO_URING): the script writes Y to
#             /sys/module/fuse/parameters/enable_uring for the run (restored at exit); a
#             daemon that fell back to /dev/fuse makes the run fail (its log says why)
#   before    the same with each seed's "before" switch: -o lock_policy=exclusive
#             (W1, W2: seeds 000/001), -o dio_unwritten_no_handle=off (W3: seed 002),
#             -o dio_unaligned_concurrent=off (W4: seed 003); none for W5
#   null      the ceiling: `uext4 mount-null -o transport=dev`, uext4's own FUSE layer (the same
#             handshake, options, transports and threads) over an in-memory tree with no engine,
#             file data kept up to NULL_CAP (past it dropped, read back as zeros); what the
#             protocol and the transport allow
#   null-uring   the same with -o transport=uring
#   kernel    the kernel's ext4 on a loop device over an image file in /dev/shm
#   fuse2fs   e2fsprogs' fuse2fs (FUSE) on an image file in /dev/shm
#   cached    W2 only: uext4-uring with -o writeback_cache (the kernel caches buffered writes
#             and writes them back later; readers keep their pages; see docs/COMPATIBILITY.md
#             for what it changes against ext4)
# Every image: mkfs.ext4 -b 4096 of the same SIZE, inode tables and journal
# initialised at mkfs (no lazy init running during the measurements).
#
# Workloads (job files of the seed documents, sizes as bench/io-compare.sh):
#   W1 (000) 4k randrw, direct, psync, 32 files of 16 MiB shared by all jobs
#   W2 (001) 8k buffered randread + randwrite on one 64 MiB file, J readers + J writers
#   W3 (002) 4k direct write, then randwrite, into fallocated files (fallocate=native,
#            overwrite=0), 256 MiB per job
#   W4 (003) 2k direct sequential overwrite, libaio iodepth 256, one shared 256 MiB file
#   W5 (004) many small files: fs_mark is not packaged, so J processes (python3) each
#            create 4 KiB files (open O_CREAT|O_EXCL, one 4 KiB write, close; no fsync
#            unless W5_FSYNC=1) across 16 directories of their own until SECONDS pass
#            (or W5_MAX files in all); reported as files/s in the write column
# Job counts: the arguments (0 = the seed's count: W1 16, W2 8+8, W3 16, W4 8, W5 64).
#
#   bench/fio-compare.sh [SECONDS] [JOBS...]          (root; default: 5 s, jobs 1 2 0)
#   e.g. bench/fio-compare.sh 2 1 2                   (a short check)
# Environment: SIZE (image size, default 8G), WORKLOADS (default "w1 w2 w3 w4 w5"),
#   TARGETS (default "uext4 uext4-uring null null-uring before cached kernel fuse2fs"), OUT (raw results, default
#   target/bench-fio), SVG (chart, default docs/bench-fio.svg), W5_MAX (default 200000),
#   UEXT4_OPTS (extra mount options of the uext4 targets, default rw), W5_FSYNC (0), LOOP_DIO (1: the kernel's loop device with --direct-io=on, no double
#   caching; default 0, a plain `mount -o loop` as bench/io-compare.sh), CARGO_TARGET_DIR
#   (where uext4 is built), NULL_CAP (file data the null targets keep, default 5G: all the data of
#   every workload at the seeds' job counts, W3 at 16 jobs writes 4 GiB).
# Prints a markdown table (IOPS, read / write where both, ratios uext4/kernel and
# uext4/fuse2fs on total IOPS; then the ceiling: uext4/null and null/kernel per transport; peak RSS of the uext4 daemons (dev/io_uring) per run from VmHWM),
# e2fsck -fn of every uext4 and fuse2fs image after its runs, and writes the chart.
# Installs fio, fuse2fs, fuse3, e2fsprogs through apt when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
secs=${1:-5}
shift || true
if [ $# -gt 0 ]; then jobs_list=("$@"); else jobs_list=(1 2 0); fi
size=${SIZE:-8G}
workloads=${WORKLOADS:-w1 w2 w3 w4 w5}
targets=${TARGETS:-uext4 uext4-uring null null-uring before cached kernel fuse2fs}
out=${OUT:-$root/target/bench-fio}
svg=${SVG:-$root/docs/bench-fio.svg}
w5_max=${W5_MAX:-200000}
w5_fsync=${W5_FSYNC:-0}
loop_dio=${LOOP_DIO:-0}
null_cap=${NULL_CAP:-5G}
case $secs in '' | *[!0-9]*) echo "SECONDS must be a whole number: $secs" >&2; exit 1 ;; esac
[ "$(id -u)" = 0 ] || { echo "needs root (loop and FUSE mounts)" >&2; exit 1; }
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

missing=()
command -v fio >/dev/null || missing+=(fio)
command -v fuse2fs >/dev/null || missing+=(fuse2fs)
command -v fusermount3 >/dev/null || missing+=(fuse3)
command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
command -v python3 >/dev/null || missing+=(python3)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
[ -e /dev/fuse ] || modprobe fuse 2>/dev/null || true
[ -e /dev/fuse ] || { echo "/dev/fuse does not exist" >&2; exit 1; }
source scripts/deps.sh
cargo build --release --locked -q -p uext4-cli
bin=${CARGO_TARGET_DIR:-$root/target}/release/uext4

img=/dev/shm/uext4-fio-compare.img
rm -rf "$out"
mkdir -p "$out/raw" "$out/mnt"
mnt=$out/mnt
pid=""
loopdev=""
uring_param=/sys/module/fuse/parameters/enable_uring
uring_was=""
cleanup() {
  if [ -n "$uring_was" ]; then echo "$uring_was" >"$uring_param" 2>/dev/null || true; fi
  if mountpoint -q "$mnt"; then umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; fi
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ -n "$loopdev" ]; then losetup -d "$loopdev" 2>/dev/null || true; fi
  rm -f "$img"
}
trap cleanup EXIT

seed_jobs() { case $1 in w1 | w3) echo 16 ;; w5) echo 64 ;; *) echo 8 ;; esac; }

# The "before" switch of a workload (empty: none).
before_opt() {
  case $1 in
    w1 | w2) echo lock_policy=exclusive ;;
    w3) echo dio_unwritten_no_handle=off ;;
    w4) echo dio_unaligned_concurrent=off ;;
    *) echo "" ;;
  esac
}

new_image() {
  rm -f "$img"
  truncate -s "$size" "$img"
  mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 "$img"
}

wait_mounted() {
  local i
  for i in $(seq 1 300); do
    mountpoint -q "$mnt" && return 0
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then return 1; fi
    sleep 0.1
  done
  return 1
}

# mount TARGET [UEXT4_OPTIONS]: mounts the image; sets pid for FUSE daemons.
do_mount() {
  local t=$1 opts=${2:-rw}
  pid=""
  case $t in
    uext4 | before)
      "$bin" mount "$img" "$mnt" -o "$opts,transport=dev" --foreground 2>>"$out/$t.daemon.log" &
      pid=$!
      ;;
    uext4-uring | cached)
      if [ ! -e "$uring_param" ]; then
        echo "$t: the kernel has no FUSE io_uring ($uring_param missing)" | tee -a "$out/$t.daemon.log" >&2
        return 1
      fi
      if [ -z "$uring_was" ]; then uring_was=$(cat "$uring_param"); fi
      echo Y >"$uring_param"
      "$bin" mount "$img" "$mnt" -o "$opts,transport=uring,log=info" --foreground 2>>"$out/$t.daemon.log" &
      pid=$!
      ;;
    null | null-uring)
      local tr=dev
      if [ "$t" = null-uring ]; then
        if [ ! -e "$uring_param" ]; then
          echo "$t: the kernel has no FUSE io_uring ($uring_param missing)" | tee -a "$out/$t.daemon.log" >&2
          return 1
        fi
        if [ -z "$uring_was" ]; then uring_was=$(cat "$uring_param"); fi
        echo Y >"$uring_param"
        tr=uring
      fi
      "$bin" mount-null "$mnt" -o "$opts,transport=$tr,log=info" --data-cap "$null_cap" --foreground \
        2>>"$out/$t.daemon.log" &
      pid=$!
      ;;
    fuse2fs)
      fuse2fs "$img" "$mnt" -f 2>>"$out/$t.daemon.log" &
      pid=$!
      ;;
    kernel)
      if [ "$loop_dio" = 1 ]; then
        loopdev=$(losetup -f --show --direct-io=on "$img")
        mount "$loopdev" "$mnt"
      else
        mount -o loop "$img" "$mnt"
      fi
      ;;
  esac
  wait_mounted || { echo "$t: mount failed (see $out/$t.daemon.log)" >&2; return 1; }
  if [ "$t" = uext4-uring ] || [ "$t" = cached ] || [ "$t" = null-uring ]; then
    # The queues register once the first request arrives on them.
    stat "$mnt" >/dev/null
    local i
    for i in $(seq 1 50); do
      grep -q "requests arrive through the ring" "$out/$t.daemon.log" && return 0
      sleep 0.1
    done
    echo "$t: the daemon did not start io_uring (see $out/$t.daemon.log)" >&2
    do_unmount "$t"
    return 1
  fi
}

# Unmounts and waits for a FUSE daemon to finish (uext4: clean unmount).
do_unmount() {
  local i
  for i in $(seq 1 50); do
    umount "$mnt" 2>/dev/null && break
    sleep 0.2
  done
  mountpoint -q "$mnt" && umount -l "$mnt"
  if [ -n "$pid" ]; then wait "$pid" 2>/dev/null || echo "$1: daemon exit status $?" >>"$out/$1.daemon.log"; fi
  if [ -n "$loopdev" ]; then losetup -d "$loopdev"; fi
  pid=""
  loopdev=""
}

reset_hwm() { [ -n "$pid" ] && [ -e "/proc/$pid/clear_refs" ] && echo 5 >"/proc/$pid/clear_refs" 2>/dev/null || true; }
hwm_kb() {
  if [ -n "$pid" ] && [ -r "/proc/$pid/status" ]; then
    awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status"
  else
    echo 0
  fi
}
alive() {
  if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then echo dead; return; fi
  mountpoint -q "$mnt" && stat "$mnt" >/dev/null 2>&1 && echo yes || echo dead
}

# record TARGET WORKLOAD PHASE JOBS KIND FILE RC: one line of results.tsv.
record() {
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$(hwm_kb)" "$(alive)" \
    >>"$out/results.tsv"
}

clear_mnt() { find "$mnt" -mindepth 1 -maxdepth 1 -exec rm -rf {} + 2>/dev/null || true; }

# runfio TARGET WORKLOAD PHASE JOBS -- fio arguments
runfio() {
  local t=$1 w=$2 ph=$3 j=$4 rc=0
  shift 4
  local f=$out/raw/$t-$w-$ph-$j.json
  clear_mnt
  reset_hwm
  (cd "$out" && timeout $((secs * 10 + 600)) fio --output-format=json --output="$f" --directory="$mnt" \
    --group_reporting=1 --thread "$@") >"$f.log" 2>&1 || rc=$?
  record "$t" "$w" "$ph" "$j" fio "$f" "$rc"
  echo "  $t $w $ph jobs=$j: fio exit $rc" >&2
}

cat >"$out/smallfiles.py" <<'PY'
# W5: fs_mark-like creation of 4 KiB files by N processes, each in 16
# directories of its own, until the deadline (or a share of MAX files).
import json, multiprocessing as mp, os, sys, time

def worker(args):
    root, p, secs, cap, fsync = args
    dirs = [os.path.join(root, f"p{p}", f"d{k}") for k in range(16)]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    data = os.urandom(4096)
    n, err = 0, ""
    deadline = time.monotonic() + secs
    while n < cap and time.monotonic() < deadline:
        path = os.path.join(dirs[n % 16], f"f{n}")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, data)
            if fsync:
                os.fsync(fd)
            os.close(fd)
        except OSError as e:
            err = str(e)
            break
        n += 1
    return n, err

root, procs, secs, cap, fsync = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
t0 = time.monotonic()
with mp.Pool(procs) as pool:
    res = pool.map(worker, [(root, p, secs, max(1, cap // procs), fsync) for p in range(procs)])
el = time.monotonic() - t0
files = sum(n for n, _ in res)
errors = [e for _, e in res if e]
print(json.dumps({"files": files, "seconds": el, "files_per_s": files / el, "errors": errors[:3]}))
sys.exit(1 if errors else 0)
PY

runw5() {
  local t=$1 j=$2 rc=0
  local f=$out/raw/$t-w5-create-$j.json
  clear_mnt
  reset_hwm
  timeout $((secs * 10 + 600)) python3 "$out/smallfiles.py" "$mnt" "$j" "$secs" "$w5_max" "$w5_fsync" \
    >"$f" 2>"$f.log" || rc=$?
  record "$t" w5 create "$j" w5 "$f" "$rc"
  echo "  $t w5 create jobs=$j: exit $rc" >&2
}

# Every workload at every job count on the mounted target.
run_workload() {
  local t=$1 w=$2 jj j
  for jj in "${jobs_list[@]}"; do
    j=$jj
    [ "$j" = 0 ] && j=$(seed_jobs "$w")
    case $w in
      w1)
        files=$(seq -s: -f 'file1.0.%g' 0 31)
        runfio "$t" w1 randrw "$j" --name=w1 --rw=randrw --bs=4k --direct=1 --ioengine=psync --numjobs="$j" \
          --filename="$files" --file_service_type=random --size=512m --norandommap=1 --invalidate=0 \
          --time_based=1 --runtime="$secs"
        ;;
      w2)
        runfio "$t" w2 randrw "$j" --filename=w2 --size=64m --bs=8k --ioengine=psync --direct=0 \
          --norandommap=1 --randrepeat=0 --time_based=1 --runtime="$secs" \
          --name=r --rw=randread --numjobs="$j" --name=w --rw=randwrite --numjobs="$j"
        ;;
      w3)
        for ph in write randwrite; do
          runfio "$t" w3 $ph "$j" --name=w3 --rw=$ph --bs=4k --direct=1 --ioengine=psync --numjobs="$j" \
            --size=256m --overwrite=0 --norandommap=1 --fallocate=native --runtime="$secs"
        done
        ;;
      w4)
        runfio "$t" w4 write "$j" --name=w4 --filename=fio --rw=write --bs=2k --direct=1 --ioengine=libaio \
          --iodepth=256 --numjobs="$j" --size=256m --overwrite=1 --time_based=1 --runtime="$secs"
        ;;
      w5) runw5 "$t" "$j" ;;
    esac
    if [ "$(alive)" = dead ]; then
      echo "$t: the daemon died during $w jobs=$j" | tee -a "$out/$t.daemon.log" >&2
      return 1
    fi
  done
}

: >"$out/results.tsv"
: >"$out/fsck.tsv"
for t in $targets; do
  echo "== $t" >&2
  new_image
  for w in $workloads; do
    opts=${UEXT4_OPTS:-rw}
    if [ "$t" = before ]; then
      opts=$(before_opt "$w")
      [ -n "$opts" ] || continue
    fi
    if [ "$t" = cached ]; then
      [ "$w" = w2 ] || continue
      opts=writeback_cache
    fi
    if ! do_mount "$t" "$opts"; then
      printf '%s\t%s\tmount failed\n' "$t" "$w" >>"$out/fsck.tsv"
      continue
    fi
    run_workload "$t" "$w" || true
    clear_mnt
    do_unmount "$t"
    # The null targets have no image.
    if [ "$t" != kernel ] && [ "${t#null}" = "$t" ]; then
      if e2fsck -fn "$img" >"$out/fsck-$t-$w.log" 2>&1; then
        printf '%s\t%s\tclean\n' "$t" "$w" >>"$out/fsck.tsv"
      else
        printf '%s\t%s\tNOT clean (e2fsck exit %s, %s)\n' "$t" "$w" "$?" "$out/fsck-$t-$w.log" >>"$out/fsck.tsv"
      fi
    fi
  done
  rm -f "$img"
done

mkdir -p "$(dirname "$svg")"
python3 - "$out" "$svg" "$secs" "$size" <<'PY'
import collections, json, sys

out, svg_path, secs, size = sys.argv[1:5]
ORDER = ["uext4", "uext4-uring", "null", "null-uring", "before", "cached", "kernel", "fuse2fs"]
BEFORE = {"w1": "lock_policy=exclusive", "w2": "lock_policy=exclusive",
          "w3": "dio_unwritten_no_handle=off", "w4": "dio_unaligned_concurrent=off"}
res = {}
for line in open(f"{out}/results.tsv"):
    t, w, ph, j, kind, path, rc, hwm, alive = line.rstrip("\n").split("\t")
    r = {"rc": int(rc), "hwm_mib": int(hwm or 0) / 1024, "alive": alive, "read": None, "write": None}
    try:
        text = open(path).read()
        d = json.loads(text[text.index("{"):])
        if kind == "fio":
            jobs = d["jobs"]
            r["read"] = sum(x["read"]["iops"] for x in jobs)
            r["write"] = sum(x["write"]["iops"] for x in jobs)
            r["errors"] = sum(x.get("error", 0) != 0 for x in jobs)
        else:
            r["write"] = d["files_per_s"]
            r["errors"] = len(d["errors"])
    except Exception as e:  # a run that produced no usable output
        r["failed"] = str(e)
    res[(w, ph, int(j), t)] = r

def total(r):
    if r is None or r.get("failed") or r["write"] is None:
        return None
    return (r["read"] or 0) + (r["write"] or 0)

def fmt(v):
    if v is None:
        return "-"
    return f"{v / 1000:.1f}k" if v >= 10000 else f"{v:.0f}"

def cell(r, both):
    if r is None:
        return "-"
    if r.get("failed"):
        return "failed"
    s = f"{fmt(r['read'])} / {fmt(r['write'])}" if both else fmt(r["write"])
    flags = []
    if r["rc"] != 0 or r.get("errors"):
        flags.append(f"exit {r['rc']}")
    if r["alive"] != "yes":
        flags.append("DAEMON DIED")
    return s + (f" ({', '.join(flags)})" if flags else "")

def ratio(a, b):
    ta, tb = total(a), total(b)
    return f"{ta / tb:.2f}x" if ta is not None and tb else "-"

def wratio(a, b):
    ok = lambda r: r is not None and not r.get("failed") and r["write"]
    return f"{a['write'] / b['write']:.2f}x" if ok(a) and ok(b) else "-"

def rwratio(a, b):
    ok = lambda r: r is not None and not r.get("failed") and r["read"] and r["write"]
    return f"{a['read'] / b['read']:.2f}x, {a['write'] / b['write']:.2f}x" if ok(a) and ok(b) else "-"

rows = sorted({k[:3] for k in res}, key=lambda k: (k[0], ["randrw", "write", "randwrite", "create"].index(k[1]), k[2]))
lines = []
lines.append(f"fio through the mounts, {secs} s per run, {size} images (4 KiB blocks) in /dev/shm. "
             "IOPS as read / write where the workload does both; W5 in files/s.")
lines.append("")
lines.append("| workload | jobs | uext4 | uext4 io_uring | uext4 before | before switch | kernel ext4 | fuse2fs | uext4 / kernel | io_uring / kernel | uext4 / fuse2fs | writes uext4 / fuse2fs | uext4 peak RSS MiB (dev/io_uring) |")
lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for w, ph, j in rows:
    both = w in ("w1", "w2")
    g = {t: res.get((w, ph, j, t)) for t in ORDER}
    jobs = f"{j}+{j}" if w == "w2" else str(j)
    name = {"w5": "W5 create (files/s)"}.get(w, f"{w.upper()} {ph}")
    u = g["uext4"]
    ur = g["uext4-uring"]
    rss = "/".join(f"{r['hwm_mib']:.0f}" for r in (u, ur) if r and r["hwm_mib"]) or "-"
    lines.append(f"| {name} | {jobs} | {cell(g['uext4'], both)} | {cell(ur, both)} | {cell(g['before'], both)} | "
                 f"{BEFORE.get(w, 'n/a')} | "
                 f"{cell(g['kernel'], both)} | {cell(g['fuse2fs'], both)} | {ratio(g['uext4'], g['kernel'])} | "
                 f"{ratio(ur, g['kernel'])} | "
                 f"{ratio(g['uext4'], g['fuse2fs'])} | {wratio(g['uext4'], g['fuse2fs']) if both else '-'} | {rss} |")
lines.append("")
ceiling = [(w, ph, j) for (w, ph, j) in rows if any((w, ph, j, t) in res for t in ("null", "null-uring"))]
if ceiling:
    lines.append("The ceiling: the null backend (uext4's FUSE layer, no engine) in the same run. "
                 "uext4 / null is the engine's share of the gap (1.00x: the engine costs nothing), "
                 "null / kernel what FUSE and the transport allow:")
    lines.append("")
    lines.append("| workload | jobs | null (/dev/fuse) | null io_uring | uext4 / null (/dev/fuse) | uext4 / null (io_uring) | null / kernel (/dev/fuse) | null / kernel (io_uring) |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for w, ph, j in ceiling:
        both = w in ("w1", "w2")
        g = {t: res.get((w, ph, j, t)) for t in ORDER}
        jobs = f"{j}+{j}" if w == "w2" else str(j)
        name = {"w5": "W5 create (files/s)"}.get(w, f"{w.upper()} {ph}")
        lines.append(f"| {name} | {jobs} | {cell(g['null'], both)} | {cell(g['null-uring'], both)} | "
                     f"{ratio(g['uext4'], g['null'])} | {ratio(g['uext4-uring'], g['null-uring'])} | "
                     f"{ratio(g['null'], g['kernel'])} | {ratio(g['null-uring'], g['kernel'])} |")
    lines.append("")
cached = [(w, ph, j) for (w, ph, j) in rows if (w, ph, j, "cached") in res]
if cached:
    lines.append("W2 with `-o writeback_cache` (io_uring) in the same run:")
    lines.append("")
    lines.append("| jobs | uext4 io_uring (default) | uext4 io_uring writeback_cache | kernel ext4 | fuse2fs | writeback_cache / kernel (reads, writes) |")
    lines.append("|---|---|---|---|---|---|")
    for w, ph, j in cached:
        g = {t: res.get((w, ph, j, t)) for t in ORDER}
        lines.append(f"| {j}+{j} | {cell(g['uext4-uring'], True)} | {cell(g['cached'], True)} | {cell(g['kernel'], True)} | "
                     f"{cell(g['fuse2fs'], True)} | {rwratio(g['cached'], g['kernel'])} |")
    lines.append("")
fsck = collections.defaultdict(list)
for line in open(f"{out}/fsck.tsv"):
    t, w, verdict = line.rstrip("\n").split("\t", 2)
    fsck[t].append((w, verdict))
for t in ORDER:
    if t in fsck:
        bad = [f"{w}: {v}" for w, v in fsck[t] if v != "clean"]
        after = "after " + ", ".join(w.upper() for w, _ in fsck[t])
        lines.append(f"- e2fsck -fn, {t} image {after}: " + ("clean" if not bad else "; ".join(bad)))
text = "\n".join(lines) + "\n"
open(f"{out}/table.md", "w").write(text)
print(text, end="")

# The chart: one panel per workload phase, a group of bars per job count,
# one bar per target (total IOPS or files/s), linear scale per panel.
COLORS = {"uext4": "#1f77b4", "uext4-uring": "#ff7f0e", "null": "#7f7f7f", "null-uring": "#bcbd22", "before": "#9ecae1", "cached": "#9467bd", "kernel": "#2ca02c", "fuse2fs": "#d62728"}
LABELS = {"uext4": "uext4 (FUSE, /dev/fuse)", "uext4-uring": "uext4 (FUSE over io_uring)",
          "null": "null backend (/dev/fuse)", "null-uring": "null backend (io_uring)", "before": "uext4, seed's before switch", "cached": "uext4 io_uring writeback_cache (W2)",
          "kernel": "kernel ext4 (loop)", "fuse2fs": "fuse2fs"}
panels = []
for w, ph in sorted({k[:2] for k in rows}, key=lambda k: (k[0], ["randrw", "write", "randwrite", "create"].index(k[1]))):
    js = sorted({j for (ww, pp, j) in rows if (ww, pp) == (w, ph)})
    panels.append((w, ph, js))
present = [t for t in ORDER if any(k[3] == t for k in res)]
W, PH, LEFT = 900, 170, 70
# The legend wraps onto as many rows as it needs.
legend, x, ly = [], LEFT, 30
for t in present:
    w_t = 30 + 7 * len(LABELS[t])
    if x + w_t > W - 10 and x > LEFT:
        x, ly = LEFT, ly + 16
    legend.append((t, x, ly))
    x += w_t
TOP = ly + 30
H = TOP + len(panels) * (PH + 40) + 20
esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;")
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14">uext4 vs null backend vs kernel ext4 vs fuse2fs: fio, {esc(secs)} s '
       f'per run (total IOPS; W5 files/s)</text>']
for t, x, ly in legend:
    svg.append(f'<rect x="{x}" y="{ly}" width="12" height="12" fill="{COLORS[t]}"/>')
    svg.append(f'<text x="{x + 16}" y="{ly + 10}">{esc(LABELS[t])}</text>')
for i, (w, ph, js) in enumerate(panels):
    y0 = TOP + i * (PH + 40)
    vals = [total(res.get((w, ph, j, t))) or 0 for j in js for t in present]
    vmax = max(vals + [1])
    svg.append(f'<text x="10" y="{y0 + 14}" font-size="12" font-weight="bold">{w.upper()} {ph}</text>')
    svg.append(f'<line x1="{LEFT}" y1="{y0 + PH}" x2="{W - 20}" y2="{y0 + PH}" stroke="black"/>')
    svg.append(f'<line x1="{LEFT}" y1="{y0 + 20}" x2="{LEFT}" y2="{y0 + PH}" stroke="black"/>')
    svg.append(f'<text x="{LEFT - 4}" y="{y0 + 24}" text-anchor="end">{fmt(vmax)}</text>')
    svg.append(f'<text x="{LEFT - 4}" y="{y0 + PH}" text-anchor="end">0</text>')
    gw = (W - 20 - LEFT) / max(1, len(js))
    bw = min(40, (gw - 20) / max(1, len(present)))
    for gi, j in enumerate(js):
        gx = LEFT + gi * gw + (gw - bw * len(present)) / 2
        for ti, t in enumerate(present):
            v = total(res.get((w, ph, j, t)))
            bx = gx + ti * bw
            if v is None:
                svg.append(f'<text x="{bx + bw / 2}" y="{y0 + PH - 4}" text-anchor="middle" fill="#888">-</text>')
                continue
            h = (PH - 30) * v / vmax
            svg.append(f'<rect x="{bx:.1f}" y="{y0 + PH - h:.1f}" width="{bw - 2:.1f}" height="{h:.1f}" fill="{COLORS[t]}">'
                       f'<title>{esc(LABELS[t])}: {v:.0f}</title></rect>')
            svg.append(f'<text x="{bx + bw / 2:.1f}" y="{y0 + PH - h - 3:.1f}" text-anchor="middle" font-size="9">{fmt(v)}</text>')
        jl = f"{j}+{j} jobs" if w == "w2" else f"{j} job{'s' if j > 1 else ''}"
        svg.append(f'<text x="{LEFT + gi * gw + gw / 2:.1f}" y="{y0 + PH + 14}" text-anchor="middle">{jl}</text>')
svg.append("</svg>")
open(svg_path, "w").write("\n".join(svg) + "\n")
print(f"\nchart: {svg_path}; raw results: {out}")
PY
