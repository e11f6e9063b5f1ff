//! The `uext4` command: inspect ext4 images, copy files out of and into
//! them and change them, without mounting and without root.

mod args;
mod bench;
mod bench_io;
mod bench_req;
mod bench_scale;
mod bench_tree;
mod cat;
mod docs;
mod edit;
mod freefrag;
mod get;
mod info;
mod ls;
mod mbstats;
mod mount;
mod progress;
mod put;
mod stat;
mod sync;
mod util;
mod write;

use args::{BenchCmd, Cli, Cmd};
use clap::Parser;
use std::io::{self, BufWriter, Write};
use std::os::fd::AsFd;
use std::process::ExitCode;
use util::{eprint_line, os_bytes, CliError, CliResult};

fn run(cli: Cli) -> CliResult {
    match cli.cmd {
        Cmd::Info { image, groups, json: true } => {
            info::run_json(&image, groups, &mut io::stdout().lock())?;
        }
        Cmd::Info { image, groups, json: false } => {
            let mut out = BufWriter::new(io::stdout().lock());
            info::run_image(&image, groups, &mut out)?;
            out.flush()?;
        }
        Cmd::Ls { long, recursive, all, json, image, path } => {
            let fs = util::open_image(&image)?;
            let mut out = BufWriter::new(io::stdout().lock());
            let opts = ls::LsOpts { long, recursive, all };
            if json {
                ls::run_json(&fs, os_bytes(&path), opts, &mut out)?;
            } else {
                ls::run(&fs, os_bytes(&path), opts, &mut out)?;
            }
            out.flush()?;
        }
        Cmd::Cat { image, path } => {
            let fs = util::open_image(&image)?;
            // Unbuffered writes of whole chunks straight to fd 1.
            let fd = io::stdout().as_fd().try_clone_to_owned().map_err(|e| CliError::msg(format!("stdout: {e}")))?;
            let mut out = std::fs::File::from(fd);
            cat::run(&fs, os_bytes(&path), &mut out)?;
        }
        Cmd::Stat { follow, json, extents, image, path } => {
            let fs = util::open_image(&image)?;
            let mut out = BufWriter::new(io::stdout().lock());
            if extents {
                stat::run_extents(&fs, os_bytes(&path), follow, &mut out)?;
            } else if json {
                stat::run_json(&fs, os_bytes(&path), follow, &mut out)?;
            } else {
                stat::run(&fs, os_bytes(&path), follow, &mut out)?;
            }
            out.flush()?;
        }
        Cmd::Get { image, path, dest } => {
            let fs = util::open_image(&image)?;
            get::run(&fs, os_bytes(&path), &dest)?;
        }
        Cmd::Mkfs {
            image,
            size,
            block_size,
            inode_size,
            inode_ratio,
            label,
            journal_blocks,
            journal,
            inodes,
            reserved_percent,
            uuid,
            extended,
            root_directory,
            source_date_epoch,
            no_metadata_csum,
            features: feature_lists,
            fs_type,
            cluster_size,
        } => {
            if label.len() > 16 {
                return Err(CliError::msg("label longer than 16 bytes"));
            }
            let epoch =
                match source_date_epoch {
                    Some(s) => Some(s),
                    None => match std::env::var("SOURCE_DATE_EPOCH") {
                        Ok(v) => Some(v.trim().parse::<i64>().map_err(|_| {
                            CliError::msg(format!("SOURCE_DATE_EPOCH={v:?} is not a number of seconds"))
                        })?),
                        Err(_) => None,
                    },
                };
            let time = epoch.map(|sec| uext4::Timestamp { sec, nsec: 0 });
            let mut features = uext4::mkfs::MkfsFeatures::for_type(&fs_type).map_err(|e| util::fs_err("-t", e))?;
            let cluster_size = cluster_size
                .map(|c| u32::try_from(c).map_err(|_| CliError::msg(format!("-C {c}: cluster size too large"))))
                .transpose()?;
            if no_metadata_csum {
                features.apply("^metadata_csum").map_err(|e| util::fs_err("-O", e))?;
            }
            for list in &feature_lists {
                features.apply(list).map_err(|e| util::fs_err("-O", e))?;
            }
            let uuid = match uuid.as_deref() {
                None | Some("random") => None,
                Some("time") => Some(uext4::mkfs::time_uuid()),
                Some("clear") => Some([0; 16]),
                Some(u) => Some(uext4::mkfs::parse_uuid(u).map_err(|e| util::fs_err("-U", e))?),
            };
            let mut opts = uext4::mkfs::MkfsOptions {
                size,
                block_size,
                inode_size,
                inode_ratio,
                label,
                journal_blocks,
                features,
                reserved_percent,
                inodes,
                uuid,
                time,
                cluster_size,
                profile: uext4::mkfs::Mke2fsProfile::load().map_err(|e| util::fs_err("mke2fs.conf", e))?,
                fs_type: fs_type.clone(),
                ..Default::default()
            };
            if let Some(j) = &journal {
                let blocks = journal_option(j, opts.effective_block_size())?;
                opts.journal_blocks = Some(blocks);
                // As mke2fs: -J asks for a journal (ext2 becomes ext3).
                opts.features.has_journal |= blocks > 0;
            }
            for list in &extended {
                opts.apply_extended(list).map_err(|e| util::fs_err("-E", e))?;
            }
            let spinner = if progress::enabled() {
                progress::Progress::spinner(format!("writing a {} byte filesystem to {}", size, image.display()))
            } else {
                progress::Progress::hidden()
            };
            let l = uext4::mkfs::mkfs_file(&image, &opts).map_err(|e| util::fs_err(&image.display().to_string(), e))?;
            drop(spinner);
            if let Some(dir) = &root_directory {
                populate(&image, dir, &l, time)?;
            }
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
        Cmd::Put { image, src, dest } => {
            write::with_rw(&image, |fs| put::run(fs, &image, &src, os_bytes(&dest)))?;
        }
        Cmd::Mkdir { parents, image, paths } => {
            let paths: Vec<Vec<u8>> = paths.iter().map(|p| os_bytes(p).to_vec()).collect();
            write::with_rw(&image, |fs| edit::mkdir(fs, &paths, parents))?;
        }
        Cmd::Rm { recursive, force, image, paths } => {
            let paths: Vec<Vec<u8>> = paths.iter().map(|p| os_bytes(p).to_vec()).collect();
            write::with_rw(&image, |fs| edit::rm(fs, &paths, recursive, force))?;
        }
        Cmd::Mv { image, src, dest } => {
            write::with_rw(&image, |fs| edit::mv(fs, os_bytes(&src), os_bytes(&dest)))?;
        }
        Cmd::Ln { symbolic, image, target, link } => {
            write::with_rw(&image, |fs| edit::ln(fs, os_bytes(&target), os_bytes(&link), symbolic))?;
        }
        Cmd::Truncate { image, size, no_create, path } => {
            write::with_rw(&image, |fs| edit::truncate(fs, os_bytes(&path), size, no_create))?;
        }
        Cmd::Fallocate {
            image,
            keep_size,
            punch_hole,
            zero_range,
            collapse_range,
            insert_range,
            offset,
            len,
            path,
        } => {
            let opts = edit::FallocOpts { keep_size, punch_hole, zero_range, collapse_range, insert_range };
            write::with_rw(&image, |fs| edit::fallocate(fs, os_bytes(&path), opts, offset, len))?;
        }
        Cmd::Freefrag { image, json } => {
            let fs = util::open_image(&image)?;
            let mut out = BufWriter::new(io::stdout().lock());
            if json {
                freefrag::run_json(&fs, &image, &mut out)?;
            } else {
                freefrag::run(&fs, &image, &mut out)?;
            }
            out.flush()?;
        }
        Cmd::Mbstats { image, json } => {
            let fs = util::open_image(&image)?;
            let mut out = BufWriter::new(io::stdout().lock());
            if json {
                mbstats::run_json(&fs, &mut out)?;
            } else {
                mbstats::run(&fs, &mut out)?;
            }
            out.flush()?;
        }
        Cmd::Completions { shell } => {
            let mut out = BufWriter::new(io::stdout().lock());
            clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "uext4", &mut out);
            out.flush()?;
        }
        Cmd::Man { dir } => docs::man(dir.as_deref())?,
        Cmd::Sync { mountpoints } => sync::run(&mountpoints)?,
        Cmd::Mount { image, mountpoint, options, foreground } => {
            mount::run(&image, &mountpoint, &options, foreground)?;
        }
        Cmd::MountNull { mountpoint, options, foreground, data_cap } => {
            let cap = match data_cap {
                Some(v) => Some(util::parse_size(&v).map_err(|e| CliError::Msg(format!("--data-cap {v}: {e}")))?),
                None => None,
            };
            mount::run_null(&mountpoint, &options, foreground, cap)?;
        }
        Cmd::Bench { which: BenchCmd::Io { workloads, threads, seconds, device, dir, json } } => {
            let p = bench_io::IoBench { workloads, threads, seconds, device, dir, json };
            let mut out = io::stdout().lock();
            bench_io::run_io(&p, &mut out)?;
        }
        Cmd::Bench { which: BenchCmd::Requests { targets, ops, threads, seconds, options, dir, json } } => {
            let p = bench_req::ReqBench { targets, ops, threads, seconds, options, dir, json };
            let mut out = io::stdout().lock();
            bench_req::run_requests(&p, &mut out)?;
        }
        Cmd::Bench {
            which:
                BenchCmd::Scale {
                    sections,
                    sizes,
                    creates,
                    write_mib,
                    dir_entries,
                    file_writes,
                    read_seconds,
                    tree,
                    open_files,
                    image_size,
                    mkfs,
                    dir,
                    json,
                },
        } => {
            let p = bench_scale::ScaleBench {
                sections,
                sizes,
                creates,
                write_mib,
                dir_entries,
                file_writes,
                read_seconds,
                tree,
                open_files,
                image_size,
                mkfs,
                dir,
                json,
            };
            let mut out = io::stdout().lock();
            bench_scale::run_scale(&p, &mut out)?;
        }
        Cmd::Bench { which: BenchCmd::Tree { files, threads, dirs, size, image_mib, dir } } => {
            let p = bench_tree::TreeBench { files, threads, dirs, size, image_mib, dir };
            bench_tree::run_tree(&p, &mut io::stdout().lock())?;
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
    // `mount -t fuse.uext4`: invoked as a mount helper.
    if let Some(code) = mount::helper_main(|s| <Cli as clap::CommandFactory>::command().find_subcommand(s).is_some()) {
        return code;
    }
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

/// The journal size in blocks of a mke2fs `-J` option list (`size=MiB`).
fn journal_option(list: &str, block_size: u32) -> CliResult<u32> {
    let mut blocks = None;
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item.split_once('=') {
            Some(("size", v)) => {
                let mib: u64 = v.parse().map_err(|_| CliError::msg(format!("-J size={v}: not a number of MiB")))?;
                let b = (mib << 20) / u64::from(block_size);
                blocks = Some(u32::try_from(b).map_err(|_| CliError::msg(format!("-J size={v}: too large")))?);
            }
            _ => {
                return Err(CliError::msg(format!(
                    "-J {item}: journal option uext4 mkfs does not know or support (it takes size=MiB)"
                )))
            }
        }
    }
    blocks.ok_or_else(|| CliError::msg(format!("-J {list}: no size=MiB")))
}

/// `mkfs -d`: fills the image just made (`layout`) from host directory
/// `dir` through a read-write mount whose journal commits only when full
/// and whose background writeback never runs (the copy writes each file
/// back itself), with the clock fixed at `time` if given, then resets the
/// mount's traces so that the image looks freshly made.
fn populate(
    image: &std::path::Path,
    dir: &std::path::Path,
    layout: &uext4::mkfs::Layout,
    time: Option<uext4::Timestamp>,
) -> CliResult {
    let never = std::time::Duration::from_secs(1 << 30);
    let opts = uext4::MountOptions {
        commit_interval: never,
        cache_bytes: 256 << 20,
        data: uext4::DataPathConfig { writeback_interval: never, dirty_expire: never, ..Default::default() },
        ..Default::default()
    };
    uext4::Timestamp::set_fixed_clock(time.map(|t| t.sec));
    let r = write::with_rw_using(image, opts, |fs| put::populate(fs, image, dir, time));
    uext4::Timestamp::set_fixed_clock(None);
    r?;
    let now = time.unwrap_or_else(uext4::Timestamp::now);
    uext4::mkfs::reset_mount_traces(image, layout, now).map_err(|e| util::fs_err(&image.display().to_string(), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn journal_sizes() {
        assert_eq!(journal_option("size=8", 2048).unwrap(), 4096);
        assert_eq!(journal_option("size=0", 4096).unwrap(), 0);
        for bad in ["size=x", "device=/dev/sdb", "", "size=8,location=1G"] {
            assert!(journal_option(bad, 4096).is_err(), "{bad}");
        }
    }
}
