#!/usr/bin/env bash
# Seeds 000-003 side by side, in one run: uext4 in process (`uext4 bench io`,
# RAM disk) with the default switches and each seed's "before" switch, and
# the kernel's ext4 on a RAM-backed loop device driven by fio with the
# seeds' job parameters. Prints a markdown table (IOPS and ratios).
#   bench/io-compare.sh [SECONDS] [THREADS...]      (root; installs fio if missing)
# Example: bench/io-compare.sh 5 1 2 0    (0 = the seed's job count)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
shift || true
threads=("${@:-1 2 0}")
[ "$(id -u)" = 0 ] || { echo "needs root (loop mount for the kernel side)" >&2; exit 1; }
command -v fio >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null; }
source scripts/deps.sh
cargo build --release --locked -q -p uext4-cli
bin=target/release/uext4
out=$(mktemp -d)
trap 'umount "$out/mnt" 2>/dev/null || true; rm -rf "$out" /dev/shm/uext4-cmp.img' EXIT

seed_jobs() { case $1 in w1|w3) echo 16 ;; *) echo 8 ;; esac; }

# uext4, in process.
tlist=$(IFS=,; echo "${threads[*]}" | tr ' ' ',')
"$bin" bench io --json --seconds "$secs" --threads "$tlist" > "$out/uext4.jsonl"

# The kernel: ext4 (4 KiB blocks) on a loop device over a file in /dev/shm.
truncate -s 8G /dev/shm/uext4-cmp.img
mkfs.ext4 -q -F -b 4096 /dev/shm/uext4-cmp.img
mkdir -p "$out/mnt"
mount -o loop /dev/shm/uext4-cmp.img "$out/mnt"
kfio() { # workload phase jobs -- fio args
  local w=$1 ph=$2 j=$3; shift 3
  rm -rf "${out:?}/mnt/"*
  fio --output-format=json --directory="$out/mnt" --group_reporting=1 --thread "$@" > "$out/k-$w-$ph-$j.json"
  echo "$w $ph $j $out/k-$w-$ph-$j.json" >> "$out/kernel.list"
}
for t in "${threads[@]}"; do
  for w in w1 w2 w3 w4; do
    j=$t; [ "$t" = 0 ] && j=$(seed_jobs $w)
    case $w in
      w1) files=$(seq -s: -f 'file1.0.%g' 0 31)
          kfio w1 randrw "$j" --name=w1 --rw=randrw --bs=4k --direct=1 --ioengine=psync --numjobs="$j" \
            --filename="$files" --file_service_type=random --size=512m --norandommap=1 --invalidate=0 \
            --time_based=1 --runtime="$secs" ;;
      w2) kfio w2 randrw "$j" --filename=w2 --size=64m --bs=8k --ioengine=psync --direct=0 --time_based=1 \
            --runtime="$secs" --name=r --rw=randread --numjobs="$j" --name=w --rw=randwrite --numjobs="$j" ;;
      w3) for ph in write randwrite; do
            kfio w3 $ph "$j" --name=w3 --rw=$ph --bs=4k --direct=1 --ioengine=psync --numjobs="$j" --size=256m \
              --overwrite=0 --norandommap=1 --fallocate=native --runtime="$secs"
          done ;;
      w4) kfio w4 write "$j" --name=w4 --filename=fio --rw=write --bs=2k --direct=1 --ioengine=libaio \
            --iodepth=256 --numjobs="$j" --size=256m --overwrite=1 --time_based=1 --runtime="$secs" ;;
    esac
  done
done
umount "$out/mnt"

python3 - "$out" <<'PY'
import json, sys, collections
out = sys.argv[1]
u = collections.defaultdict(dict)
for line in open(f"{out}/uext4.jsonl"):
    r = json.loads(line)
    key = (r["workload"].lower(), r["phase"], r["threads"])
    u[key]["seeds" if r["switch"] == "seeds" else "before"] = r
k = {}
for line in open(f"{out}/kernel.list"):
    w, ph, j, path = line.split()
    d = json.load(open(path))
    job = d["jobs"][0]
    if w == "w2":
        rd = sum(x["read"]["iops"] for x in d["jobs"]); wr = sum(x["write"]["iops"] for x in d["jobs"])
    else:
        rd, wr = job["read"]["iops"], job["write"]["iops"]
    k[(w, ph, int(j))] = (rd, wr)
print("| workload | threads | uext4 read IOPS | uext4 write IOPS | before-switch read | before-switch write | switch | kernel read IOPS | kernel write IOPS | uext4 / kernel |")
print("|---|---|---|---|---|---|---|---|---|---|")
for key in sorted(u):
    s, b = u[key].get("seeds"), u[key].get("before")
    kr, kw = k.get(key, (0, 0))
    tot_u = s["read_iops"] + s["write_iops"]
    ratio = tot_u / (kr + kw) if kr + kw else float("nan")
    print(f"| {key[0].upper()} {key[1]} | {key[2]} | {s['read_iops']:.0f} | {s['write_iops']:.0f} | {b['read_iops']:.0f} | "
          f"{b['write_iops']:.0f} | {b['switch']} | {kr:.0f} | {kw:.0f} | {ratio:.2f}x |")
PY
