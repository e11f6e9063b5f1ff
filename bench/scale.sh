#!/usr/bin/env bash
# Scale: does the cost of an operation grow with the size of the image or the
# directory? Each target runs the same single-client loops through a real mount:
#   uext4     `uext4 mount` (FUSE over io_uring where the kernel has it, else /dev/fuse)
#   kernel    the kernel's ext4 on a loop device over the same kind of image
#   fuse2fs   e2fsprogs' fuse2fs (only on images up to FUSE2FS_MAX, default 1T: it reads
#             every group's bitmaps at mount)
# Sections (SECTIONS, run in the order given; default "size dir file tree open"):
#   size  for each image size in SIZES (default "1G 1T 15T"; sparse files made with
#         lazy_itable_init=1,lazy_journal_init=1, as a real disk would be formatted, by
#         the mkfs(s) in MKFS: mke2fs (default), uext4 (`uext4 mkfs`) or both; rows are
#         labelled by mkfs): mount time, first `df`, N creates (create + 4 KiB write +
#         close, in one directory), N unlinks, N mkdirs (one directory each, at the top
#         level: the allocator spreads them over the groups), N rmdirs, a WRITE_MB
#         (default 512: it must fit the 1G image) MiB sequential write + fsync, daemon
#         peak RSS, unmount time (N = CREATES, default 10000)
#   dir   one directory grown to DIR_ENTRIES (default 1000000) empty files on a DIR_SIZE
#         (default 64G) image: creates/s per tenth of the way, random lookups/s (stat of
#         existing names) at the end, a full `ls -f`, then removing all
#   file  a FILE_SIZE (default 1T) sparse file on a FILE_IMG (default 2T) image takes
#         FILE_WRITES (default 1000000) random 4 KiB O_DIRECT writes at distinct aligned
#         offsets (a python3 loop, one write at a time): write IOPS per tenth (first and
#         last 10% in the table), then random 4 KiB direct reads of written blocks (each
#         checked) for FILE_READ_SECS (default 10) s; after unmounting, the file's extent
#         tree depth (debugfs) and the time `e2fsck -fn` takes. 1M writes put 4 GiB of
#         data in the image: mind IMGDIR's room.
#   tree  TREE_DIRS x TREE_FILES (default 2000 x 1000) empty files on a TREE_SIZE (default
#         64G) image, made through the mount (python3 loop), then unmount and mount again
#         (cold), `find` cold, warm and after `echo 2 > drop_caches`, `du -s` warm, lstat of
#         every name after drop_caches and again (cached), unmount: per phase the time, its
#         ratio to the kernel's, the daemon's CPU seconds (utime + stime) and RSS after it,
#         and the daemon's peak RSS beside its page-cache budget (cache= in UEXT4_OPTS, else
#         an eighth of RAM, 64 MiB..4 GiB)
#   open  OPEN_FILES (default 100000) empty files in one directory on an OPEN_SIZE (default
#         16G) image, all open at once (the fd limit raised to fit): time to create, to open
#         all, the daemon's RSS with all open (and before), time to close all, to unlink all
# Images live in IMGDIR (default /tmp: sparse files; /dev/shm holds 1G-class images in RAM).
# Every uext4 image gets `e2fsck -fn` after its runs (the script fails if one is not clean).
#
#   bench/scale.sh                       (root; every section, all targets)
#   SECTIONS=size SIZES="1G 15T" TARGETS="uext4 kernel" MKFS=both bench/scale.sh
# Environment: TARGETS (default "uext4 kernel fuse2fs"), OUT (default target/bench-scale),
#   FUSE2FS_SECTIONS (sections fuse2fs runs in, default "size dir"),
#   UEXT4_OPTS (extra mount options, default rw), CARGO_TARGET_DIR (where uext4 is built),
#   SVG (the chart, default docs/bench-scale.svg: rewritten with the sections of this run).
# Prints a markdown table per section; raw lines in $OUT/results.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
sections=${SECTIONS:-size dir file tree open}
sizes=${SIZES:-1G 1T 15T}
mkfs_list=${MKFS:-mke2fs}
[ "$mkfs_list" = both ] && mkfs_list="mke2fs uext4"
for m in $mkfs_list; do
  case $m in mke2fs | uext4) ;; *) echo "MKFS must be uext4, mke2fs or both: $m" >&2; exit 1 ;; esac
done
targets=${TARGETS:-uext4 kernel fuse2fs}
creates=${CREATES:-10000}
write_mb=${WRITE_MB:-512}
dir_entries=${DIR_ENTRIES:-1000000}
dir_size=${DIR_SIZE:-64G}
fuse2fs_max=${FUSE2FS_MAX:-1T}
fuse2fs_sections=${FUSE2FS_SECTIONS:-size dir}
file_img=${FILE_IMG:-2T}
file_size=${FILE_SIZE:-1T}
file_writes=${FILE_WRITES:-1000000}
file_read_secs=${FILE_READ_SECS:-10}
tree_dirs=${TREE_DIRS:-2000}
tree_files=${TREE_FILES:-1000}
tree_size=${TREE_SIZE:-64G}
open_files=${OPEN_FILES:-100000}
open_size=${OPEN_SIZE:-16G}
imgdir=${IMGDIR:-/tmp}
out=${OUT:-$root/target/bench-scale}
svg=${SVG:-$root/docs/bench-scale.svg}
uext4_opts=${UEXT4_OPTS:-rw}
for v in creates write_mb dir_entries file_writes file_read_secs tree_dirs tree_files open_files; do
  case ${!v} in '' | *[!0-9]*) echo "${v^^} must be a whole number: ${!v}" >&2; exit 1 ;; esac
done
[ "$(id -u)" = 0 ] || { echo "needs root (loop and FUSE mounts)" >&2; exit 1; }
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
source scripts/deps.sh
case " $targets " in *" fuse2fs "*)
  command -v fuse2fs >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse2fs >/dev/null; } ;;
esac
cargo build --release --locked -q -p uext4-cli
bin=${CARGO_TARGET_DIR:-$root/target}/release/uext4

rm -rf "$out"
mkdir -p "$out/mnt"
mnt=$out/mnt
img=$imgdir/uext4-scale.img
pid=""
uring_param=/sys/module/fuse/parameters/enable_uring
uring_was=""
[ -e "$uring_param" ] && uring_was=$(cat "$uring_param") && echo Y >"$uring_param"
cleanup() {
  if mountpoint -q "$mnt"; then umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; fi
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ -n "$uring_was" ]; then echo "$uring_was" >"$uring_param" 2>/dev/null || true; fi
  rm -f "$img"
}
trap cleanup EXIT

bytes() { numfmt --from=iec "$1"; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc -l | xargs printf '%.3f'; }

new_image() { # SIZE [MKFS: mke2fs (default) or uext4]
  rm -f "$img"
  case ${2:-mke2fs} in
    mke2fs)
      truncate -s "$1" "$img"
      mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=1,lazy_journal_init=1 "$img" ;;
    uext4) # the same lazy initialisation: no inode table is written
      "$bin" mkfs -b 4096 -E lazy_itable_init=1,lazy_journal_init=1 --size "$1" "$img" >/dev/null ;;
  esac
}

do_mount() { # TARGET
  pid=""
  case $1 in
    uext4)
      "$bin" mount "$img" "$mnt" -o "$uext4_opts" --foreground 2>>"$out/uext4.daemon.log" &
      pid=$! ;;
    fuse2fs)
      fuse2fs "$img" "$mnt" -f 2>>"$out/fuse2fs.daemon.log" &
      pid=$! ;;
    kernel) mount -o loop "$img" "$mnt" ;;
  esac
  local i
  for i in $(seq 1 6000); do
    mountpoint -q "$mnt" && return 0
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.01
  done
  echo "$1: mount failed (see $out/$1.daemon.log)" >&2
  return 1
}

do_unmount() {
  umount "$mnt"
  if [ -n "$pid" ]; then wait "$pid" || echo "daemon exit status $?" >&2; fi
  pid=""
}

rss_mb() { # the daemon's resident memory now
  if [ -n "$pid" ] && [ -r "/proc/$pid/status" ]; then
    awk '/^VmRSS:/ { printf "%d", $2 / 1024 }' "/proc/$pid/status"
  else
    echo -
  fi
}

cpu_s() { # the daemon's CPU seconds so far (utime + stime)
  if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then
    # Fields after the command name: state is $1, utime $12, stime $13.
    sed 's/.*) //' "/proc/$pid/stat" | awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($12 + $13) / hz }'
  else
    echo -
  fi
}

cpu_since() { # CPU_S_BEFORE: daemon CPU seconds spent since
  if [ "$1" = - ] || [ -z "$pid" ]; then echo -; else echo "$(cpu_s) - $1" | bc -l | xargs printf '%.2f'; fi
}

skip_target() { # TARGET SECTION IMAGE_SIZE: true when TARGET sits this run out
  [ "$1" = fuse2fs ] || return 1
  case " $fuse2fs_sections " in *" $2 "*) ;; *) return 0 ;; esac
  [ "$(bytes "$3")" -gt "$(bytes "$fuse2fs_max")" ]
}

hwm_mb() {
  if [ -n "$pid" ] && [ -r "/proc/$pid/status" ]; then
    awk '/^VmHWM:/ { printf "%d", $2 / 1024 }' "/proc/$pid/status"
  else
    echo -
  fi
}

# The single-client loops, timed inside one process (no fork per file).
loop_py=$out/loop.py
cat >"$loop_py" <<'EOF'
import os, random, sys, time
op, d, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
pid = sys.argv[4] if len(sys.argv) > 4 else "-"  # the daemon, for its CPU time

def cpu():  # the daemon's utime + stime in seconds (0 without a daemon)
    if pid == "-":
        return 0.0
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

buf = b"x" * 4096
t0 = time.monotonic()
if op == "create":        # create + 4 KiB write + close
    for i in range(n):
        fd = os.open(f"{d}/f{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(fd, buf)
        os.close(fd)
elif op == "unlink":
    for i in range(n):
        os.unlink(f"{d}/f{i}")
elif op == "mkdir":
    for i in range(n):
        os.mkdir(f"{d}/m{i}")
elif op == "rmdir":
    for i in range(n):
        os.rmdir(f"{d}/m{i}")
elif op == "grow":        # empty files, reporting every tenth of the way
    step = max(n // 10, 1)
    t, c = t0, cpu()
    for i in range(n):
        os.close(os.open(f"{d}/e{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        if (i + 1) % step == 0:
            u, v = time.monotonic(), cpu()
            busy = f" (daemon CPU {(v - c) * 1e6 / step:.0f} us each)" if pid != "-" else ""
            print(f"creates/s {i + 1 - step}-{i + 1}: {step / (u - t):.0f}{busy}", flush=True)
            t, c = u, v
elif op == "lookup":      # stat of random existing names
    k = min(n, 100000)
    for _ in range(k):
        os.stat(f"{d}/e{random.randrange(n)}")
    print(f"lookups/s: {k / (time.monotonic() - t0):.0f}")
elif op == "remove":
    for i in range(n):
        os.unlink(f"{d}/e{i}")
print(f"{op} {time.monotonic() - t0:.3f}")
EOF

results=$out/results.tsv
: >"$results"
record() { printf '%s\n' "$*" | tr ' ' '\t' >>"$results"; }

check_image() { # LABEL
  if ! e2fsck -fn "$img" >"$out/e2fsck.log" 2>&1; then
    echo "e2fsck -fn failed on $1:" >&2
    cat "$out/e2fsck.log" >&2
    exit 1
  fi
}

per_s() { echo "$1 / $2" | bc -l | xargs printf '%.0f'; } # COUNT SECONDS

cpu_us() { # CPU_S_BEFORE N: the daemon's CPU microseconds per operation since, or -
  if [ "$1" = - ] || [ -z "$pid" ]; then echo -; else echo "($(cpu_s) - $1) * 1000000 / $2" | bc -l | xargs printf '%.0f'; fi
}

timed_loop() { # OP DIR: "SECONDS DAEMON-CPU-US-PER-OP" of CREATES operations
  local c0 secs
  c0=$(cpu_s)
  secs=$(python3 "$loop_py" "$1" "$2" "$creates" | awk '{ print $2 }') || return 1
  echo "$secs $(cpu_us "$c0" "$creates")"
}

section_size() {
  local size mk t
  printf '\n### Scale: image size (%s creates/unlinks/mkdirs/rmdirs, %s MiB write)\n\n' "$creates" "$write_mb"
  echo "| image | mkfs | target | mount s | first df s | creates/s | unlinks/s | mkdirs/s | rmdirs/s | write+fsync s | peak RSS MB | unmount s | daemon CPU us/op: create, unlink, mkdir, rmdir |"
  echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for size in $sizes; do
    for mk in $mkfs_list; do
      for t in $targets; do
        if skip_target "$t" size "$size"; then continue; fi
        size_run "$size" "$mk" "$t"
      done
    done
  done
}

size_run() { # SIZE MKFS TARGET
  local size=$1 mk=$2 t=$3 t0 mount_s df_s create_s unlink_s mkdir_s rmdir_s write_s umount_s rss r
  local create_cpu unlink_cpu mkdir_cpu rmdir_cpu
  new_image "$size" "$mk"
  t0=$(now); do_mount "$t"; mount_s=$(since "$t0")
  t0=$(now); df "$mnt" >/dev/null; df_s=$(since "$t0")
  mkdir "$mnt/d"
  r=$(timed_loop create "$mnt/d"); create_s=${r% *}; create_cpu=${r#* }
  r=$(timed_loop unlink "$mnt/d"); unlink_s=${r% *}; unlink_cpu=${r#* }
  r=$(timed_loop mkdir "$mnt"); mkdir_s=${r% *}; mkdir_cpu=${r#* }
  r=$(timed_loop rmdir "$mnt"); rmdir_s=${r% *}; rmdir_cpu=${r#* }
  t0=$(now)
  dd if=/dev/zero of="$mnt/big" bs=1M count="$write_mb" conv=fsync status=none
  write_s=$(since "$t0")
  rss=$(hwm_mb)
  t0=$(now); do_unmount; umount_s=$(since "$t0")
  [ "$t" = kernel ] || check_image "$t $size $mk"
  record size "$size" "$mk" "$t" "$mount_s" "$df_s" "$create_s" "$unlink_s" "$mkdir_s" "$rmdir_s" "$write_s" \
    "$rss" "$umount_s" "$creates" "$write_mb" "$create_cpu" "$unlink_cpu" "$mkdir_cpu" "$rmdir_cpu"
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$size" "$mk" "$t" "$mount_s" "$df_s" \
    "$(per_s "$creates" "$create_s")" "$(per_s "$creates" "$unlink_s")" "$(per_s "$creates" "$mkdir_s")" \
    "$(per_s "$creates" "$rmdir_s")" "$write_s" "$rss" "$umount_s" \
    "$create_cpu, $unlink_cpu, $mkdir_cpu, $rmdir_cpu"
}

section_dir() {
  local t t0 lines ls_s rm_s rss
  printf '\n### Scale: one directory of %s entries (%s image)\n\n' "$dir_entries" "$dir_size"
  for t in $targets; do
    if skip_target "$t" dir "$dir_size"; then continue; fi
    new_image "$dir_size" "${mkfs_list%% *}"
    do_mount "$t"
    mkdir "$mnt/d"
    echo "#### $t"
    python3 "$loop_py" grow "$mnt/d" "$dir_entries" "${pid:--}" >"$out/grow.$t.txt"
    grep creates/s "$out/grow.$t.txt" | sed 's/^/- /'
    awk -v t="$t" '$1 == "creates/s" { print "dirtenth\t" t "\t" ++k "\t" $3 }' "$out/grow.$t.txt" >>"$results"
    python3 "$loop_py" lookup "$mnt/d" "$dir_entries" | grep lookups/s | sed 's/^/- /'
    t0=$(now); lines=$(ls -f "$mnt/d" | wc -l); ls_s=$(since "$t0")
    echo "- ls -f: $lines names in $ls_s s"
    rm_s=$(python3 "$loop_py" remove "$mnt/d" "$dir_entries" | awk '{ print $2 }')
    rss=$(hwm_mb)
    echo "- remove all: $rm_s s; daemon peak RSS $rss MB"
    do_unmount
    [ "$t" = kernel ] || check_image "$t dir"
    record dir "$dir_entries" "$t" "$ls_s" "$rm_s" "$rss"
  done
}

# file: random 4 KiB O_DIRECT writes at distinct aligned offsets of a sparse
# file (each block carries its offset, checked when read back), the rate per
# tenth of the writes, then random reads of written blocks for SECS seconds.
file_py=$out/file.py
cat >"$file_py" <<'EOF'
import mmap, os, random, sys, time
path, size, n, secs, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]

def cpu():  # the daemon's utime + stime in seconds (0 without a daemon)
    if pid == "-":
        return 0.0
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

blocks = size // 4096
if n > blocks:
    sys.exit(f"{n} writes do not fit {blocks} blocks")
offs = [b * 4096 for b in random.Random(24).sample(range(blocks), n)]
buf = mmap.mmap(-1, 4096)  # anonymous maps are page-aligned, as O_DIRECT needs
buf.write(b"u" * 4096)
fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o644)
os.ftruncate(fd, size)
step = max(n // 10, 1)
t, c = time.monotonic(), cpu()
for i, off in enumerate(offs):
    buf[:8] = off.to_bytes(8, "little")
    if os.pwrite(fd, buf, off) != 4096:
        sys.exit(f"short write at {off}")
    if (i + 1) % step == 0:
        u, v = time.monotonic(), cpu()
        print(f"tenth {(i + 1) // step} {step / (u - t):.0f} {(v - c) * 1e6 / step:.0f}", flush=True)
        t, c = u, v
rng = random.Random(25)
k = bad = 0
t0 = time.monotonic()
while True:
    for _ in range(256):
        off = offs[rng.randrange(n)]
        if os.preadv(fd, [buf], off) != 4096 or buf[:8] != off.to_bytes(8, "little"):
            bad += 1
    k += 256
    el = time.monotonic() - t0
    if el >= secs:
        break
print(f"read {k / el:.0f}")
os.close(fd)
if bad:
    sys.exit(f"{bad} of {k} reads did not return the block written there")
EOF

extent_depth() { # PATH: depth of its extent tree in $img (the header at the start of i_block)
  local h
  h=$(debugfs -R "inode_dump -b $1" "$img" 2>/dev/null | awk 'NR == 1 && $2 == "0af3" { print $5 }')
  if [ -n "$h" ]; then echo $((16#${h:2:2}${h:0:2})); else echo -; fi
}

section_file() {
  local t t0 cpu0 cpu first last rd rss umount_s depth fsck_s verdict
  printf '\n### Scale: a %s sparse file taking %s random 4 KiB direct writes (%s image)\n\n' \
    "$file_size" "$file_writes" "$file_img"
  echo "| target | write IOPS, first 10% | write IOPS, last 10% | last/first | read IOPS ($file_read_secs s) | daemon CPU s | peak RSS MB | unmount s | extent tree depth | e2fsck -fn s |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for t in $targets; do
    if skip_target "$t" file "$file_img"; then continue; fi
    new_image "$file_img" "${mkfs_list%% *}"
    do_mount "$t"
    cpu0=$(cpu_s)
    python3 "$file_py" "$mnt/f" "$(bytes "$file_size")" "$file_writes" "$file_read_secs" "${pid:--}" >"$out/file.$t.txt"
    cpu=$(cpu_since "$cpu0")
    first=$(awk '$1 == "tenth" && $2 == 1 { print $3 }' "$out/file.$t.txt")
    last=$(awk '$1 == "tenth" { v = $3 } END { print v }' "$out/file.$t.txt")
    rd=$(awk '$1 == "read" { print $2 }' "$out/file.$t.txt")
    rss=$(hwm_mb)
    t0=$(now); do_unmount; umount_s=$(since "$t0")
    depth=$(extent_depth /f)
    verdict=clean
    t0=$(now)
    e2fsck -fn "$img" >"$out/e2fsck.log" 2>&1 || verdict="NOT CLEAN"
    fsck_s=$(since "$t0")
    if [ "$verdict" != clean ]; then
      echo "e2fsck -fn: the $t image is not clean after the file section:" >&2
      cat "$out/e2fsck.log" >&2
      [ "$t" = kernel ] || exit 1
      fsck_s="$fsck_s (not clean)"
    fi
    awk -v t="$t" '$1 == "tenth" { print "filetenth\t" t "\t" $2 "\t" $3 }' "$out/file.$t.txt" >>"$results"
    record file "$t" "$file_writes" "$first" "$last" "$rd" "$cpu" "$rss" "$umount_s" "$depth" "${fsck_s%% *}"
    printf '| %s | %s | %s | %.2f | %s | %s | %s | %s | %s | %s |\n' "$t" "$first" "$last" \
      "$(echo "$last / $first" | bc -l)" "$rd" "$cpu" "$rss" "$umount_s" "$depth" "$fsck_s"
  done
  echo
  for t in $targets; do
    [ -e "$out/file.$t.txt" ] || continue
    echo "- $t write IOPS per tenth: $(awk '$1 == "tenth" { printf "%s%s", sep, $3; sep = ", " }' "$out/file.$t.txt")"
    [ "$t" = kernel ] ||
      echo "- $t daemon CPU us per write, per tenth: $(awk '$1 == "tenth" { printf "%s%s", sep, $4; sep = ", " }' "$out/file.$t.txt")"
  done
}

# tree: DIRS directories of FILES empty files each, made or stat'ed by name.
tree_py=$out/tree.py
cat >"$tree_py" <<'EOF'
import os, sys
op, root, dirs, files = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for i in range(dirs):
    d = f"{root}/d{i}"
    if op == "populate":
        os.mkdir(d)
        for j in range(files):
            os.close(os.open(f"{d}/f{j}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    else:  # stat: lstat every directory and file
        os.lstat(d)
        for j in range(files):
            os.lstat(f"{d}/f{j}")
EOF

budget_mb() { # the daemon's page-cache budget: cache= in UEXT4_OPTS, else an eighth of RAM (64 MiB..4 GiB)
  local c
  c=$(printf '%s\n' "$uext4_opts" | tr ',' '\n' | sed -n 's/^cache=//p' | tail -n 1)
  if [ -n "$c" ]; then
    echo $(($(bytes "$c") >> 20))
  else
    awk '/^MemTotal:/ { b = $2 * 1024 / 8; if (b < 64 * 2^20) b = 64 * 2^20; if (b > 4 * 2^30) b = 4 * 2^30
                        printf "%d", b / 2^20 }' /proc/meminfo
  fi
}

drop_caches() { sync; echo 2 >/proc/sys/vm/drop_caches; }
tree_find() { # the walk must see every name
  local n want=$((tree_dirs * tree_files + tree_dirs + 2)) # + the root and lost+found
  n=$(find "$mnt" | wc -l)
  [ "$n" = "$want" ] || { echo "find saw $n names, not $want" >&2; return 1; }
}
tree_du() { du -s "$mnt" >/dev/null; }
tree_stat() { python3 "$tree_py" stat "$mnt" "$tree_dirs" "$tree_files"; }

tree_phase() { # TARGET PHASE COMMAND...: wall time, daemon CPU and RSS after, as a results line
  local t=$1 ph=$2 t0 c0 wall
  shift 2
  c0=$(cpu_s)
  t0=$(now)
  "$@"
  wall=$(since "$t0")
  record tree "$t" "$ph" "$wall" "$(cpu_since "$c0")" "$(rss_mb)"
}

section_tree() {
  local t t0 hwm
  printf '\n### Scale: a tree of %s directories x %s empty files (%s image)\n\n' "$tree_dirs" "$tree_files" "$tree_size"
  for t in $targets; do
    if skip_target "$t" tree "$tree_size"; then continue; fi
    new_image "$tree_size" "${mkfs_list%% *}"
    do_mount "$t"
    tree_phase "$t" populate python3 "$tree_py" populate "$mnt" "$tree_dirs" "$tree_files"
    tree_phase "$t" unmount-after-populate do_unmount
    tree_phase "$t" mount-cold do_mount "$t"
    tree_phase "$t" find-cold tree_find
    tree_phase "$t" find-warm tree_find
    drop_caches
    tree_phase "$t" find-after-drop_caches tree_find
    tree_phase "$t" du-s-warm tree_du
    drop_caches
    tree_phase "$t" lstat-all-after-drop_caches tree_stat
    tree_phase "$t" lstat-all-again-cached tree_stat
    hwm=$(hwm_mb)
    tree_phase "$t" unmount do_unmount
    [ "$t" = kernel ] || check_image "$t tree"
    record treepeak "$t" "$hwm"
  done
  python3 - "$results" "$(budget_mb)" "$targets" <<'EOF'
import sys
results, budget, targets = sys.argv[1], sys.argv[2], sys.argv[3].split()
rows, peak = {}, {}
LABELS = {"unmount-after-populate": "unmount after populate", "mount-cold": "mount (cold)",
          "find-cold": "`find` (names counted), cold", "find-warm": "`find`, warm",
          "find-after-drop_caches": "`find` after drop_caches", "du-s-warm": "`du -s`, warm",
          "lstat-all-after-drop_caches": "lstat of every name after drop_caches",
          "lstat-all-again-cached": "lstat of every name again (cached)"}
for line in open(results):
    f = line.rstrip("\n").split("\t")
    if f[0] == "tree":
        rows.setdefault(f[2], {})[f[1]] = f[3:]
    elif f[0] == "treepeak":
        peak[f[1]] = f[2]
ts = [t for t in targets if any(t in r for r in rows.values())]
fuse = [t for t in ts if t != "kernel"]
head = ["phase"] + [f"{t} s" for t in ts]
if "kernel" in ts:
    head += [f"{t}/kernel" for t in fuse]
head += [f"{t} daemon CPU s" for t in fuse] + [f"{t} RSS after, MB" for t in fuse]
print("| " + " | ".join(head) + " |")
print("|---|" + "---:|" * (len(head) - 1))
for ph, r in rows.items():
    cell = lambda t, k: r[t][k] if t in r else "-"
    line = [LABELS.get(ph, ph)] + [cell(t, 0) for t in ts]
    if "kernel" in ts:
        for t in fuse:
            ok = t in r and "kernel" in r and float(r["kernel"][0]) > 0
            line.append(f"{float(r[t][0]) / float(r['kernel'][0]):.1f}x" if ok else "-")
    line += [cell(t, 1) for t in fuse] + [cell(t, 2) for t in fuse]
    print("| " + " | ".join(line) + " |")
print()
for t in fuse:
    print(f"- {t} daemon peak RSS (VmHWM) before the last unmount: {peak.get(t, '-')} MB; "
          f"page-cache budget {budget} MB (the issue's bound: budget + 128 = {int(budget) + 128} MB)")
EOF
}

# open: N files open at once; the daemon's RSS read while they are.
open_py=$out/open.py
cat >"$open_py" <<'EOF'
import os, resource, sys, time
d, n, pid = sys.argv[1], int(sys.argv[2]), sys.argv[3]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft < n + 64:  # as `ulimit -n`: root may raise the hard limit too
    resource.setrlimit(resource.RLIMIT_NOFILE, (n + 64, max(hard, n + 64)))

def rss():
    if pid == "-":
        return "-"
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return str(int(line.split()[1]) // 1024)

def timed(name, f):
    t = time.monotonic()
    r = f()
    print(f"{name} {time.monotonic() - t:.3f}", flush=True)
    return r

names = [f"{d}/o{i}" for i in range(n)]
os.mkdir(d)
timed("create", lambda: [os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)) for p in names])
print(f"rss_before {rss()}")
fds = timed("open", lambda: [os.open(p, os.O_RDONLY) for p in names])
print(f"rss_open {rss()}")
timed("close", lambda: [os.close(fd) for fd in fds])
print(f"rss_closed {rss()}")
timed("unlink", lambda: [os.unlink(p) for p in names])
EOF

section_open() {
  local t umount_s t0 hwm n=$open_files hard
  # Raising the hard limit needs CAP_SYS_RESOURCE (a container may not have it):
  # without it, as many files as the hard limit allows, and the table says so.
  if ! (ulimit -Hn $((n + 64))) 2>/dev/null; then
    hard=$(ulimit -Hn)
    [ "$hard" = unlimited ] || [ "$hard" -ge $((n + 64)) ] || n=$((hard - 64))
  fi
  printf '\n### Scale: %s files open at once (%s image)\n\n' "$n" "$open_size"
  [ "$n" = "$open_files" ] || echo "(OPEN_FILES=$open_files, but the fd hard limit is $hard and cannot be raised here)"$'\n'
  echo "| target | create s | open all s | opens/s | daemon RSS MB before, all open, closed | close all s | unlink all s | peak RSS MB | unmount s |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  for t in $targets; do
    if skip_target "$t" open "$open_size"; then continue; fi
    new_image "$open_size" "${mkfs_list%% *}"
    do_mount "$t"
    python3 "$open_py" "$mnt/o" "$n" "${pid:--}" >"$out/open.$t.txt"
    hwm=$(hwm_mb)
    t0=$(now); do_unmount; umount_s=$(since "$t0")
    [ "$t" = kernel ] || check_image "$t open"
    # shellcheck disable=SC2046 # one word per field
    set -- $(awk '{ v[$1] = $2 } END { print v["create"], v["open"], v["rss_before"], v["rss_open"], v["rss_closed"], v["close"], v["unlink"] }' "$out/open.$t.txt")
    record open "$t" "$n" "$@" "$hwm" "$umount_s"
    printf '| %s | %s | %s | %s | %s, %s, %s | %s | %s | %s | %s |\n' "$t" "$1" "$2" "$(per_s "$n" "$2")" \
      "$3" "$4" "$5" "$6" "$7" "$hwm" "$umount_s"
  done
}

for s in $sections; do "section_$s"; done

# The chart, from results.tsv (python3 alone): per-operation cost by image
# size, the big directory's creates per tenth, the big file's IOPS. Panels
# without data in this run are left out; no data at all, no chart.
mkdir -p "$(dirname "$svg")"
python3 - "$results" "$svg" <<'EOF'
import sys
results, svg_path = sys.argv[1:3]
size, dirt, filer = {}, {}, {}
for line in open(results):
    f = line.rstrip("\n").split("\t")
    if f[0] == "size" and f[3] in ("uext4", "kernel"):
        n, mb = int(f[13]), int(f[14])
        us = lambda v, k: 1e6 * float(v) / k
        series = f[3] if f[2] == "mke2fs" else f"{f[3]}, uext4 mkfs"
        size[(f[1], series)] = {"create": us(f[6], n), "unlink": us(f[7], n), "mkdir": us(f[8], n),
                                            "write": us(f[10], mb)}
    elif f[0] == "dirtenth":
        dirt[(f[2], f[1])] = float(f[3])
    elif f[0] == "file" and f[1] in ("uext4", "kernel"):
        filer[("writes, first 10%", f[1])] = float(f[3])
        filer[("writes, last 10%", f[1])] = float(f[4])
        filer[("reads", f[1])] = float(f[5])
if not (size or dirt or filer):
    print("no chart: no size, dir or file results in this run")
    sys.exit(0)
# Images are mke2fs's unless a series says otherwise.
COLORS = {"uext4": "#1f77b4", "kernel": "#2ca02c", "uext4, uext4 mkfs": "#9ecae1", "kernel, uext4 mkfs": "#a1d99b"}
LABELS = {"uext4": "uext4 (FUSE)", "kernel": "kernel ext4 (loop)",
          "uext4, uext4 mkfs": "uext4, image by uext4 mkfs", "kernel, uext4 mkfs": "kernel, image by uext4 mkfs"}
esc = lambda s: str(s).replace("&", "&amp;").replace("<", "&lt;")
def fmt(v):
    return f"{v / 1000:.1f}k" if v >= 10000 else (f"{v:.0f}" if v >= 10 else f"{v:.1f}")
def uniq(xs):
    return list(dict.fromkeys(xs))

def panel(x0, y0, w, h, title, groups, series, val):
    """Grouped bars: one group per x label, one bar per series (linear scale from 0)."""
    el = [f'<text x="{x0}" y="{y0 + 12}" font-size="12" font-weight="bold">{esc(title)}</text>']
    top, base, left = y0 + 30, y0 + h - 18, x0 + 40
    vals = [val(g, s) for g in groups for s in series if val(g, s) is not None]
    vmax = max(vals + [1e-9])
    el.append(f'<line x1="{left}" y1="{base}" x2="{x0 + w - 5}" y2="{base}" stroke="black"/>')
    el.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{base}" stroke="black"/>')
    el.append(f'<text x="{left - 3}" y="{top + 4}" text-anchor="end" font-size="9">{fmt(vmax)}</text>')
    el.append(f'<text x="{left - 3}" y="{base}" text-anchor="end" font-size="9">0</text>')
    gw = (x0 + w - 5 - left) / max(1, len(groups))
    bw = min(28, (gw - 6) / max(1, len(series)))
    for gi, g in enumerate(groups):
        gx = left + gi * gw + (gw - bw * len(series)) / 2
        for si, s in enumerate(series):
            v = val(g, s)
            bx = gx + si * bw
            if v is None:
                continue
            bh = (base - top - 12) * v / vmax
            el.append(f'<rect x="{bx:.1f}" y="{base - bh:.1f}" width="{bw - 1:.1f}" height="{bh:.1f}" fill="{COLORS.get(s, "#888")}">'
                      f'<title>{esc(LABELS.get(s, s))} {esc(g)}: {v:.1f}</title></rect>')
            if bw >= 14:
                el.append(f'<text x="{bx + bw / 2:.1f}" y="{base - bh - 2:.1f}" text-anchor="middle" font-size="8">{fmt(v)}</text>')
        el.append(f'<text x="{left + gi * gw + gw / 2:.1f}" y="{base + 12}" text-anchor="middle" font-size="10">{esc(g)}</text>')
    return el

W = 960
body, y, used = [], 50, []
if size:
    sizes = uniq(k[0] for k in size)
    series = uniq(k[1] for k in size)
    used += series
    ops = [("create", "create + 4 KiB write, \u00b5s"), ("unlink", "unlink, \u00b5s"),
           ("mkdir", "mkdir (top level), \u00b5s"), ("write", "seq. write + fsync, \u00b5s/MiB")]
    pw = W / len(ops)
    for i, (op, title) in enumerate(ops):
        body += panel(i * pw + 5, y, pw - 10, 200, title, sizes, series,
                      lambda g, s, op=op: size[(g, s)][op] if (g, s) in size else None)
    y += 215
if dirt:
    tenths = sorted({k[0] for k in dirt}, key=int)
    series = uniq(k[1] for k in dirt)
    used += series
    body += panel(5, y, W * 0.62 - 10, 200, "one directory: creates/s per tenth of its growth", tenths, series,
                  lambda g, s: dirt.get((g, s)))
if filer:
    groups = uniq(k[0] for k in filer)
    series = uniq(k[1] for k in filer)
    used += series
    body += panel(W * 0.62 + 5 if dirt else 5, y, W * 0.38 - 10, 200, "sparse file: random 4 KiB direct IOPS",
                  groups, series, lambda g, s: filer.get((g, s)))
if dirt or filer:
    y += 215
H = y + 10
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14">bench/scale.sh: cost by image size, '
       'a growing directory, a fragmented file</text>']
x = 10
for s in uniq(used):
    svg.append(f'<rect x="{x}" y="28" width="12" height="12" fill="{COLORS.get(s, "#888")}"/>')
    svg.append(f'<text x="{x + 16}" y="38">{esc(LABELS.get(s, s))}</text>')
    x += 30 + 6.5 * len(LABELS.get(s, s))
svg.append(f'<text x="{W - 10}" y="38" text-anchor="end" fill="#555">images by mke2fs unless said</text>')
svg += body
svg.append("</svg>")
open(svg_path, "w").write("\n".join(svg) + "\n")
print(f"\nchart: {svg_path}; raw results: {results}")
EOF
