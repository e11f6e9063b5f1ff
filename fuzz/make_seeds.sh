#!/usr/bin/env bash
# Builds the seed corpus of a target (open_walk by default; also used for
# write_script: ./make_seeds.sh write_script): small real images
# (128-256 KiB) made by mkfs.ext4 -d from a tree with a few files, a
# fragmented file (extent tree of depth 1), an htree directory, fast and
# slow symlinks and an xattr block, in four layouts.
set -euo pipefail
cd "$(dirname "$0")"
out=corpus/${1:-open_walk}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=$tmp/src
mkdir -p "$src/d" "$src/h"
echo hello > "$src/a.txt"
for i in 1 2 3; do head -c $((i * 700)) /dev/zero | tr '\0' "$i" > "$src/d/f$i"; done
head -c 20000 /dev/urandom > "$src/big.bin"
for i in $(seq 0 9); do printf 'island %d' "$i" | dd of="$src/frag" bs=1 seek=$((i * 4096)) conv=notrunc status=none; done
for i in $(seq 1 40); do : > "$src/h/$(printf 'n%03d_%0200d' "$i" 0)"; done
ln -s a.txt "$src/fast"
ln -s "/$(printf 'long/%.0s' $(seq 1 20))target" "$src/slow"
python3 -c "import os; os.setxattr('$src/a.txt', 'user.big', b'v' * 600); os.setxattr('$src/a.txt', 'user.s', b'x')"
make() {
    local name=$1 size=$2; shift 2
    mkfs.ext4 -q -F -N 64 "$@" -d "$src" "$tmp/$name" "$size"
    e2fsck -fyD "$tmp/$name" > /dev/null 2>&1 || [ $? -lt 4 ]
    cp "$tmp/$name" "$out/seed-$name"
}
make 1k-csum 192K -b 1024
make 1k-nocsum 192K -b 1024 -O ^metadata_csum
make 1k-blockmap 192K -b 1024 -O ^metadata_csum,^extent,^64bit,^flex_bg
make 4k-csum 256K -b 4096
# The write path also gets a journal (the smallest mkfs.ext4 makes: 1024
# blocks), so that commits, checkpoints and recovery meet damaged images.
if [ "${1:-open_walk}" = write_script ]; then
    make 1k-journal 3M -b 1024 -J size=1
fi
ls -l "$out"
