//! `pmo lmdb TOOL [ARGS...]`: LMDB's own tools (`mdb_stat`, `mdb_dump`, ...) on environments
//! kept in PMOs (`pmo_lmdb::programs`; docs/lmdb.md).

use crate::common::{Ctx, KeyArg, PoolArg};

#[derive(clap::Args)]
pub(crate) struct LmdbArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArg,
    #[command(flatten)]
    pub(crate) key: KeyArg,
    /// stat, dump, load, copy or drop
    pub(crate) tool: String,
    /// The tool's arguments, e.g. `-e NAME`
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub(crate) args: Vec<String>,
}

/// `pmo lmdb`.
pub(crate) fn command(args: &LmdbArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let LmdbArgs { tool, args, .. } = args;
    let pool = ctx.open()?;
    let key = ctx.key()?;
    let code = pmo_lmdb::programs::cli(pool, &key, tool, args)?;
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}
