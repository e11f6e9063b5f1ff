//! The command line: every subcommand, its arguments and its help, as
//! clap parses them (`main.rs` dispatches them).

use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

use crate::util;

#[derive(Parser, Debug)]
#[command(
    name = "uext4",
    version,
    about = "Inspect, read and write ext4 images, without mounting",
    long_about = "Inspect ext4 images, copy files out of and into them and change them, without mounting\n\
                  and without root.\n\n\
                  IMAGE is an image file or a block device. The inspection commands open it read-only;\n\
                  put, mkdir, rm, mv, ln, truncate and fallocate open it read-write (replaying its journal\n\
                  first) and always unmount it cleanly before exiting, also after an error.\n\
                  PATH is a path inside the image, absolute or relative to its root directory.\n\n\
                  Errors are printed as one line starting with \"uext4: \"; the exit status is then 1\n\
                  (2 for a wrong command line)."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Print the superblock summary, in the format of `dumpe2fs -h`
    #[command(long_about = "Print the superblock summary with the field labels of `dumpe2fs -h`, followed by\n\
                            the journal superblock summary for an internal journal.\n\n\
                            Free block and inode counts are the superblock's, as dumpe2fs prints them; if the\n\
                            group descriptors disagree, a note goes to stderr. Times are shown in the local\n\
                            time zone (set TZ=UTC for UTC). If the image uses features uext4 cannot read, the\n\
                            superblock is still shown, with a warning.")]
    Info {
        /// The ext4 image file or block device
        image: PathBuf,
        /// Also list every block group: bitmap and inode table locations, free counts, flags
        #[arg(long)]
        groups: bool,
        /// Print one JSON document instead of the table
        #[arg(long)]
        json: bool,
    },
    /// List a directory (or show a single file), like `ls`
    #[command(long_about = "List the entries of a directory, one per line, sorted by name bytes.\n\n\
                            If PATH is not a directory, only PATH itself is shown. A symlink given as PATH is\n\
                            followed unless -l is given (or PATH ends with a slash).")]
    Ls {
        /// Long format: mode, links, uid, gid, size (major, minor for devices), mtime, name, link target
        #[arg(short = 'l')]
        long: bool,
        /// List subdirectories recursively, each under a "PATH:" header
        #[arg(short = 'R')]
        recursive: bool,
        /// Also show the "." and ".." entries
        #[arg(short = 'a')]
        all: bool,
        /// Print one JSON document: each listed directory with its entries and their inode fields
        #[arg(long)]
        json: bool,
        /// The ext4 image file or block device
        image: PathBuf,
        /// Directory or file inside the image
        #[arg(default_value = "/")]
        path: OsString,
    },
    /// Write a file's contents to stdout (symlinks are followed)
    Cat {
        /// The ext4 image file or block device
        image: PathBuf,
        /// Regular file inside the image
        path: OsString,
    },
    /// Show an inode's metadata, block mapping and extended attribute names
    #[command(long_about = "Show everything the inode records: number, type, mode (octal and symbolic),\n\
                            links, owner, size, 512-byte blocks, I/O block size, device numbers, flags,\n\
                            generation, xattr block, project, the four timestamps with nanoseconds, the\n\
                            mapped block runs (logical -> physical) and the names of the extended attributes.\n\n\
                            A final symlink is shown itself unless -L is given.")]
    Stat {
        /// Follow a final symlink and show its target's inode
        #[arg(short = 'L', long = "follow")]
        follow: bool,
        /// Print one JSON document instead of the table
        #[arg(long)]
        json: bool,
        /// Print the extents as `filefrag -v` does (FS_IOC_FIEMAP's answer)
        #[arg(long, conflicts_with = "json")]
        extents: bool,
        /// The ext4 image file or block device
        image: PathBuf,
        /// File, directory or other node inside the image
        path: OsString,
    },
    /// Copy a file, symlink or directory tree out of the image
    #[command(long_about = "Copy PATH (recursively, if it is a directory) from the image to DEST on the host.\n\n\
                            If DEST is an existing directory the copy goes into it as DEST/<name of PATH>, like\n\
                            `cp -r` (for the root directory, its contents go straight into DEST, which then\n\
                            takes the root's mode and times). Existing non-directories are replaced.\n\n\
                            Kept: file data (zero runs are left as holes), permission bits, access and\n\
                            modification times with nanoseconds, symlinks as symlinks, hard links within the\n\
                            copied tree, FIFOs, extended attributes in the user., trusted. and security.\n\
                            namespaces and POSIX ACLs (with a warning if the host refuses one). As root, also\n\
                            owners and device nodes; otherwise device nodes are skipped with a warning and\n\
                            owners are kept only where the host allows it. A final symlink in PATH is copied\n\
                            as a symlink.")]
    Get {
        /// The ext4 image file or block device
        image: PathBuf,
        /// File, symlink or directory inside the image
        path: OsString,
        /// Where to put the copy on the host
        dest: PathBuf,
    },
    /// Copy a host file, symlink or directory tree into the image
    #[command(long_about = "Copy SRC (recursively, if it is a directory) from the host into the image, like\n\
                            `cp -a`. If DEST is an existing directory (symlinks followed) the copy goes into it\n\
                            as DEST/<name of SRC> (for SRC \"/\", \".\" or \"..\" its contents go straight into\n\
                            DEST); otherwise DEST's parent must exist and DEST names the copy. Existing\n\
                            directories are merged into; existing non-directories are replaced.\n\n\
                            Kept: file data (all-zero 4 KiB pieces and holes are left as holes, the size is\n\
                            exact), permission bits including setuid/setgid/sticky, owner and group, access\n\
                            and modification times with nanoseconds, symlinks as symlinks (SRC itself too),\n\
                            hard links within the copied tree, FIFOs, sockets and device nodes. Not kept:\n\
                            extended attributes and ACLs. Host errors on single entries are reported and the\n\
                            copy goes on (exit status 1); a full or failing image stops it.")]
    Put {
        /// The ext4 image file or block device
        image: PathBuf,
        /// File, symlink or directory on the host
        src: PathBuf,
        /// Where to put the copy inside the image
        dest: OsString,
    },
    /// Create directories (mode 0755, owned by the caller)
    Mkdir {
        /// Make missing parent directories too; existing directories are no error
        #[arg(short = 'p', long = "parents")]
        parents: bool,
        /// The ext4 image file or block device
        image: PathBuf,
        /// Directories to create inside the image
        #[arg(required = true)]
        paths: Vec<OsString>,
    },
    /// Remove files, symlinks, nodes and (with -r) directory trees
    #[command(long_about = "Remove each PATH. A directory needs -r, which removes its whole tree depth-first.\n\
                            A final symlink is removed itself, never followed. The root directory, \".\" and\n\
                            \"..\" are refused. Errors are reported per PATH and the others are still removed.")]
    Rm {
        /// Remove directories and their contents
        #[arg(short = 'r', short_alias = 'R', long = "recursive")]
        recursive: bool,
        /// Ignore paths that do not exist
        #[arg(short = 'f', long = "force")]
        force: bool,
        /// The ext4 image file or block device
        image: PathBuf,
        /// Paths inside the image
        #[arg(required = true)]
        paths: Vec<OsString>,
    },
    /// Rename or move a file or directory
    #[command(long_about = "Rename SRC to DEST, atomically. If DEST is an existing directory (symlinks\n\
                            followed), SRC moves into it under its own name. An existing DEST is replaced if\n\
                            it is a non-directory and SRC is one too, or an empty directory and SRC a directory.")]
    Mv {
        /// The ext4 image file or block device
        image: PathBuf,
        /// Path inside the image to move (a final symlink is moved itself)
        src: OsString,
        /// New path, or an existing directory to move into
        dest: OsString,
    },
    /// Make a hard link, or a symbolic link with -s
    #[command(long_about = "Make LINKPATH a hard link to TARGET (a path inside the image; a final symlink is\n\
                            linked itself), or with -s a symlink whose target is the text TARGET. If LINKPATH is\n\
                            an existing directory, the link goes into it under TARGET's last component.\n\
                            An existing LINKPATH is an error.")]
    Ln {
        /// Make a symbolic link holding TARGET
        #[arg(short = 's', long = "symbolic")]
        symbolic: bool,
        /// The ext4 image file or block device
        image: PathBuf,
        /// Existing path (hard link) or target text (symlink)
        target: OsString,
        /// Path of the new link
        link: OsString,
    },
    /// Shrink or extend a file to a size (created if missing)
    Truncate {
        /// The ext4 image file or block device
        image: PathBuf,
        /// New size, in bytes or with a K, M, G or T suffix (powers of 1024)
        #[arg(short = 's', long = "size", value_parser = util::parse_size)]
        size: u64,
        /// Do not create a missing file
        #[arg(short = 'c', long = "no-create")]
        no_create: bool,
        /// Regular file inside the image (symlinks followed)
        path: OsString,
    },
    /// Preallocate, punch holes in, zero, collapse or insert a range of a file, like util-linux fallocate
    #[command(long_about = "Allocate the byte range OFFSET..OFFSET+LEN of PATH as unwritten extents (reading\n\
                            as zeros) and extend the size to cover it; with -k keep the size. With -p,\n\
                            deallocate the range instead (implies -k; partial blocks are zeroed); with -z,\n\
                            make the range read as zeros, keeping it allocated. With -c, remove the range\n\
                            and move what follows down; with -i, insert a hole there and move what follows\n\
                            up (both: whole blocks, inside the file). A missing PATH is created (mode 0644).")]
    Fallocate {
        /// The ext4 image file or block device
        image: PathBuf,
        /// Do not change the file size
        #[arg(short = 'k', long = "keep-size")]
        keep_size: bool,
        /// Deallocate the range (implies --keep-size)
        #[arg(short = 'p', long = "punch-hole", conflicts_with = "zero_range")]
        punch_hole: bool,
        /// Zero the range (keeping it allocated)
        #[arg(short = 'z', long = "zero-range")]
        zero_range: bool,
        /// Remove the range; what follows moves down (whole blocks)
        #[arg(short = 'c', long = "collapse-range", conflicts_with_all = ["keep_size", "punch_hole", "zero_range", "insert_range"])]
        collapse_range: bool,
        /// Insert a hole of the range's length; what follows moves up
        #[arg(short = 'i', long = "insert-range", conflicts_with_all = ["keep_size", "punch_hole", "zero_range"])]
        insert_range: bool,
        /// Start of the range, in bytes or with a K, M, G or T suffix
        #[arg(short = 'o', long = "offset", value_parser = util::parse_size, default_value = "0")]
        offset: u64,
        /// Length of the range, in bytes or with a K, M, G or T suffix
        #[arg(short = 'l', long = "length", value_parser = util::parse_size)]
        len: u64,
        /// Regular file inside the image (symlinks followed)
        path: OsString,
    },
    /// Report free-space fragmentation, in the format of e2freefrag
    Freefrag {
        /// The ext4 image file or block device
        image: PathBuf,
        /// Print one JSON document instead of the report
        #[arg(long)]
        json: bool,
    },
    /// Show the block allocator's view: per-group buddy summaries and counters
    #[command(long_about = "Load every group's block bitmap into the allocator (mballoc) and print, per group,\n\
                            the free blocks, the number of free fragments, the free buddy chunks of each order,\n\
                            the largest free order and the average-fragment order (the lists CR0 and CR1 use),\n\
                            then the allocator's counters (requests, hits, failures and extents scanned per\n\
                            criterion, prefetch counts).")]
    Mbstats {
        /// The ext4 image file or block device
        image: PathBuf,
        /// Print one JSON document instead of the table
        #[arg(long)]
        json: bool,
    },
    /// Create a fresh ext4 (or ext2, ext3) filesystem in an image file (no mke2fs needed)
    #[command(long_about = "Create (or overwrite) the image file IMAGE of --size bytes holding a fresh ext4\n\
                            filesystem with upstream mke2fs's default ext4 features (has_journal, ext_attr,\n\
                            dir_index, filetype, extent, 64bit, flex_bg, sparse_super, large_file, huge_file,\n\
                            dir_nlink, extra_isize, metadata_csum, metadata_csum_seed, orphan_file) except\n\
                            resize_inode. -O adds or drops features as mke2fs's does (e.g. -O\n\
                            ^orphan_file,^metadata_csum_seed). Block size and inode ratio default as in\n\
                            mke2fs (1 KiB blocks below 512 MiB, else 4 KiB). -t ext3 and -t ext2 make\n\
                            mke2fs.conf's ext3 and ext2 sets (block-mapped files, resize_inode; ext3 with a\n\
                            journal), -O resize_inode reserves descriptor blocks for online growth, -O\n\
                            ^extent,^64bit block-mapped files in ext4, -O bigalloc -C SIZE allocation in\n\
                            clusters of SIZE bytes (default 16 blocks).\n\n\
                            -d DIR fills the new filesystem from the host directory DIR, as mke2fs -d does\n\
                            (no root needed): files, directories, symlinks, hard links, device nodes, FIFOs and\n\
                            sockets with their modes, owners, times and extended attributes; DIR's own mode,\n\
                            owner and times go to the root directory. Entries are copied in name order and\n\
                            the image is left as freshly made (never mounted, empty journal).\n\n\
                            Reproducible images: with SOURCE_DATE_EPOCH set (or --source-date-epoch), every\n\
                            time mkfs and the copy write is that time (modification times later than it are\n\
                            clamped to it, access times equal modification times), and the UUID and directory\n\
                            hash seed, unless given with -U and -E hash_seed=, are derived from it and the\n\
                            label: the same tree and options give a byte-identical image on every run.")]
    Mkfs {
        /// The image file to create
        image: PathBuf,
        /// Size, in bytes or with a K, M, G or T suffix (powers of 1024)
        #[arg(long, short = 's', value_parser = util::parse_size)]
        size: u64,
        /// Block size in bytes (1024, 2048, 4096, ... 65536); default as mke2fs, from
        /// mke2fs.conf ($MKE2FS_CONFIG or /etc/mke2fs.conf, else mke2fs's built-in one) for
        /// the type and size class (floppy < 3M, small < 512M, default, big >= 4T, huge >= 16T)
        #[arg(short = 'b', long)]
        block_size: Option<u32>,
        /// Inode size in bytes; default as mke2fs (mke2fs.conf, 256)
        #[arg(short = 'I', long)]
        inode_size: Option<u16>,
        /// Bytes per inode; default as mke2fs, from mke2fs.conf's size classes (16384; big
        /// 32768, huge 65536, small 4096, floppy 8192 in mke2fs's built-in one)
        #[arg(short = 'i', long)]
        inode_ratio: Option<u64>,
        /// Volume label
        #[arg(short = 'L', long, default_value = "")]
        label: String,
        /// Journal size in blocks (0 for none; default as mke2fs)
        #[arg(long, conflicts_with = "journal")]
        journal_blocks: Option<u32>,
        /// Journal options as mke2fs -J: size=MiB (0 for none)
        #[arg(short = 'J', value_name = "size=MiB")]
        journal: Option<String>,
        /// Number of inodes (instead of one per --inode-ratio bytes)
        #[arg(short = 'N', long)]
        inodes: Option<u64>,
        /// Percentage of blocks reserved for root (0 to 50)
        #[arg(short = 'm', long, default_value_t = 5)]
        reserved_percent: u32,
        /// Filesystem UUID: a UUID, "random" (version 4), "time" (version 1: the time and this
        /// host's MAC address, as mke2fs) or "clear" (all zeros)
        #[arg(short = 'U', long)]
        uuid: Option<String>,
        /// Extended options as mke2fs -E, comma-separated: hash_seed=UUID, root_owner[=uid:gid],
        /// encoding=utf8, encoding_flags=strict, quotatype=usrquota:grpquota:prjquota,
        /// mmp_update_interval=SECONDS, lazy_itable_init=0|1, lazy_journal_init=0|1, discard, nodiscard
        #[arg(short = 'E', value_name = "OPTIONS")]
        extended: Vec<String>,
        /// Fill the filesystem from this host directory (as mke2fs -d)
        #[arg(short = 'd', long = "root-directory", value_name = "DIR")]
        root_directory: Option<PathBuf>,
        /// Fixed time for reproducible images (seconds since the epoch); default: the
        /// SOURCE_DATE_EPOCH environment variable, if set
        #[arg(long, value_name = "SECONDS")]
        source_date_epoch: Option<i64>,
        /// Without metadata_csum (uses uninit_bg's descriptor checksums); same as -O ^metadata_csum
        #[arg(long)]
        no_metadata_csum: bool,
        /// Features to add (name) or drop (^name), comma-separated, as mke2fs -O: has_journal,
        /// huge_file, flex_bg, metadata_csum, metadata_csum_seed, 64bit, dir_nlink, extra_isize,
        /// orphan_file, inline_data, ea_inode, large_dir, casefold, quota, project, mmp,
        /// fast_commit, extent, uninit_bg, bigalloc, resize_inode
        #[arg(short = 'O', long = "features", value_name = "FEATURES")]
        features: Vec<String>,
        /// Filesystem type as mke2fs -t: ext4, ext3 (block-mapped files, a journal) or ext2
        /// (block-mapped, no journal), with mke2fs.conf's feature sets
        #[arg(short = 't', long = "type", value_name = "TYPE", default_value = "ext4")]
        fs_type: String,
        /// Cluster size in bytes of a bigalloc filesystem (-O bigalloc), as mke2fs -C
        #[arg(short = 'C', long, value_name = "BYTES", value_parser = util::parse_size)]
        cluster_size: Option<u64>,
    },
    /// Mount an image through FUSE (needs root and /dev/fuse)
    #[command(long_about = "Serve IMAGE at MOUNTPOINT through FUSE until it is unmounted (umount MOUNTPOINT,\n\
                            fusermount3 -u MOUNTPOINT, or SIGINT/SIGTERM to the daemon), then unmount the image\n\
                            cleanly (journal committed and checkpointed, needs_recovery cleared).\n\n\
                            Runs in the background once the mount is up, unless --foreground; errors before that\n\
                            are printed here with exit status 1. The kernel checks permissions\n\
                            (default_permissions). When root mounts, other users may use the mount (allow_other,\n\
                            as for a system filesystem; -o noallow_other keeps it to root); others' mounts are\n\
                            private unless -o allow_other (which needs user_allow_other in /etc/fuse.conf).\n\n\
                            Options (-o, comma separated): ro, rw, commit=SECONDS (journal commit interval,\n\
                            default 5), allow_other|noallow_other, errors=continue|remount-ro|panic, cache=SIZE (page cache\n\
                            budget), data=ordered, journal_checksum, lock_policy=seeds|exclusive,\n\
                            dio_unwritten_no_handle=on|off, dio_unaligned_concurrent=on|off, noauto_da_alloc,\n\
                            threads=N (threads serving requests: the /dev/fuse workers, default one per CPU, 4 to\n\
                            16; on io_uring the pool serving slow requests (syncs, fallocate, large reads and\n\
                            writes), default 2, next to one queue thread per CPU), debug (print every request;\n\
                            implies --foreground),\n\
                            log=error|warn|info|debug (default warn), logfile=PATH (a background daemon\n\
                            reports there, else to syslog; in the foreground: stderr).\n\
                            FUSE features (default first): max_write=1M, direct_writes|nodirect_writes (opens that\n\
                            may write bypass the kernel page cache, writes to a file run in parallel),\n\
                            nowriteback_cache|writeback_cache (the kernel caches buffered writes and writes them back\n\
                            later; implies nodirect_writes unless direct_writes follows it; the times the kernel shows\n\
                            lag writes that bypass its cache: see docs/COMPATIBILITY.md), nostrict_dirty_limit|\n\
                            strict_dirty_limit (with writeback_cache, as root: lift the kernel's 1% dirty-page limit of\n\
                            FUSE mounts, or keep it), direct_new_files|nodirect_new_files (with writeback_cache: opens\n\
                            of new or truncated files bypass the kernel page cache),\n\
                            direct_odirect|nodirect_odirect (O_DIRECT reaches uext4's direct path),\n\
                            parallel_direct_writes|noparallel_direct_writes, direct_io (every open bypasses the\n\
                            kernel page cache), parallel_dirops|noparallel_dirops,\n\
                            readdirplus=on|auto|off, entry_timeout=86400, attr_timeout=86400, negative_timeout=1 (seconds),\n\
                            kernel_cache|nokernel_cache (the kernel keeps file pages across opens),\n\
                            nostore_writes|store_writes (experimental, off: writes through opens that bypass the kernel\n\
                            page cache are put back into it while another open of the file reads through it; a page\n\
                            dirtied through a shared mapping during a store could be overwritten).\n\
                            transport=auto|uring|dev: how requests reach the daemon: auto (default: FUSE over\n\
                            io_uring when the kernel offers it, else /dev/fuse), uring (FUSE over io_uring:\n\
                            Linux 6.14+ with CONFIG_FUSE_IO_URING, enabled with\n\
                            echo Y > /sys/module/fuse/parameters/enable_uring; falls back to /dev/fuse with a\n\
                            warning when unavailable) or dev (read/write on /dev/fuse). The daemon logs the\n\
                            transport it uses (log=info).\n\
                            Generic flags: dev, nodev, suid, nosuid, exec, noexec, atime,\n\
                            noatime, sync, async, dirsync.\n\
                            Durability: sync makes every write and change durable when the call returns, dirsync\n\
                            every namespace change (create, mkdir, link, unlink, rename, ...); O_SYNC and O_DSYNC\n\
                            writes are durable when they return in every mode. sync(1) and syncfs(2) do not reach the\n\
                            daemon (Linux sends FUSE_SYNCFS only to virtiofs): run `uext4 sync [MOUNTPOINT]`, or\n\
                            fsync the files; otherwise changes are committed within the commit interval (5 s) and\n\
                            buffered data written back when 30 s old, as on ext4. See docs/COMPATIBILITY.md.")]
    Mount {
        /// The ext4 image file or block device
        image: PathBuf,
        /// An existing directory to mount it on
        mountpoint: PathBuf,
        /// Mount options, comma separated (may be repeated)
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Vec<String>,
        /// Stay in the foreground (stop with Ctrl-C)
        #[arg(short = 'f', long)]
        foreground: bool,
    },
    /// Mount the null backend: uext4's FUSE layer over an in-memory tree (benchmarks only)
    #[command(
        hide = true,
        long_about = "Serve an empty in-memory tree at MOUNTPOINT through uext4's own FUSE layer (the same\n\
                      handshake, options, transports and threads as `uext4 mount`) with no engine behind it:\n\
                      the ceiling the FUSE protocol and its transport set, for benchmarks\n\
                      (bench/fio-compare.sh's null target). Takes the FUSE options of `uext4 mount`\n\
                      (transport=, threads=, writeback_cache, timeouts, allow_other, ...); the engine's\n\
                      options are accepted and ignored. File data is kept in memory up to --data-cap; past\n\
                      it, writes into new pages are dropped and those pages read back as zeros. Nothing is\n\
                      kept after the unmount."
    )]
    MountNull {
        /// An existing directory to mount it on
        mountpoint: PathBuf,
        /// Mount options, comma separated (may be repeated)
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Vec<String>,
        /// Stay in the foreground (stop with Ctrl-C)
        #[arg(short = 'f', long)]
        foreground: bool,
        /// Most file data kept in memory (default: a quarter of the RAM)
        #[arg(long, value_name = "SIZE")]
        data_cap: Option<String>,
    },
    /// Make everything written to uext4 mounts durable (sync(1) cannot)
    #[command(long_about = "Write back and commit everything each uext4 mount holds, and return only when it is\n\
                            durable (it survives a crash of the machine or a kill of the daemon). sync(1) and\n\
                            syncfs(2) write the kernel's dirty pages to the daemon but do not reach further: this\n\
                            kernel sends FUSE_SYNCFS only to virtiofs. It runs syncfs(2), fsyncs the mount's files\n\
                            that processes have open or mapped (their pages may still be the kernel's), then asks\n\
                            the daemon to commit. Without MOUNTPOINT: every uext4 mount in /proc/self/mountinfo.\n\
                            Any user of a mount may run it (as another user than root, only that user's open files\n\
                            are fsynced).\n\
                            Otherwise a change is durable after fsync(2)/fdatasync(2) of the file (or of its\n\
                            directory, for names), or within ext4's windows: metadata at the next commit (5 s),\n\
                            buffered data once written back (when 30 s old) and committed.")]
    Sync {
        /// Mount points of uext4 mounts (default: every uext4 mount)
        mountpoints: Vec<PathBuf>,
    },
    /// Print a shell completion script to stdout
    #[command(long_about = "Print the completion script for SHELL to stdout, generated from the same definitions\n\
                            as --help. For bash, save it as ~/.local/share/bash-completion/completions/uext4;\n\
                            for zsh, as a file named _uext4 in a directory of $fpath; for fish, as\n\
                            ~/.config/fish/completions/uext4.fish.")]
    Completions {
        /// The shell to complete for
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout, or write one page per subcommand
    #[command(long_about = "Print the uext4(1) man page in roff to stdout (view it with `uext4 man | man -l -`),\n\
                            or with --dir write uext4.1 and one uext4-SUBCOMMAND.1 page per subcommand there.")]
    Man {
        /// Write the pages into this existing directory instead of stdout
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Run a built-in benchmark
    Bench {
        #[command(subcommand)]
        which: BenchCmd,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum BenchCmd {
    /// Seeds 000-004: the fio workloads W1-W4 and W5 file creates in process, default switches vs each seed's "before"
    Io {
        /// Workloads, comma separated (w1 direct randrw, w2 buffered 8k randrw, w3 unwritten, w4 unaligned 2k, w5 4k file creates)
        #[arg(long, value_delimiter = ',', default_value = "w1,w2,w3,w4")]
        workloads: Vec<String>,
        /// Thread counts, comma separated; 0 = the seed's job count
        #[arg(long, value_delimiter = ',', default_value = "1,2,0")]
        threads: Vec<usize>,
        /// Seconds per run
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// mem (RAM disk) or file (an image file in --dir)
        #[arg(long, default_value = "mem")]
        device: String,
        /// Directory for the image file with --device file
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
        /// Print JSON lines instead of a markdown table
        #[arg(long)]
        json: bool,
    },
    /// The cost of one FUSE round trip: stat (attr_timeout=0) and 4 KiB direct_io reads through a fresh mount
    #[command(long_about = "Threads repeating one trivial request through a fresh `uext4 mount`: stat(2) of one\n\
                            file with attr_timeout=0 (one GETATTR each) and a 4 KiB pread(2) of a file in the\n\
                            daemon's cache with direct_io (one READ each). The same operations on the kernel's\n\
                            ext4 (loop mount, needs root) and on fuse2fs (if installed) show what the transport\n\
                            costs. Prints requests per second per target, operation and thread count.")]
    Requests {
        /// Targets, comma separated: uext4, null (the null backend: uext4's FUSE layer, no engine), kernel (loop mount), fuse2fs
        #[arg(long, value_delimiter = ',', default_value = "uext4,null,kernel,fuse2fs")]
        targets: Vec<String>,
        /// Operations, comma separated: stat, read
        #[arg(long, value_delimiter = ',', default_value = "stat,read")]
        ops: Vec<String>,
        /// Thread counts, comma separated
        #[arg(long, value_delimiter = ',', default_value = "1,2,8")]
        threads: Vec<usize>,
        /// Seconds per run
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// More `uext4 mount -o` options for the uext4 and null targets (e.g. transport=uring)
        #[arg(short = 'o', long, value_name = "OPTIONS")]
        options: Option<String>,
        /// Directory for the images and mount points (default /dev/shm)
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Print JSON lines instead of a markdown table
        #[arg(long)]
        json: bool,
    },
    /// Issue 24: does an operation's cost grow with the image, directory, file or tree size (library only, no FUSE)
    #[command(long_about = "The engine's own scale curve, in process through the library's public API (the\n\
                            mount's is bench/scale.sh). Each section makes a sparse image in --dir (as\n\
                            mkfs.ext4 -E lazy_itable_init=1,lazy_journal_init=1: by uext4's mkfs, or by mkfs.ext4\n\
                            with --mkfs mkfs.ext4), checks it with e2fsck -fn after unmount (a dirty image is an\n\
                            error) and deletes it. size: per --sizes image, open, first statfs, --creates creates\n\
                            (create, 4 KiB write, close), unlinks and top-level mkdirs, a --write-mib sequential\n\
                            write + fsync, unmount, with each per-op cost as a ratio to the first size's. dir: one\n\
                            directory grown to --dir-entries files (creates/s per tenth), random lookups, a listing,\n\
                            removing all. file: --file-writes random 4 KiB direct writes into a 1 TiB sparse file\n\
                            (IOPS of the first and last tenth), random reads, the extent tree's depth. tree: DxF\n\
                            files populated and walked twice (read_dir + metadata), RSS after each. open:\n\
                            --open-files files open at once, then closed.")]
    Scale {
        /// Sections, comma separated: size, dir, file, tree, open
        #[arg(long, value_delimiter = ',', default_value = "size,dir,file,tree,open")]
        sections: Vec<String>,
        /// Image sizes of the size section, comma separated (K, M, G, T suffixes)
        #[arg(long, value_delimiter = ',', default_value = "1G,1T,15T")]
        sizes: Vec<String>,
        /// Creates, unlinks and mkdirs per image size
        #[arg(long, default_value_t = 10_000)]
        creates: u64,
        /// MiB of the size section's sequential write (then fsync)
        #[arg(long, default_value_t = 1024)]
        write_mib: u64,
        /// Files in the dir section's one directory
        #[arg(long, default_value_t = 1_000_000)]
        dir_entries: u64,
        /// Random 4 KiB direct writes into the file section's 1 TiB sparse file
        #[arg(long, default_value_t = 1_000_000)]
        file_writes: u64,
        /// Seconds of random reads in the file section
        #[arg(long, default_value_t = 3.0)]
        read_seconds: f64,
        /// The tree section's shape: DIRSxFILES
        #[arg(long, default_value = "2000x1000")]
        tree: String,
        /// Files the open section holds open at once
        #[arg(long, default_value_t = 100_000)]
        open_files: u64,
        /// Image size of the dir, file, tree and open sections
        #[arg(long, default_value = "64G")]
        image_size: String,
        /// Who makes the images: uext4 or mkfs.ext4
        #[arg(long, default_value = "uext4")]
        mkfs: String,
        /// Directory for the (sparse) images
        #[arg(long, default_value = "/dev/shm")]
        dir: PathBuf,
        /// Print JSON lines instead of markdown tables
        #[arg(long)]
        json: bool,
    },
    /// Issue 25: the engine's share of tar extract and rm -rf (the FUSE adapter's calls per file, no FUSE)
    #[command(long_about = "Threads each replay, in a tree of their own, the calls the FUSE adapter makes for\n\
                            one file of a tar extract (lookup miss, create, write, getxattr miss, three\n\
                            setattrs, getattr of the directory, release) and of rm -rf (lookup, getattr,\n\
                            unlink, forget; rmdir), on a sparse image in --dir that is checked with e2fsck -fn\n\
                            and deleted. Prints us per file per call, CPU per file and engine counters.")]
    Tree {
        /// Files per thread
        #[arg(long, default_value_t = 20000)]
        files: u64,
        /// Threads, each in its own directories
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Directories per thread
        #[arg(long, default_value_t = 16)]
        dirs: u64,
        /// Bytes written to each file
        #[arg(long, default_value_t = 4096)]
        size: usize,
        /// Image size in MiB
        #[arg(long, default_value_t = 4096)]
        image_mib: u64,
        /// Directory for the image
        #[arg(long, default_value = "/dev/shm")]
        dir: PathBuf,
    },
    /// Seed 004: threads allocating files on a fragmented in-memory image, with and without CR1.5
    Alloc {
        /// Image size in MiB
        #[arg(long, default_value_t = 1024)]
        image_mib: u64,
        /// Block size in bytes
        #[arg(long, default_value_t = 1024)]
        block_size: u32,
        /// Size of each file in KiB
        #[arg(long, default_value_t = 64)]
        file_kib: u64,
        /// Files per run
        #[arg(long, default_value_t = 4096)]
        files: u64,
        /// Thread counts, comma separated
        #[arg(long, value_delimiter = ',', default_value = "1,2,64")]
        threads: Vec<usize>,
        /// Length of each free run after fragmenting, in KiB
        #[arg(long, default_value_t = 48)]
        free_kib: u64,
        /// Length of the used gap between free runs, in KiB
        #[arg(long, default_value_t = 16)]
        used_kib: u64,
        /// Print JSON instead of a markdown table
        #[arg(long)]
        json: bool,
        /// Also print every run's full counters
        #[arg(long)]
        verbose: bool,
    },
}
