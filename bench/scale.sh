#!/usr/bin/env bash
# Scale: does the cost of an operation grow with the size of the image or the
# directory? Each target runs the same single-client loops through a real mount:
#   uext4     `uext4 mount` (FUSE over io_uring where the kernel has it, else /dev/fuse)
#   kernel    the kernel's ext4 on a loop device over the same kind of image
#   fuse2fs   e2fsprogs' fuse2fs (only on images up to FUSE2FS_MAX, default 1T: it reads
#             every group's bitmaps at mount)
# Sections (SECTIONS, default "size dir"):
#   size  for each image size in SIZES (default "1G 1T 15T"; sparse files made by
#         `mkfs.ext4 -E lazy_itable_init=1,lazy_journal_init=1`, as a real disk would be
#         formatted): mount time, first `df`, N creates (create + 4 KiB write + close),
#         N unlinks, a WRITE_MB (default 512: it must fit the 1G image) MiB sequential
#         write + fsync, daemon peak RSS, unmount time (N = CREATES, default 10000)
#   dir   one directory grown to DIR_ENTRIES (default 1000000) empty files on a DIR_SIZE
#         (default 64G) image: creates/s per tenth of the way, random lookups/s (stat of
#         existing names) at the end, a full `ls -f`, then removing all
#   tree  a tree of TREE_DIRS (default 2000) directories x TREE_FILES (default 1000) empty
#         files in a TREE_SIZE (default 64G) image made by `uext4 mkfs -d` from a generated
#         host tree (in IMGDIR, deleted once copied; TREE_IMG=PATH reuses an image made
#         that way and keeps it): `find` cold (just mounted), warm, after
#         `echo 2 > /proc/sys/vm/drop_caches`; `du -s` warm; an lstat of every path, twice;
#         `drop_caches` again; unmount; after each phase the daemon's RSS, peak RSS and
#         CPU seconds
# Images live in IMGDIR (default /tmp: sparse files; /dev/shm holds 1G-class images in RAM).
# Every uext4 image gets `e2fsck -fn` after its runs (the script fails if one is not clean).
#
#   bench/scale.sh                       (root; both sections, all targets)
#   SECTIONS=size SIZES="1G 15T" TARGETS="uext4 kernel" bench/scale.sh
# Environment: TARGETS (default "uext4 kernel fuse2fs"), OUT (default target/bench-scale),
#   UEXT4_OPTS (extra mount options, default rw), CARGO_TARGET_DIR (where uext4 is built).
# Prints a markdown table per section; raw lines in $OUT/results.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
sections=${SECTIONS:-size dir}
sizes=${SIZES:-1G 1T 15T}
targets=${TARGETS:-uext4 kernel fuse2fs}
creates=${CREATES:-10000}
write_mb=${WRITE_MB:-512}
dir_entries=${DIR_ENTRIES:-1000000}
dir_size=${DIR_SIZE:-64G}
tree_dirs=${TREE_DIRS:-2000}
tree_files=${TREE_FILES:-1000}
tree_size=${TREE_SIZE:-64G}
tree_img=${TREE_IMG:-}
fuse2fs_max=${FUSE2FS_MAX:-1T}
imgdir=${IMGDIR:-/tmp}
out=${OUT:-$root/target/bench-scale}
uext4_opts=${UEXT4_OPTS:-rw}
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
  rm -f "$imgdir/uext4-scale.img" # not $img: the tree section points it at TREE_IMG
  rm -rf "$imgdir/uext4-scale-tree"
}
trap cleanup EXIT

bytes() { numfmt --from=iec "$1"; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc -l | xargs printf '%.3f'; }

new_image() { # SIZE
  rm -f "$img"
  truncate -s "$1" "$img"
  mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=1,lazy_journal_init=1 "$img"
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

# RSS MB, peak RSS MB and CPU seconds (user + system) of the daemon so far.
daemon_use() {
  if [ -n "$pid" ] && [ -r "/proc/$pid/status" ]; then
    local rss hwm cpu
    rss=$(awk '/^VmRSS:/ { printf "%d", $2 / 1024 }' "/proc/$pid/status")
    hwm=$(awk '/^VmHWM:/ { printf "%d", $2 / 1024 }' "/proc/$pid/status")
    cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$pid/stat")
    echo "$rss $hwm $cpu"
  else
    echo "- - -"
  fi
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
elif op == "grow":        # empty files, reporting every tenth of the way
    step = max(n // 10, 1)
    t = t0
    for i in range(n):
        os.close(os.open(f"{d}/e{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        if (i + 1) % step == 0:
            u = time.monotonic()
            print(f"creates/s {i + 1 - step}-{i + 1}: {step / (u - t):.0f}", flush=True)
            t = u
elif op == "lookup":      # stat of random existing names
    k = min(n, 100000)
    for _ in range(k):
        os.stat(f"{d}/e{random.randrange(n)}")
    print(f"lookups/s: {k / (time.monotonic() - t0):.0f}")
elif op == "lstat":      # an lstat of every path under d (a listing per directory)
    k = 0
    for top, dirs, files in os.walk(d):
        for name in dirs + files:
            os.lstat(f"{top}/{name}")
            k += 1
    print(f"lstat {k} paths")
elif op == "tree":        # a host tree of n directories x (argv 4) empty files
    m = int(sys.argv[4])
    os.makedirs(d)
    for i in range(n):
        p = f"{d}/d{i:05d}"
        os.mkdir(p)
        for j in range(m):
            os.close(os.open(f"{p}/f{j:05d}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
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

section_size() {
  local size t t0 mount_s df_s create_s unlink_s write_s umount_s rss
  printf '\n### Scale: image size (%s creates/unlinks, %s MiB write)\n\n' "$creates" "$write_mb"
  echo "| image | target | mount s | first df s | creates/s | unlinks/s | write+fsync s | peak RSS MB | unmount s |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
  for size in $sizes; do
    for t in $targets; do
      if [ "$t" = fuse2fs ] && [ "$(bytes "$size")" -gt "$(bytes "$fuse2fs_max")" ]; then continue; fi
      new_image "$size"
      t0=$(now); do_mount "$t"; mount_s=$(since "$t0")
      t0=$(now); df "$mnt" >/dev/null; df_s=$(since "$t0")
      mkdir "$mnt/d"
      create_s=$(python3 "$loop_py" create "$mnt/d" "$creates" | awk '{ print $2 }')
      unlink_s=$(python3 "$loop_py" unlink "$mnt/d" "$creates" | awk '{ print $2 }')
      t0=$(now)
      dd if=/dev/zero of="$mnt/big" bs=1M count="$write_mb" conv=fsync status=none
      write_s=$(since "$t0")
      rss=$(hwm_mb)
      t0=$(now); do_unmount; umount_s=$(since "$t0")
      [ "$t" = kernel ] || check_image "$t $size"
      record size "$size" "$t" "$mount_s" "$df_s" "$create_s" "$unlink_s" "$write_s" "$rss" "$umount_s"
      printf '| %s | %s | %s | %s | %.0f | %.0f | %s | %s | %s |\n' "$size" "$t" "$mount_s" "$df_s" \
        "$(echo "$creates / $create_s" | bc -l)" "$(echo "$creates / $unlink_s" | bc -l)" "$write_s" "$rss" "$umount_s"
    done
  done
}

section_dir() {
  local t t0 lines ls_s rm_s rss
  printf '\n### Scale: one directory of %s entries (%s image)\n\n' "$dir_entries" "$dir_size"
  for t in $targets; do
    if [ "$t" = fuse2fs ] && [ "$(bytes "$dir_size")" -gt "$(bytes "$fuse2fs_max")" ]; then continue; fi
    new_image "$dir_size"
    do_mount "$t"
    mkdir "$mnt/d"
    echo "#### $t"
    python3 "$loop_py" grow "$mnt/d" "$dir_entries" | grep creates/s | sed 's/^/- /'
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

section_tree() {
  local t t0 s phase_name use n timg=$img
  printf '\n### Scale: a tree of %s directories x %s files (%s image)\n\n' "$tree_dirs" "$tree_files" "$tree_size"
  if [ -n "$tree_img" ]; then
    timg=$tree_img
  else
    # The host tree costs ~0.5-1 KiB of tmpfs inode per file: gone once copied.
    python3 "$loop_py" tree "$imgdir/uext4-scale-tree" "$tree_dirs" "$tree_files" >/dev/null
    rm -f "$img"
    t0=$(now)
    "$bin" mkfs "$img" -s "$tree_size" -d "$imgdir/uext4-scale-tree" >/dev/null
    echo "- built by \`uext4 mkfs -d\` in $(since "$t0") s"
    rm -rf "$imgdir/uext4-scale-tree"
  fi
  echo "| target | phase | s | entries | daemon RSS MB | peak RSS MB | daemon CPU s |"
  echo "|---|---|---:|---:|---:|---:|---:|"
  for t in $targets; do
    [ "$t" = fuse2fs ] && continue # far beyond its time at this size
    local saved=$img
    img=$timg
    t0=$(now); do_mount "$t"; s=$(since "$t0")
    phase() { # NAME SECONDS ENTRIES
      use=$(daemon_use)
      # shellcheck disable=SC2086 # $use is three words on purpose
      record tree "$tree_dirs" "$tree_files" "$t" "$1" "$2" "$3" $use
      # shellcheck disable=SC2086
      printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$t" "$1" "$2" "$3" $use
    }
    phase mount "$s" -
    for phase_name in "find cold" "find warm" "find after drop_caches"; do
      [ "$phase_name" = "find after drop_caches" ] && { sync; echo 2 >/proc/sys/vm/drop_caches; }
      t0=$(now); n=$(find "$mnt" | wc -l); s=$(since "$t0")
      phase "$phase_name" "$s" "$n"
    done
    t0=$(now); du -s "$mnt" >/dev/null; s=$(since "$t0")
    phase "du -s warm" "$s" -
    for phase_name in "lstat walk 1" "lstat walk 2"; do
      t0=$(now); n=$(python3 "$loop_py" lstat "$mnt" 0 | awk '/ paths$/ { print $2 }'); s=$(since "$t0")
      phase "$phase_name" "$s" "$n"
    done
    # The kernel forgets what it evicts: the daemon's per-node state must
    # follow (FORGETs arrive asynchronously: a few seconds' grace).
    sync; echo 2 >/proc/sys/vm/drop_caches; sleep 3
    phase "idle after drop_caches" - -
    use=$(daemon_use)
    t0=$(now); do_unmount; s=$(since "$t0")
    # shellcheck disable=SC2086 # $use is three words on purpose
    record tree "$tree_dirs" "$tree_files" "$t" unmount "$s" - $use
    # shellcheck disable=SC2086
    printf '| %s | unmount | %s | - | %s | %s | %s |\n' "$t" "$s" $use
    [ "$t" = kernel ] || check_image "$t tree"
    img=$saved
  done
  [ -n "$tree_img" ] || rm -f "$img"
}

for s in $sections; do "section_$s"; done
