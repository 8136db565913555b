//! `pmo rename|rekey|rotate|export|import|copy|snapshot`: thin wiring over `pmo_store::lifecycle`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail};
use clap::Subcommand;
use pmo_store::Pool;
use zeroize::Zeroizing;

use crate::common::{progress, Ctx, KeyArg, PoolArg};

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
    /// Re-encrypt every page of a PMO under a new data key (the key stays); resumes a rotation
    /// a crash cut off (fails while attached)
    Rotate {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        /// PMO to rotate
        name: String,
    },
    /// Export a PMO's last psynced state to a self-contained, encrypted, authenticated file
    Export {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        /// PMO to export
        name: String,
        /// File to write (must not exist)
        file: PathBuf,
    },
    /// Import an export file as a new PMO (verified whole before anything is created)
    Import {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        /// Export file
        file: PathBuf,
        /// Name of the new PMO [default: the name it was exported under]
        #[arg(long)]
        name: Option<String>,
    },
    /// Snapshot a PMO while its writer keeps working: a new PMO (or an export file with
    /// --to-file) exactly as of one psync
    Snapshot {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        /// Write an export file (must not exist) instead of a new PMO
        #[arg(long, value_name = "FILE", conflicts_with = "new")]
        to_file: Option<PathBuf>,
        /// PMO to snapshot
        name: String,
        /// Name of the snapshot PMO (same key)
        #[arg(required_unless_present = "to_file")]
        new: Option<String>,
    },
    /// Copy a PMO to a new one (new nonces; the same key, or --new-key-file / PMO_NEW_KEY)
    Copy {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        /// File holding the copy's key [default: PMO_NEW_KEY, else the source's key]
        #[arg(long, value_name = "FILE")]
        new_key_file: Option<PathBuf>,
        /// PMO to copy
        name: String,
        /// Name of the copy
        new: String,
    },
}

impl LifeCmd {
    pub(crate) fn pool_and_key(&self) -> (Option<&PoolArg>, Option<&KeyArg>) {
        match self {
            LifeCmd::Rename { pool, key, .. }
            | LifeCmd::Rekey { pool, key, .. }
            | LifeCmd::Export { pool, key, .. }
            | LifeCmd::Import { pool, key, .. }
            | LifeCmd::Snapshot { pool, key, .. }
            | LifeCmd::Rotate { pool, key, .. }
            | LifeCmd::Copy { pool, key, .. } => (Some(pool), Some(key)),
        }
    }
}

/// `pmo rename|rekey|rotate|export|import|snapshot|copy`: opens the pool, then takes the key.
pub(crate) fn command(cmd: &LifeCmd, ctx: &Ctx) -> anyhow::Result<()> {
    run(cmd, ctx.open()?, &ctx.key()?)
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
        LifeCmd::Rotate { name, .. } => {
            let t = Instant::now();
            let info = pool.rotate(name, key, &mut progress("rotate"))?;
            let mib = info.size as f64 / (1 << 20) as f64;
            let s = t.elapsed().as_secs_f64();
            outln!(
                "rotated PMO '{name}' ({mib:.1} MiB re-encrypted under a new data key in {s:.3} s)"
            )?;
        }
        LifeCmd::Export { name, file, .. } => {
            let t = Instant::now();
            let pages = pool.export(name, key, file, &mut progress("export"))?;
            let mib = (pages * 4096) as f64 / (1 << 20) as f64;
            let s = t.elapsed().as_secs_f64();
            outln!(
                "exported PMO '{name}' to {} ({mib:.1} MiB in {s:.3} s)",
                file.display()
            )?;
        }
        LifeCmd::Import { file, name, .. } => {
            let info = pool.import(file, name.as_deref(), key, &mut progress("import"))?;
            outln!("imported {} as PMO '{}'", file.display(), info.name)?;
        }
        LifeCmd::Snapshot {
            name, new, to_file, ..
        } => {
            let t = Instant::now();
            let (rep, dest) = match (new, to_file) {
                (_, Some(file)) => (
                    pool.snapshot_to_file(name, key, file, &mut progress("snapshot"))?,
                    file.display().to_string(),
                ),
                (Some(new), None) => (
                    pool.snapshot(name, new, key, None, &mut progress("snapshot"))?
                        .1,
                    format!("PMO '{new}'"),
                ),
                (None, None) => bail!("name the snapshot PMO, or give --to-file FILE"),
            };
            let mib = (rep.pages * 4096) as f64 / (1 << 20) as f64;
            let s = t.elapsed().as_secs_f64();
            let gated = if rep.gated {
                ", the writer's psyncs waited for the last"
            } else {
                ""
            };
            outln!(
                "snapshot of PMO '{name}' as of psync {} to {dest}: {mib:.1} MiB in {s:.3} s ({} {}{gated})",
                rep.seq,
                rep.passes,
                if rep.passes == 1 { "pass" } else { "passes" },
            )?;
        }
        LifeCmd::Copy {
            name,
            new,
            new_key_file,
            ..
        } => {
            let nk = if new_key_file.is_some() || std::env::var_os("PMO_NEW_KEY").is_some() {
                Some(new_key(new_key_file.as_deref())?)
            } else {
                None
            };
            pool.copy(
                name,
                new,
                key,
                nk.as_deref().map(|k| &k[..]),
                &mut progress("copy"),
            )?;
            outln!("copied PMO '{name}' to '{new}'")?;
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
