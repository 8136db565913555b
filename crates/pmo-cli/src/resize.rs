//! `pmo resize` and `pmo pool grow`: thin wiring over `pmo_store::resize`.

use std::path::Path;
use std::time::Instant;

use clap::Subcommand;
use pmo_store::{Pool, ResizeOptions};

use crate::common::{parse_bytes, progress, Ctx, KeyArg, PoolArg};

#[derive(Subcommand)]
pub(crate) enum ResizeCmd {
    /// Grow or shrink a PMO (needs its key; fails while attached; keeps its stable address
    /// when it can)
    #[command(
        after_help = "A resize moves the PMO to a new extent in one crash-consistent step, so the \
                      pool needs room for the new size beside the old one (`pmo pool grow` adds \
                      room). Shrinking refuses to drop pages that hold data unless --force."
    )]
    Resize {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        /// PMO to resize
        name: String,
        /// New size, e.g. 128MiB (rounded up to whole 4 KiB pages)
        #[arg(long, value_parser = parse_bytes)]
        size: u64,
        /// Shrink even if pages past the new size hold data (they are dropped)
        #[arg(long)]
        force: bool,
    },
    /// Operations on the pool itself
    #[command(name = "pool", subcommand)]
    PoolOp(PoolAction),
}

#[derive(Subcommand)]
pub(crate) enum PoolAction {
    /// Grow the pool (a pool on a DAX device only up to the device's size; never shrinks)
    Grow {
        #[command(flatten)]
        pool: PoolArg,
        /// New size of the pool, e.g. 4GiB
        #[arg(long, value_parser = parse_bytes)]
        size: u64,
    },
}

impl ResizeCmd {
    pub(crate) fn pool_and_key(&self) -> (Option<&PoolArg>, Option<&KeyArg>) {
        match self {
            ResizeCmd::Resize { pool, key, .. } => (Some(pool), Some(key)),
            ResizeCmd::PoolOp(PoolAction::Grow { pool, .. }) => (Some(pool), None),
        }
    }

    /// Whether the command needs a PMO's key.
    pub(crate) fn needs_key(&self) -> bool {
        matches!(self, ResizeCmd::Resize { .. })
    }
}

/// `pmo resize|pool grow`: takes the key (resize only), then opens the pool.
pub(crate) fn command(cmd: &ResizeCmd, ctx: &Ctx) -> anyhow::Result<()> {
    let key = if cmd.needs_key() {
        ctx.key()?
    } else {
        Default::default()
    };
    run(cmd, ctx.open()?, &ctx.pool_path(), &key)
}

pub(crate) fn run(cmd: &ResizeCmd, pool: Pool, path: &Path, key: &[u8]) -> anyhow::Result<()> {
    match cmd {
        ResizeCmd::Resize {
            name, size, force, ..
        } => {
            let t = Instant::now();
            let mut progress = progress("resize");
            let r = pool.resize(
                name,
                *size,
                key,
                ResizeOptions {
                    force: *force,
                    progress: Some(&mut progress),
                },
            )?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            let what = match r.info.size.cmp(&r.old_size) {
                std::cmp::Ordering::Greater => "grew",
                std::cmp::Ordering::Less => "shrank",
                std::cmp::Ordering::Equal => "kept",
            };
            let how = if r.in_place {
                format!("in place, capacity {} bytes", r.info.capacity)
            } else {
                format!(
                    "moved, {} copied",
                    crate::text::count(r.pages_copied, "committed page")
                )
            };
            outln!(
                "{what} PMO '{name}' from {} to {} bytes in {ms:.1} ms ({how}{})",
                r.old_size,
                r.info.size,
                if r.pages_dropped > 0 {
                    format!(", {} dropped", r.pages_dropped)
                } else {
                    String::new()
                }
            )?;
            if !r.address_kept {
                outln!(
                    "its stable address moved to {:#x} (the old range is taken)",
                    r.info.base_addr
                )?;
            }
        }
        ResizeCmd::PoolOp(PoolAction::Grow { size, .. }) => {
            let old = pool.superblock().pool_size;
            drop(pool);
            let pool = Pool::grow_pool(path, *size)?;
            outln!(
                "grew pool {} from {old} to {} bytes",
                path.display(),
                pool.superblock().pool_size
            )?;
        }
    }
    Ok(())
}
