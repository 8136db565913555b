//! `pmo rename|rekey|export|import|copy|snapshot`: thin wiring over `pmo_store::lifecycle`.

use clap::Subcommand;
use pmo_store::Pool;

use crate::cmd::{KeyArg, PoolArg};

#[derive(Subcommand)]
pub(crate) enum LifeCmd {
    /// Rename a PMO (needs its key; fails while attached)
    Rename {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        /// PMO to rename
        name: String,
        /// Its new name
        new: String,
    },
}

impl LifeCmd {
    pub(crate) fn pool_and_key(&self) -> (Option<&PoolArg>, Option<&KeyArg>) {
        match self {
            LifeCmd::Rename { pool, key, .. } => (Some(pool), Some(key)),
        }
    }
}

pub(crate) fn run(cmd: &LifeCmd, pool: Pool, key: &[u8]) -> anyhow::Result<()> {
    match cmd {
        LifeCmd::Rename { name, new, .. } => {
            pool.rename(name, new, key)?;
            outln!("renamed PMO '{name}' to '{new}'")?;
        }
    }
    Ok(())
}
