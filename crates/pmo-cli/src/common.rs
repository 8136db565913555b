//! What the command modules share, below all of them: the `--pool` and `--key-file` arguments
//! and the pool and key they name ([`Ctx`]), value parsers, the integrity error (exit 2), the
//! scheme and size helpers and the progress bar of long lifecycle operations. Imports no
//! command module and not the dispatcher (`cmd`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use pmo_store::Pool;

/// `--pool`, on the commands that use a pool (also accepted before the command).
#[derive(clap::Args, Clone, Default)]
pub(crate) struct PoolArg {
    /// Pool file or /dev/daxX.Y device [default: PMO_POOL, else ~/.local/share/pmo/default.pool]
    #[arg(long, value_name = "FILE")]
    pub(crate) pool: Option<PathBuf>,
}

/// `--key-file`, on the commands that need a PMO's key (also accepted before the command).
#[derive(clap::Args, Clone, Default)]
pub(crate) struct KeyArg {
    /// File holding the PMO's key [default: PMO_KEY, else a prompt on a terminal]
    #[arg(long, value_name = "FILE")]
    pub(crate) key_file: Option<PathBuf>,
}

/// `check` found problems.
#[derive(Debug)]
pub(crate) struct IntegrityProblem(pub(crate) String);
impl std::fmt::Display for IntegrityProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for IntegrityProblem {}

/// The pool and key a command works on: its own `--pool` and `--key-file`, else those given
/// before the command (merged by the dispatcher), else the defaults.
pub(crate) struct Ctx {
    pub(crate) pool: PoolArg,
    pub(crate) key: KeyArg,
}

impl Ctx {
    /// The pool path: `--pool`, else `PMO_POOL`, else the default pool.
    pub(crate) fn pool_path(&self) -> PathBuf {
        self.pool
            .pool
            .clone()
            .unwrap_or_else(pmo_store::default_pool_path)
    }

    /// Open the pool (recovering what needs it), reporting each repair once.
    pub(crate) fn open(&self) -> anyhow::Result<Pool> {
        let path = self.pool_path();
        if !path.exists() {
            // The store's sentence, the same in Rust, C and Python.
            return Err(pmo_store::StoreError::NoPool { path }.into());
        }
        if !is_pool_file_or_dax(&path) {
            bail!(
                "not a pmo pool: {} is neither a file nor a /dev/daxX.Y device",
                path.display()
            );
        }
        let pool = Pool::open(&path).with_context(|| format!("pool {}", path.display()))?;
        // Damage the open repaired from a redundant copy: reported once, by the open that fixed it.
        for r in pool.repairs() {
            errln!("pmo: repaired: {r}");
        }
        Ok(pool)
    }

    /// The key: `--key-file`, else `PMO_KEY`, else a prompt on a terminal.
    pub(crate) fn key(&self) -> anyhow::Result<zeroize::Zeroizing<Vec<u8>>> {
        crate::keysrc::load(self.key.key_file.as_deref()).map_err(|e| anyhow!(e))
    }
}

pub(crate) fn parse_bytes(s: &str) -> Result<u64, String> {
    parse_size::Config::new()
        .with_binary()
        .parse_size(s)
        .map_err(|e| format!("'{s}': {e}"))
}

/// A number of seconds, e.g. 0.5 or 30 (finite, not negative).
pub(crate) fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|e| format!("'{s}': {e}"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| {
        format!(
            "'{s}': not a number of seconds (finite, not negative, at most {})",
            u64::MAX
        )
    })
}

/// A pool is a regular file or a device-DAX device; anything else (`/dev/null`, a directory)
/// is a mistake the user should hear about in those words.
fn is_pool_file_or_dax(path: &std::path::Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file()) || is_dax_device(path)
}

/// Whether `path` is a device-DAX character device (`/dev/daxX.Y`), which init formats in place.
pub(crate) fn is_dax_device(path: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device())
        && path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("dax"))
}

pub(crate) fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub(crate) fn scheme_name(code: u32) -> String {
    pmo_store::Scheme::from_code(code).map_or_else(|_| format!("unknown({code:#x})"), |s| s.name())
}

pub(crate) fn parse_scheme(name: &str) -> anyhow::Result<pmo_store::Scheme> {
    Ok(pmo_store::Scheme::from_name(name)?)
}

/// `scheme` with the plaintext placement of `--shadow` and the AEAD of `--cipher` (`None`:
/// as named).
pub(crate) fn with_shadow(
    scheme: pmo_store::Scheme,
    shadow: Option<&str>,
    cipher: Option<&str>,
) -> anyhow::Result<pmo_store::Scheme> {
    let scheme = match shadow {
        None => scheme,
        Some(s) => pmo_store::Scheme {
            shadow: pmo_store::Shadow::from_name(s).map_err(|e| anyhow!("--shadow: {e}"))?,
            ..scheme
        },
    };
    Ok(match cipher {
        None => scheme,
        Some(c) => pmo_store::scheme::aead_from_name(c)
            .and_then(|c| scheme.with_aead(c))
            .map_err(|e| anyhow!("--cipher: {e}"))?,
    })
}

/// Progress on standard error for PMOs of 64 MiB and more: a bar redrawn in place on a
/// terminal (indicatif), nothing when standard error is a file or a pipe (a log got a line per
/// percent before).
pub(crate) fn progress(what: &'static str) -> impl FnMut(u64, u64) {
    let mut bar: Option<indicatif::ProgressBar> = None;
    move |done, total| {
        if total < 16384 {
            return;
        }
        let b = bar.get_or_insert_with(|| {
            let b = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{msg}: {bar:30} {percent:>3}% ({pos}/{len} pages, {eta} left)",
            ) {
                b.set_style(style);
            }
            b.set_message(what);
            b
        });
        b.set_length(total);
        b.set_position(done);
        if done >= total {
            b.finish_and_clear();
        }
    }
}
