#!/usr/bin/env bash
# Installs what uext4's commands and tests need, when missing.
# Sourced by scripts/run and scripts/test; safe to run twice.
set -euo pipefail

need_apt=()
command -v mkfs.ext4 >/dev/null 2>&1 || need_apt+=(e2fsprogs)
command -v debugfs >/dev/null 2>&1 || need_apt+=(e2fsprogs)
command -v e2freefrag >/dev/null 2>&1 || need_apt+=(e2fsprogs)
command -v losetup >/dev/null 2>&1 || need_apt+=(mount)
# `uext4 mount` needs /dev/fuse and, to unmount, fusermount3 (or umount);
# the FUSE tests use setfattr/getfattr, fio (verify jobs) and xfs_io
# (shutdown, project ids, collapse/insert range, copy_file_range). They are
# installed as root; a user who cannot install them only loses mounting
# (which needs root anyway).
want_apt=()
command -v fusermount3 >/dev/null 2>&1 || want_apt+=(fuse3)
command -v setfattr >/dev/null 2>&1 || want_apt+=(attr)
command -v fio >/dev/null 2>&1 || want_apt+=(fio)
command -v getfacl >/dev/null 2>&1 || want_apt+=(acl)
command -v xfs_io >/dev/null 2>&1 || want_apt+=(xfsprogs)
if [ ${#want_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    need_apt+=("${want_apt[@]}")
  else
    echo "note: ${want_apt[*]} missing (uext4 mount and its tests need them: sudo apt-get install ${want_apt[*]})" >&2
  fi
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing: ${need_apt[*]}" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "missing packages: ${need_apt[*]} (run as root, or: sudo apt-get install ${need_apt[*]})" >&2
    exit 1
  fi
fi
if ! command -v cargo >/dev/null 2>&1; then
  for d in "$HOME/.cargo/bin" /usr/local/cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH"
  done
fi
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install a Rust toolchain (rustup)" >&2; exit 1; }
rustup component list --installed 2>/dev/null | grep -q clippy || rustup component add clippy rustfmt >/dev/null 2>&1 || true
