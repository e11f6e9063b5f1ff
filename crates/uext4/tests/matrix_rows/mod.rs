//! The rows of the compatibility matrix: one feature set people's images
//! have per row, with what uext4 does with it. Shared by
//! tests/compat_matrix.rs (read and write) and tests/crash_matrix.rs
//! (recovery), so that both cover the same rows.
#![allow(dead_code)]

/// What uext4 does with a row's images today.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    /// Opens read-write; the whole matrix flow runs.
    ReadWrite,
    /// Read-write open refused naming the feature; read-only open reads
    /// the tree exactly.
    ReadOnly(&'static str),
    /// Any open refused naming the feature.
    Refused(&'static str),
}

/// One feature set.
pub struct Row {
    /// The row's name (docs/COMPATIBILITY.md's table uses it).
    pub name: &'static str,
    /// mke2fs arguments (the type with `-t`, block size, features).
    pub mkfs: &'static [&'static str],
    /// Image size for the read-write matrix.
    pub size_mb: u64,
    /// Every kernel mounts the set (not casefold, quota or 64 KiB blocks;
    /// compat_matrix checks casefold and quota against the kernel's
    /// features).
    pub kernel: bool,
    /// What uext4 does with it.
    pub expect: Expect,
}

/// The upstream e2fsprogs default features beyond Debian 12's mke2fs.conf.
pub const UPSTREAM: &[&str] = &["-t", "ext4", "-O", "orphan_file,metadata_csum_seed"];

/// Every row, refused ones included.
pub const ROWS: &[Row] = &[
    Row { name: "upstream-default", mkfs: UPSTREAM, size_mb: 64, kernel: true, expect: Expect::ReadWrite },
    Row {
        name: "quota",
        mkfs: &["-t", "ext4", "-O", "quota", "-E", "quotatype=usrquota:grpquota"],
        size_mb: 64,
        kernel: false,
        expect: Expect::ReadWrite,
    },
    Row {
        name: "project",
        mkfs: &["-t", "ext4", "-I", "256", "-O", "quota,project"],
        size_mb: 64,
        kernel: false,
        expect: Expect::ReadWrite,
    },
    Row {
        name: "inline_data",
        mkfs: &["-t", "ext4", "-O", "inline_data"],
        size_mb: 64,
        kernel: true,
        expect: Expect::ReadWrite,
    },
    Row {
        name: "ea_inode",
        mkfs: &["-t", "ext4", "-O", "ea_inode"],
        size_mb: 64,
        kernel: true,
        expect: Expect::ReadWrite,
    },
    Row {
        name: "casefold",
        mkfs: &["-t", "ext4", "-O", "casefold"],
        size_mb: 64,
        kernel: false,
        expect: Expect::ReadWrite,
    },
    Row {
        name: "bigalloc-16k",
        mkfs: &["-t", "ext4", "-O", "bigalloc", "-C", "16384"],
        size_mb: 128,
        kernel: true,
        expect: Expect::ReadWrite,
    },
    Row {
        name: "bigalloc-64k",
        mkfs: &["-t", "ext4", "-O", "bigalloc", "-C", "65536"],
        size_mb: 256,
        kernel: true,
        expect: Expect::ReadWrite,
    },
    Row {
        name: "fast_commit",
        mkfs: &["-t", "ext4", "-O", "fast_commit"],
        size_mb: 64,
        kernel: true,
        expect: Expect::ReadWrite,
    },
    // Refused on purpose (docs/COMPATIBILITY.md says why).
    Row {
        name: "encrypt",
        mkfs: &["-t", "ext4", "-O", "encrypt"],
        size_mb: 64,
        kernel: true,
        expect: Expect::Refused("encrypt"),
    },
    Row {
        name: "verity",
        mkfs: &["-t", "ext4", "-O", "verity"],
        size_mb: 64,
        kernel: true,
        expect: Expect::ReadOnly("verity"),
    },
    Row { name: "mmp", mkfs: &["-t", "ext4", "-O", "mmp"], size_mb: 64, kernel: true, expect: Expect::ReadWrite },
    Row { name: "ext3", mkfs: &["-t", "ext3"], size_mb: 64, kernel: true, expect: Expect::ReadWrite },
    Row { name: "ext2", mkfs: &["-t", "ext2"], size_mb: 64, kernel: true, expect: Expect::ReadWrite },
    Row {
        name: "1k-blocks",
        mkfs: &["-t", "ext4", "-b", "1024"],
        size_mb: 48,
        kernel: true,
        expect: Expect::ReadWrite,
    },
    Row {
        name: "2k-blocks",
        mkfs: &["-t", "ext4", "-b", "2048"],
        size_mb: 48,
        kernel: true,
        expect: Expect::ReadWrite,
    },
    Row {
        name: "4k-blocks",
        mkfs: &["-t", "ext4", "-b", "4096"],
        size_mb: 64,
        kernel: true,
        expect: Expect::ReadWrite,
    },
    // The kernel refuses blocks larger than its 4 KiB pages here ("bad
    // block size 65536"): e2fsprogs is the oracle.
    Row {
        name: "64k-blocks",
        mkfs: &["-t", "ext4", "-b", "65536"],
        size_mb: 256,
        kernel: false,
        expect: Expect::ReadWrite,
    },
];
