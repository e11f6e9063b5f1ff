//! `api-snapshot JSON`: prints the public API of a crate, one item per
//! line, sorted, from its rustdoc JSON (what scripts/api-snapshot
//! compares with crates/uext4/public-api.txt).

use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(json) = std::env::args_os().nth(1) else {
        eprintln!("usage: api-snapshot RUSTDOC_JSON");
        return ExitCode::from(2);
    };
    // Blanket impls (`impl<T> From<T> for T`, `Borrow`, ...) follow from
    // the items themselves and would be most of the listing; auto traits
    // (Send, Sync, Unpin, ...) stay: losing one breaks dependents.
    match public_api::Builder::from_rustdoc_json(json).omit_blanket_impls(true).build() {
        Ok(api) => {
            // Display puts one item per line, sorted.
            print!("{api}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            // A format mismatch names both versions: pin the public-api
            // release that reads the toolchain's format (Cargo.toml).
            eprintln!("api-snapshot: {e}");
            ExitCode::FAILURE
        }
    }
}
