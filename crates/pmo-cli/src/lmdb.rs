//! `pmo lmdb TOOL [ARGS...]`: LMDB's own tools (`mdb_stat`, `mdb_dump`, ...) on environments
//! kept in PMOs (`pmo_lmdb::programs`; docs/lmdb.md); `pmo lmdb locks [--clean]`: the lock
//! directories outside the pool, orphans listed and removed (`pmo_lmdb::lockdir`).

use std::path::{Path, PathBuf};

use anyhow::bail;
use pmo_lmdb::lockdir::{self, Removal, Status};

use crate::common::{Ctx, KeyArg, PoolArg};
use crate::text::shown;

#[derive(clap::Args)]
pub(crate) struct LmdbArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArg,
    #[command(flatten)]
    pub(crate) key: KeyArg,
    /// stat, dump, load, copy or drop; or `locks [--clean] [--lock-dir DIR]`: list the lock
    /// directories (live or orphan) and remove the orphans no process uses
    pub(crate) tool: String,
    /// The tool's arguments, e.g. `-e NAME`
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub(crate) args: Vec<String>,
}

/// `pmo lmdb`.
pub(crate) fn command(args: &LmdbArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let LmdbArgs { tool, args, .. } = args;
    if tool == "locks" {
        return locks(args);
    }
    let pool = ctx.open()?;
    let key = ctx.key()?;
    let code = pmo_lmdb::programs::cli(pool, &key, tool, args)?;
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

/// `pmo lmdb locks [--clean] [--lock-dir DIR]`: one line per lock directory, then a summary.
fn locks(args: &[String]) -> anyhow::Result<()> {
    let mut clean = false;
    let mut root: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--clean" => clean = true,
            "--lock-dir" => match it.next() {
                Some(d) => root = Some(PathBuf::from(d)),
                None => bail!("--lock-dir needs a directory"),
            },
            _ => bail!(
                "pmo lmdb locks: unknown argument '{}' (--clean, --lock-dir DIR)",
                shown(a)
            ),
        }
    }
    let root = root.unwrap_or_else(lockdir::lock_root);
    let found: Vec<(lockdir::Found, Option<Removal>)> = if clean {
        lockdir::clean(&root)?
    } else {
        lockdir::scan(&root)?
            .into_iter()
            .map(|f| (f, None))
            .collect()
    };
    let (mut live, mut orphans, mut removed, mut other) = (0, 0, 0, 0);
    let mut failed = Vec::new();
    for (f, done) in &found {
        let status = match &f.status {
            Status::Live => {
                live += 1;
                "live".to_string()
            }
            Status::Orphan(why) => {
                orphans += 1;
                format!("orphan ({why})")
            }
            Status::Ownerless => {
                orphans += 1;
                "orphan (made by an older pmo: no owner file, pool unknown)".to_string()
            }
            Status::Unknown(why) => {
                other += 1;
                format!("unknown ({why}): kept")
            }
            Status::NotOurs(why) => {
                other += 1;
                format!("not pmo's ({why}): never touched")
            }
        };
        let action = match done {
            Some(Removal::Removed) => {
                removed += 1;
                ": removed"
            }
            Some(Removal::InUse) => ": in use, kept",
            Some(Removal::Absent) => ": gone meanwhile",
            Some(Removal::NotOurs(_)) => ": not recognisably pmo's, kept",
            Some(Removal::Failed(e)) => {
                failed.push(e.clone());
                ": not removed"
            }
            None if f.in_use => ", in use",
            None => "",
        };
        let whose = f.owner.as_ref().map_or(String::new(), |o| {
            format!(
                "PMO '{}' of {}: ",
                shown(&o.pmo),
                o.pool
                    .as_deref()
                    .map_or("a pool with no file".into(), |p| shown(
                        &p.to_string_lossy()
                    ))
            )
        });
        outln!("{}: {whose}{status}{action}", display(&f.dir))?;
    }
    let what = if clean {
        format!(", {removed} removed")
    } else {
        String::new()
    };
    outln!(
        "{} under {}: {live} live, {}{what}{}",
        crate::text::count(found.len() as u64, "lock directory"),
        display(&root),
        crate::text::count(orphans, "orphan"),
        if other > 0 {
            format!(", {other} other")
        } else {
            String::new()
        }
    )?;
    if let Some(e) = failed.first() {
        bail!(
            "{} not removed: {e}",
            crate::text::count(failed.len() as u64, "orphan")
        );
    }
    Ok(())
}

fn display(p: &Path) -> String {
    shown(&p.to_string_lossy())
}
