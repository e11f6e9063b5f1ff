//! The `uext4` command: inspect ext4 images and copy files out of them,
//! without mounting and without root.

mod bench;
mod cat;
mod freefrag;
mod get;
mod info;
mod ls;
mod mbstats;
mod stat;
mod util;

use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::io::{self, BufWriter, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;
use util::{eprint_line, os_bytes, CliError, CliResult};

#[derive(Parser, Debug)]
#[command(
    name = "uext4",
    version,
    about = "Inspect ext4 images and copy files out of them, without mounting",
    long_about = "Inspect ext4 images and copy files out of them, without mounting and without root.\n\n\
                  IMAGE is an image file or a block device; it is only ever opened read-only.\n\
                  PATH is a path inside the image, absolute or relative to its root directory.\n\n\
                  Errors are printed as one line starting with \"uext4: \"; the exit status is then 1\n\
                  (2 for a wrong command line)."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
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
    /// Report free-space fragmentation, in the format of e2freefrag
    Freefrag {
        /// The ext4 image file or block device
        image: PathBuf,
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
    },
    /// Create a fresh ext4 filesystem in an image file (no mke2fs needed)
    #[command(long_about = "Create (or overwrite) the image file IMAGE of --size bytes holding a fresh ext4\n\
                            filesystem with mke2fs's default ext4 features (has_journal, ext_attr, dir_index,\n\
                            filetype, extent, 64bit, flex_bg, sparse_super, large_file, huge_file, dir_nlink,\n\
                            extra_isize, metadata_csum) except resize_inode. Block size and inode ratio\n\
                            default as in mke2fs (1 KiB blocks below 512 MiB, else 4 KiB).")]
    Mkfs {
        /// The image file to create
        image: PathBuf,
        /// Size, in bytes or with a K, M, G or T suffix (powers of 1024)
        #[arg(long, short = 's', value_parser = util::parse_size)]
        size: u64,
        /// Block size in bytes (1024, 2048, 4096, ... 65536)
        #[arg(short = 'b', long)]
        block_size: Option<u32>,
        /// Inode size in bytes
        #[arg(short = 'I', long, default_value_t = 256)]
        inode_size: u16,
        /// Bytes per inode
        #[arg(short = 'i', long)]
        inode_ratio: Option<u64>,
        /// Volume label
        #[arg(short = 'L', long, default_value = "")]
        label: String,
        /// Journal size in blocks (0 for none; default as mke2fs)
        #[arg(short = 'J', long)]
        journal_blocks: Option<u32>,
        /// Without metadata_csum (uses uninit_bg's descriptor checksums)
        #[arg(long)]
        no_metadata_csum: bool,
    },
    /// Run a built-in benchmark
    Bench {
        #[command(subcommand)]
        which: BenchCmd,
    },
}

#[derive(Subcommand, Debug)]
enum BenchCmd {
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

fn run(cli: Cli) -> CliResult {
    match cli.cmd {
        Cmd::Info { image, groups } => {
            let mut out = BufWriter::new(io::stdout().lock());
            info::run_image(&image, groups, &mut out)?;
            out.flush()?;
        }
        Cmd::Ls { long, recursive, all, image, path } => {
            let fs = util::open_image(&image)?;
            let mut out = BufWriter::new(io::stdout().lock());
            ls::run(&fs, os_bytes(&path), ls::LsOpts { long, recursive, all }, &mut out)?;
            out.flush()?;
        }
        Cmd::Cat { image, path } => {
            let fs = util::open_image(&image)?;
            // Unbuffered writes of whole chunks straight to fd 1.
            let fd = io::stdout().as_fd().try_clone_to_owned().map_err(|e| CliError::msg(format!("stdout: {e}")))?;
            let mut out = std::fs::File::from(fd);
            cat::run(&fs, os_bytes(&path), &mut out)?;
        }
        Cmd::Stat { follow, image, path } => {
            let fs = util::open_image(&image)?;
            let mut out = BufWriter::new(io::stdout().lock());
            stat::run(&fs, os_bytes(&path), follow, &mut out)?;
            out.flush()?;
        }
        Cmd::Get { image, path, dest } => {
            let fs = util::open_image(&image)?;
            get::run(&fs, os_bytes(&path), &dest)?;
        }
        Cmd::Mkfs { image, size, block_size, inode_size, inode_ratio, label, journal_blocks, no_metadata_csum } => {
            if label.len() > 16 {
                return Err(CliError::msg("label longer than 16 bytes"));
            }
            let opts = uext4::mkfs::MkfsOptions {
                size,
                block_size,
                inode_size,
                inode_ratio,
                label,
                journal_blocks,
                metadata_csum: !no_metadata_csum,
                ..Default::default()
            };
            let l = uext4::mkfs::mkfs_file(&image, &opts).map_err(|e| util::fs_err(&image.display().to_string(), e))?;
            println!(
                "{}: {} blocks of {} bytes, {} groups, {} inodes, journal {} blocks",
                image.display(),
                l.blocks_count,
                l.block_size,
                l.groups,
                u64::from(l.inodes_per_group) * u64::from(l.groups),
                l.journal.iter().map(|r| u64::from(r.1)).sum::<u64>()
            );
        }
        Cmd::Freefrag { image } => {
            let fs = util::open_image(&image)?;
            let mut out = BufWriter::new(io::stdout().lock());
            freefrag::run(&fs, &image, &mut out)?;
            out.flush()?;
        }
        Cmd::Mbstats { image } => {
            let fs = util::open_image(&image)?;
            let mut out = BufWriter::new(io::stdout().lock());
            mbstats::run(&fs, &mut out)?;
            out.flush()?;
        }
        Cmd::Bench {
            which:
                BenchCmd::Alloc { image_mib, block_size, file_kib, files, threads, free_kib, used_kib, json, verbose },
        } => {
            let p = bench::AllocBench {
                image_mib,
                block_size,
                file_kib,
                files,
                threads,
                free_kib,
                used_kib,
                json,
                verbose,
            };
            let mut out = io::stdout().lock();
            bench::run_alloc(&p, &mut out)?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) if util::failed() => ExitCode::FAILURE,
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`uext4 cat IMG F | head`): nothing to say.
        Err(CliError::BrokenPipe) if util::failed() => ExitCode::FAILURE,
        Err(CliError::BrokenPipe) => ExitCode::SUCCESS,
        Err(CliError::Msg(m)) => {
            eprint_line(&m);
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }
}
