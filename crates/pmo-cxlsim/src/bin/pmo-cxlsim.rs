//! Standalone wrapper of `pmo cxlsim`: the same subcommands and exit codes.

use clap::Parser;

/// Persistent CXL switch simulator (schemes: nopb, pb, pb-rf).
#[derive(Parser)]
#[command(name = "pmo-cxlsim", version)]
struct Cli {
    #[command(subcommand)]
    command: pmo_cxlsim::cli::Command,
}

fn main() {
    let cli = Cli::parse();
    std::process::exit(pmo_cxlsim::cli::run(cli.command));
}
