//! `pmo rename|rekey|export|import|copy|snapshot`: thin wiring over `pmo_store::lifecycle`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail};
use clap::Subcommand;
use pmo_store::Pool;
use zeroize::Zeroizing;

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
    /// Change a PMO's key without re-encrypting it (the data key is re-wrapped)
    Rekey {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        /// File holding the new key [default: PMO_NEW_KEY]
        #[arg(long, value_name = "FILE")]
        new_key_file: Option<PathBuf>,
        /// PMO to rekey
        name: String,
    },
}

impl LifeCmd {
    pub(crate) fn pool_and_key(&self) -> (Option<&PoolArg>, Option<&KeyArg>) {
        match self {
            LifeCmd::Rename { pool, key, .. } | LifeCmd::Rekey { pool, key, .. } => {
                (Some(pool), Some(key))
            }
        }
    }
}

pub(crate) fn run(cmd: &LifeCmd, pool: Pool, key: &[u8]) -> anyhow::Result<()> {
    match cmd {
        LifeCmd::Rename { name, new, .. } => {
            pool.rename(name, new, key)?;
            outln!("renamed PMO '{name}' to '{new}'")?;
        }
        LifeCmd::Rekey {
            name, new_key_file, ..
        } => {
            let new_key = new_key(new_key_file.as_deref())?;
            let t = Instant::now();
            pool.rekey(name, key, &new_key)?;
            let us = t.elapsed().as_micros();
            outln!("rekeyed PMO '{name}' in {us} us (no page re-encrypted)")?;
        }
    }
    Ok(())
}

/// The new key of `rekey`/`copy`: `--new-key-file`, else `PMO_NEW_KEY` (never a prompt).
fn new_key(file: Option<&Path>) -> anyhow::Result<Zeroizing<Vec<u8>>> {
    if file.is_some() {
        return crate::keysrc::given(file)
            .map_err(|e| anyhow!(e))?
            .ok_or_else(|| anyhow!("no new key"));
    }
    match std::env::var_os("PMO_NEW_KEY") {
        Some(k) if !k.is_empty() => Ok(Zeroizing::new(k.into_encoded_bytes())),
        Some(_) => bail!("PMO_NEW_KEY is empty"),
        None => bail!("no new key given: use --new-key-file FILE or set PMO_NEW_KEY"),
    }
}
