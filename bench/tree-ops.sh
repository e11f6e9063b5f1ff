#!/usr/bin/env bash
# Tree operations through the three ways a workload can run, in one run:
#   kernel  the kernel's ext4 on a loop device over an image file in /dev/shm
#   null    the ceiling: `uext4 mount-null` (uext4's own FUSE layer over an in-memory tree,
#           no engine): what FUSE and the transport allow
#   uext4   `uext4 mount` of an image file in /dev/shm
# The FUSE targets use TRANSPORT (default uring when the kernel has FUSE io_uring, else dev)
# and UEXT4_OPTS (extra mount options, default rw).
#
# Operations, each timed alone (wall clock) on a fresh mount:
#   tar extract   a tar archive of SRC (default /usr/include and /usr/share/man) written by
#                 `tar -xf` into the mount
#   git status    the same tree as a git repository (its .git made on /dev/shm, in the
#                 archive): 1st (the index's stat data do not match: git reads every file),
#                 2nd (warm), cold (after `echo 3 > /proc/sys/vm/drop_caches`: every name
#                 looked up again)
#   rm -rf        of the whole tree
#
#   bench/tree-ops.sh            (root)
# Environment: SRC, SIZE (image size, default 4G), TARGETS (default "kernel null uext4"),
#   TRANSPORT, UEXT4_OPTS, OUT (default target/bench-tree), CARGO_TARGET_DIR.
# Prints a markdown table: seconds per operation and target, and the ratios
# null/kernel, uext4/null and uext4/kernel as speeds (the other's time over this one's:
# above 1.00x is faster), and e2fsck -fn of the uext4 image.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
[ "$(id -u)" = 0 ] || { echo "needs root (loop and FUSE mounts)" >&2; exit 1; }
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
src=${SRC:-/usr/include /usr/share/man}
size=${SIZE:-4G}
targets=${TARGETS:-kernel null uext4}
out=${OUT:-$root/target/bench-tree}
uring_param=/sys/module/fuse/parameters/enable_uring
transport=${TRANSPORT:-$([ -e "$uring_param" ] && echo uring || echo dev)}
opts=${UEXT4_OPTS:-rw}
for t in tar git python3 awk mkfs.ext4 e2fsck; do
  command -v "$t" >/dev/null || { echo "$t not found" >&2; exit 1; }
done
source scripts/deps.sh
cargo build --release --locked -q -p uext4-cli
bin=${CARGO_TARGET_DIR:-$root/target}/release/uext4

work=/dev/shm/uext4-tree-ops
img=$work/img
mnt=$out/mnt
rm -rf "$out" "$work"
mkdir -p "$out" "$mnt" "$work"
pid=""
uring_was=""
cleanup() {
  if [ -n "$uring_was" ]; then echo "$uring_was" >"$uring_param" 2>/dev/null || true; fi
  if mountpoint -q "$mnt"; then umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; fi
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
if [ "$transport" = uring ]; then
  uring_was=$(cat "$uring_param")
  echo Y >"$uring_param"
fi

# The archive: SRC copied into a git repository (committed), with its .git.
echo "building the archive of $src" >&2
mkdir -p "$work/tree"
for s in $src; do
  mkdir -p "$work/tree/$(basename "$s")"
  cp -a "$s/." "$work/tree/$(basename "$s")/"
done
# No automatic gc or maintenance: a detached one would change .git while tar reads it.
(cd "$work/tree" && git init -q && git config gc.auto 0 && git config maintenance.auto false &&
  git add -A && git -c user.name=b -c user.email=b@b commit -qm tree)
tar -C "$work/tree" -cf "$work/tree.tar" .
rm -rf "$work/tree"
files=$(tar -tf "$work/tree.tar" | wc -l)
mib=$(($(stat -c %s "$work/tree.tar") >> 20))

do_mount() {
  local t=$1
  pid=""
  case $t in
    kernel)
      rm -f "$img"
      truncate -s "$size" "$img"
      mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 "$img"
      mount -o loop "$img" "$mnt"
      ;;
    null)
      "$bin" mount-null "$mnt" -o "$opts,transport=$transport,log=info" --foreground 2>>"$out/$t.log" &
      pid=$!
      ;;
    uext4)
      rm -f "$img"
      truncate -s "$size" "$img"
      mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 "$img"
      "$bin" mount "$img" "$mnt" -o "$opts,transport=$transport,log=info" --foreground 2>>"$out/$t.log" &
      pid=$!
      ;;
  esac
  local i
  for i in $(seq 1 300); do
    mountpoint -q "$mnt" && return 0
    sleep 0.1
  done
  echo "$t: mount failed (see $out/$t.log)" >&2
  return 1
}

do_unmount() {
  local i
  for i in $(seq 1 50); do
    umount "$mnt" 2>/dev/null && break
    sleep 0.2
  done
  mountpoint -q "$mnt" && umount -l "$mnt"
  if [ -n "$pid" ]; then wait "$pid" 2>/dev/null || echo "daemon exit status $?" >>"$out/$1.log"; fi
  pid=""
}

# timed TARGET OP COMMAND...: one line of results.tsv (seconds, exit status).
timed() {
  local t=$1 op=$2 rc=0 t0 t1
  shift 2
  t0=$(date +%s.%N)
  "$@" >>"$out/$t.log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  local secs
  secs=$(awk "BEGIN { printf \"%.3f\", $t1 - $t0 }")
  printf '%s\t%s\t%s\t%s\n' "$t" "$op" "$secs" "$rc" >>"$out/results.tsv"
  echo "  $t $op: $secs s (exit $rc)" >&2
}

: >"$out/results.tsv"
fsck=""
for t in $targets; do
  echo "== $t" >&2
  do_mount "$t" || continue
  sync
  timed "$t" "tar extract" tar -C "$mnt" -xf "$work/tree.tar"
  timed "$t" "git status 1st" git -c safe.directory='*' -C "$mnt" status --porcelain
  timed "$t" "git status 2nd" git -c safe.directory='*' -C "$mnt" status --porcelain
  sync
  echo 3 >/proc/sys/vm/drop_caches
  timed "$t" "git status cold" git -c safe.directory='*' -C "$mnt" status --porcelain
  timed "$t" "rm -rf" find "$mnt" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
  do_unmount "$t"
  if [ "$t" = uext4 ]; then
    if e2fsck -fn "$img" >"$out/fsck.log" 2>&1; then fsck="clean"; else fsck="NOT clean (see $out/fsck.log)"; fi
  fi
  rm -f "$img"
done

python3 - "$out" "$files" "$mib" "$transport" "$fsck" <<'PY'
import collections, sys
out, files, mib, transport, fsck = sys.argv[1:6]
res = collections.defaultdict(dict)
ops = []
for line in open(f"{out}/results.tsv"):
    t, op, secs, rc = line.rstrip("\n").split("\t")
    res[op][t] = (float(secs), int(rc))
    if op not in ops:
        ops.append(op)
def cell(r):
    if r is None:
        return "-"
    return f"{r[0]:.2f}" + ("" if r[1] == 0 else f" (exit {r[1]})")
def speed(a, b):  # a's speed relative to b: b's time over a's
    if a is None or b is None or a[1] or b[1] or a[0] <= 0:
        return "-"
    return f"{b[0] / a[0]:.2f}x"
lines = [f"Tree operations, {files} entries ({mib} MiB archive), FUSE transport {transport}; seconds "
         "(wall clock), ratios as speeds (above 1.00x: faster).", "",
         "| operation | kernel ext4 | null backend | uext4 | null / kernel | uext4 / null | uext4 / kernel |",
         "|---|---|---|---|---|---|---|"]
for op in ops:
    g = res[op]
    k, n, u = g.get("kernel"), g.get("null"), g.get("uext4")
    lines.append(f"| {op} | {cell(k)} | {cell(n)} | {cell(u)} | {speed(n, k)} | {speed(u, n)} | {speed(u, k)} |")
if fsck:
    lines += ["", f"- e2fsck -fn of the uext4 image after its runs: {fsck}"]
text = "\n".join(lines) + "\n"
open(f"{out}/table.md", "w").write(text)
print(text, end="")
PY
