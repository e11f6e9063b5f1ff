//! `uext4 man`: the man pages, generated from the clap definitions so they
//! never drift from `--help`. (`uext4 completions` is a single call in
//! main.rs.)

use crate::util::{CliError, CliResult};
use clap::CommandFactory;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Writes the page of `cmd` into `dir`, then those of its subcommands
/// (as `uext4-SUB.1`, `uext4-bench-io.1`, ...), printing each file's path.
fn write_pages(cmd: clap::Command, dir: &Path, out: &mut impl Write) -> CliResult {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub.clone(), dir, out)?;
    }
    let path =
        clap_mangen::Man::new(cmd).generate_to(dir).map_err(|e| CliError::msg(format!("{}: {e}", dir.display())))?;
    writeln!(out, "{}", path.display())?;
    Ok(())
}

/// Runs `uext4 man`: the top page on stdout, or every page into `dir`.
pub fn man(dir: Option<&Path>) -> CliResult {
    let mut cmd = crate::Cli::command().disable_help_subcommand(true);
    // Names subcommand pages "uext4-info" (and their synopses "uext4 info").
    cmd.build();
    let mut out = BufWriter::new(io::stdout().lock());
    match dir {
        None => clap_mangen::Man::new(cmd).render(&mut out)?,
        Some(dir) => write_pages(cmd, dir, &mut out)?,
    }
    out.flush()?;
    Ok(())
}
