//! `pmo fs check|ls|cat|put|rm|mkdir`: thin wiring over `pmo_fs::FileStore` (the file store
//! in PMOs that `pmo bench filebench` runs on; docs/filebench.md).

use std::io::Read;
use std::path::PathBuf;

use anyhow::anyhow;
use clap::Subcommand;
use pmo_fs::{FileStore, FsError, FsOptions, StatKind};
use pmo_store::Pool;
use zeroize::Zeroizing;

use crate::common::{Ctx, IntegrityProblem, KeyArg, PoolArg};

#[derive(Subcommand, Debug)]
pub(crate) enum FsAction {
    /// Check the store: every file against its directory and its segments, every header, every
    /// file's data read whole, and the pool's space accounting (used + free = heap: nothing
    /// leaked). One line per finding on stderr; exit 2 if any
    Check,
    /// List a directory (default /)
    Ls {
        #[arg(default_value = "/")]
        path: String,
        /// Also list every directory below it
        #[arg(short = 'R', long)]
        recursive: bool,
    },
    /// Write a file's bytes to standard output
    Cat { path: String },
    /// Write a file (created, or replaced) from FILE or standard input, and fsync it
    Put {
        path: String,
        /// Local file to copy in [default: standard input]
        from: Option<PathBuf>,
    },
    /// Remove a file, or an empty directory
    Rm { path: String },
    /// Create a directory
    Mkdir {
        path: String,
        /// Create missing parents too
        #[arg(short, long)]
        parents: bool,
    },
}

/// An integrity failure exits 2, everything else 1.
fn fs_err(e: FsError) -> anyhow::Error {
    if e.is_integrity() {
        IntegrityProblem(e.to_string()).into()
    } else {
        anyhow!(e)
    }
}

// `pmo fs`'s options: the pool, the key and the action. No doc comment: the command's help is
// the dispatcher's.
#[derive(clap::Args)]
pub(crate) struct FsArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArg,
    #[command(flatten)]
    pub(crate) key: KeyArg,
    #[command(subcommand)]
    pub(crate) action: FsAction,
}

/// `pmo fs ACTION`: the key given, else the store's default, then [`run`].
pub(crate) fn command(args: &FsArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let FsArgs { action, .. } = args;
    let key = crate::keysrc::given(ctx.key.key_file.as_deref()).map_err(|e| anyhow!(e))?;
    run(action, ctx.open()?, key)?;
    Ok(())
}

pub(crate) fn run(
    action: &FsAction,
    pool: Pool,
    key: Option<Zeroizing<Vec<u8>>>,
) -> anyhow::Result<()> {
    let mut opts = FsOptions::default();
    if let Some(k) = key {
        opts.key = k.to_vec();
    }
    let fs = FileStore::open(pool, opts).map_err(fs_err)?;
    for r in fs.repairs() {
        errln!("pmo: repaired: {r}");
    }
    match action {
        FsAction::Check => check(&fs)?,
        FsAction::Ls { path, recursive } => ls(&fs, path, *recursive)?,
        FsAction::Cat { path } => {
            let data = fs.read_file(path).map_err(fs_err)?;
            crate::out::stdout_bytes(&data)?;
        }
        FsAction::Put { path, from } => {
            // No file is larger than the pool's heap: read one byte more at most, so that an
            // endless input (a device, a pipe) is refused instead of filling the memory.
            let heap = fs.pool().pool_info()?.heap_len;
            let (input, what): (Box<dyn Read>, String) = match from {
                Some(f) => (
                    Box::new(std::fs::File::open(f).map_err(|e| {
                        anyhow!("cannot read {}: {}", f.display(), crate::errtext::io(&e))
                    })?),
                    f.display().to_string(),
                ),
                None => (Box::new(std::io::stdin().lock()), "standard input".into()),
            };
            let mut data = Vec::new();
            input
                .take(heap + 1)
                .read_to_end(&mut data)
                .map_err(|e| anyhow!("cannot read {what}: {}", crate::errtext::io(&e)))?;
            if data.len() as u64 > heap {
                return Err(fs_err(FsError::NoSpace(format!(
                    "{what} holds more than the pool's {heap}-byte heap"
                ))));
            }
            fs.write_file(path, &data).map_err(fs_err)?;
        }
        FsAction::Rm { path } => match fs.stat(path).map_err(fs_err)?.kind {
            StatKind::Dir => fs.rmdir(path).map_err(fs_err)?,
            StatKind::File => fs.unlink(path).map_err(fs_err)?,
        },
        FsAction::Mkdir { path, parents } => if *parents {
            fs.mkdir_all(path)
        } else {
            fs.mkdir(path)
        }
        .map_err(fs_err)?,
    }
    Ok(())
}

fn check(fs: &FileStore) -> anyhow::Result<()> {
    let r = fs.check_data().map_err(fs_err)?;
    for b in &r.busy {
        errln!("skipped {b}: open in another process");
    }
    outln!(
        "checked {} ({} bytes), {}, {}; heap {} = used {} + free {}",
        crate::text::count(r.files as u64, "file"),
        r.file_bytes,
        crate::text::count(r.dirs as u64, "directory"),
        crate::text::count(r.segments as u64, "further segment"),
        r.heap_bytes,
        r.used_bytes,
        r.free_bytes
    )?;
    if !r.problems.is_empty() {
        for p in &r.problems {
            errln!("problem: {p}");
        }
        return Err(IntegrityProblem(format!("{} problem(s) found", r.problems.len())).into());
    }
    outln!("ok: every file reads whole, its directory exists, and no space leaked")?;
    Ok(())
}

fn ls(fs: &FileStore, path: &str, recursive: bool) -> anyhow::Result<()> {
    let mut dirs = vec![path.trim_end_matches('/').to_string()];
    while let Some(dir) = dirs.pop() {
        let shown = if dir.is_empty() { "/" } else { &dir };
        let entries = fs.readdir(shown).map_err(fs_err)?;
        if recursive {
            outln!("{shown}:")?;
        }
        let mut below = vec![];
        for e in entries {
            let full = format!("{dir}/{}", e.name);
            match e.kind {
                StatKind::Dir => {
                    outln!("{}/", e.name)?;
                    if recursive {
                        below.push(full);
                    }
                }
                StatKind::File => match fs.stat(&full) {
                    Ok(s) => outln!("{}\t{}", e.name, s.size)?,
                    Err(FsError::Busy(_)) => outln!("{}\t(open elsewhere)", e.name)?,
                    Err(e) => return Err(fs_err(e)),
                },
            }
        }
        // Depth first, in name order.
        dirs.extend(below.into_iter().rev());
    }
    Ok(())
}
