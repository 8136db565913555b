//! Command-line parsing and the commands.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::{CommandFactory, Parser, Subcommand};
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, StoreError};

#[derive(Parser)]
#[command(
    name = "pmo",
    version,
    about = "Persistent Memory Objects: named, crash-consistent, at-rest protected memory",
    long_about = None,
    after_help = TOP_HELP
)]
struct Cli {
    #[command(flatten)]
    pool: PoolArg,
    #[command(flatten)]
    key: KeyArg,
    #[command(subcommand)]
    cmd: Cmd,
}

const TOP_HELP: &str = "\
Pool: --pool, else PMO_POOL, else ~/.local/share/pmo/default.pool. Key: --key-file, else PMO_KEY,
else a prompt on a terminal. `pmo COMMAND --help` for each command.
Exit codes: 0 ok; 1 usage or user error (wrong key, no such PMO, pool full, busy);
2 integrity or corruption (a damaged or truncated pool, a page that fails its check).";

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

#[derive(Subcommand)]
enum SchemeAction {
    /// Print the pool's default scheme and every scheme with its policies
    Show,
    /// Set the pool's default scheme
    Set {
        /// Scheme: secure, none, wed, wedi, bp, bp-ip, bp-id, sp, sp-ip, sp-id (':medium' suffix allowed)
        name: String,
        /// Where the plaintext copy of an attached PMO lives: dram (default) or medium
        #[arg(long)]
        shadow: Option<String>,
    },
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a pool (a file, or format a /dev/daxX.Y device)
    Init {
        #[command(flatten)]
        pool: PoolArg,
        /// Size, e.g. 1GiB, 512MiB (ignored for devices). A PMO takes about twice its size
        #[arg(long, value_parser = parse_bytes)]
        size: u64,
        /// Argon2id memory in KiB for keys of this pool
        #[arg(long, default_value_t = KdfParams::DEFAULT.m_kib)]
        kdf_mem_kib: u32,
        /// Argon2id iterations
        #[arg(long, default_value_t = KdfParams::DEFAULT.t)]
        kdf_iters: u32,
        /// Namespace slots (maximum number of PMOs)
        #[arg(long)]
        max_pmos: Option<u64>,
        /// Backend: file, dax or pmem-emul (default: detect)
        #[arg(long)]
        medium: Option<String>,
        /// Create a sparse file instead of allocating the whole pool now
        #[arg(long)]
        sparse: bool,
        /// Default scheme of new PMOs: secure, none, wed, wedi, bp, bp-ip, bp-id, sp, sp-ip,
        /// sp-id (`pmo scheme show`); a ':medium' suffix puts the plaintext copy on the medium
        #[arg(long, default_value = "secure")]
        scheme: String,
        /// Where the plaintext copy of an attached PMO lives: dram (default) or medium
        #[arg(long)]
        shadow: Option<String>,
    },
    /// Create a PMO (it takes about twice its size in the pool: shadow paging)
    #[command(
        after_help = "A PMO needs about twice its size in pool space (a primary and a shadow copy of \
                      every page; three times with the plaintext copy on the medium): `pmo info` \
                      shows the largest PMO that still fits."
    )]
    Create {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        /// Name of the new PMO (printable characters, no control characters)
        name: String,
        /// Size, e.g. 64MiB (rounded up to whole 4 KiB pages)
        #[arg(long, value_parser = parse_bytes)]
        size: u64,
        /// Protection scheme (default: PMO_SCHEME, else the pool's default)
        #[arg(long)]
        scheme: Option<String>,
        /// Where the plaintext copy lives when attached: dram or medium (default: the scheme's)
        #[arg(long)]
        shadow: Option<String>,
        /// Lay the PMO out for this size (its layout capacity): `pmo resize` up to it, and
        /// any shrink, changes only metadata (default: the size; not with `wedi`)
        #[arg(long, value_parser = parse_bytes)]
        max_size: Option<u64>,
    },
    /// Show or set the pool's default protection scheme for new PMOs
    #[command(mut_arg("pool", |a| a.global(true)))]
    Scheme {
        #[command(flatten)]
        pool: PoolArg,
        #[command(subcommand)]
        action: SchemeAction,
    },
    /// Destroy a PMO (needs its key; fails while attached)
    Destroy {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        /// PMO to destroy
        name: String,
    },
    /// List PMOs: name, size, state, scheme, address
    List {
        #[command(flatten)]
        pool: PoolArg,
    },
    /// Show the pool (free space, largest PMO that fits), or one PMO and its last session
    Info {
        #[command(flatten)]
        pool: PoolArg,
        /// PMO to show (default: the pool)
        name: Option<String>,
    },
    /// Write bytes into a PMO atomically (attach read-write, copy, psync, detach)
    Write {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        /// PMO to write
        name: String,
        /// Byte offset in the PMO to write at, e.g. 4096 or 1MiB
        #[arg(long, default_value_t = 0, value_parser = parse_bytes)]
        offset: u64,
        /// Read the bytes from this file (default: standard input)
        #[arg(long)]
        file: Option<PathBuf>,
        /// Wait up to this many seconds for another writer to detach
        #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
        wait: Option<Duration>,
    },
    /// Copy bytes of a PMO to standard output (attach read-only)
    Read {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        /// PMO to read
        name: String,
        /// Byte offset in the PMO to read from
        #[arg(long, default_value_t = 0, value_parser = parse_bytes)]
        offset: u64,
        /// Number of bytes to read, e.g. 16 or 4KiB [default: from the offset to the end]
        #[arg(long, value_parser = parse_bytes)]
        len: Option<u64>,
    },
    /// Verify checksums, the namespace and the space accounting (exit 2 on any problem)
    ///
    /// With PMO names (and their key): also decrypt and verify every page of each, and run the
    /// heap checker on PMOs that hold a heap. Opening the pool recovers every PMO nobody holds
    /// (journal replayed, a plaintext copy left on the medium zeroed).
    Check {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        /// PMOs to verify page by page (needs their key)
        names: Vec<String>,
        /// Repair first: without names, the namespace (each damaged copy rewritten from its
        /// mirror, done by any open; reports what it cannot rebuild); with names, also run each
        /// named PMO's crash handler now (read-write open with its key: checksums left pending by
        /// a session with integrity at detach are written) before checking
        #[arg(long)]
        repair: bool,
        /// With --repair: free namespace slots whose two copies are both damaged. The PMO such
        /// a slot held is lost, and the space it may cover becomes free
        #[arg(long, requires = "repair")]
        drop_damaged: bool,
    },
    /// A PMO's life after create: rename, rekey, export, import, copy, snapshot
    #[command(flatten)]
    Life(crate::life::LifeCmd),
    /// Grow or shrink a PMO; grow the pool
    #[command(flatten)]
    Resize(crate::resize::ResizeCmd),
    /// Persistent CXL switch simulator: run traces, check correctness, reproduce the paper's study
    #[command(subcommand)]
    Cxlsim(Box<pmo_cxlsim::cli::Command>),
    /// Demonstrate the store: a raw-pointer list in a PMO that survives restarts
    #[command(
        after_help = "Without --key-file or PMO_KEY the demo uses the key \"demo\" (never a prompt)."
    )]
    Demo {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
    },
    /// LMDB's tools on environments kept in PMOs: stat, dump, load, copy, drop (mdb_TOOL's own
    /// options; environment paths are PMO names; docs/lmdb.md)
    Lmdb {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        /// stat, dump, load, copy or drop
        tool: String,
        /// The tool's arguments, e.g. `-e NAME`
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The file store in PMOs that `pmo bench filebench` uses: check, ls, cat, put, rm, mkdir
    /// (docs/filebench.md)
    #[command(
        after_help = "Without --key-file or PMO_KEY the store's default key (\"pmo-fs\", the one `pmo bench filebench` uses) opens its PMOs.",
        mut_arg("pool", |a| a.global(true)),
        mut_arg("key_file", |a| a.global(true))
    )]
    Fs {
        #[command(flatten)]
        pool: PoolArg,
        #[command(flatten)]
        key: KeyArg,
        #[command(subcommand)]
        action: crate::fs::FsAction,
    },
    /// Run benchmarks; write tidy CSV/JSON records, tables and figures
    #[command(after_help = BENCH_HELP)]
    Bench {
        /// Which benchmark: suite (the papers' workloads over the scheme, prediction, latency
        /// and thread matrix), store (psync, attach, faults, PMDK peer), schemes (protection costs),
        /// filebench (Filebench's personalities on the file store in PMOs; `--quick` suite runs
        /// include a short one), lmdb (LMDB on PMOs vs /dev/shm and disk), ycsb (YCSB A-F on those stores),
        /// lifecycle (rekey, snapshot, export and import vs cp and mdb_copy)
        #[arg(default_value = "suite")]
        which: String,
        /// suite: only these workloads; filebench: these workload files (FILE.f) instead of
        /// the four default personalities (repeatable)
        #[arg(long = "workload")]
        workloads: Vec<String>,
        /// suite: only these schemes in the breakdown study; filebench, lmdb, ycsb: only these
        /// schemes (repeatable)
        #[arg(long = "scheme")]
        schemes: Vec<String>,
        /// suite: only these studies (repeatable): breakdown, session, predict, threads, cxl,
        /// placement, tracking (run only when asked for); filebench: fig10, threads, lpmo, design
        #[arg(long = "study")]
        studies: Vec<String>,
        /// suite: prediction depths of the predict study (repeatable; off, N, adaptive);
        /// filebench: the depth of the lpmo study's runs with prediction (the first one given; 8)
        #[arg(long = "predict")]
        depths: Vec<String>,
        /// suite: attach-session sizes K of the session study (repeatable)
        #[arg(long = "k", value_name = "K")]
        sessions: Vec<usize>,
        /// suite: thread counts of the threads study; filebench: thread counts (repeatable)
        #[arg(long = "threads", value_name = "N")]
        threads: Vec<usize>,
        /// suite: matrix sizes: tiny, default, paper (the LOaPP paper's Table IV)
        #[arg(long)]
        size: Option<String>,
        /// suite: psync after this many seconds of the unprotected run (the papers: 1); default
        /// 1 s scaled by the PMO's size over the paper-size PMO's, at least 0.002
        #[arg(long, value_name = "SECONDS")]
        psync_interval: Option<f64>,
        /// suite: run nothing; print the tables and draw the figures of records saved with
        /// --json by an earlier run
        #[arg(long, value_name = "FILE.json")]
        from: Option<PathBuf>,
        /// Short configuration (fewer cells and repeats; still at least 3 samples per cell)
        #[arg(long)]
        quick: bool,
        /// Also write the records as JSON here
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Directory for CSV (and figures)
        #[arg(long, default_value = "bench-out", value_name = "DIR")]
        out: PathBuf,
        /// Directory for benchmark pools (default /dev/shm: emulated persistent memory);
        /// filebench: run against this plain directory instead of PMOs
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        #[command(flatten)]
        fb: Box<FilebenchArgs>,
    },
}

impl Cmd {
    /// The command's own `--pool` and `--key-file` (none for commands without a pool).
    fn pool_and_key(&self) -> (Option<&PoolArg>, Option<&KeyArg>) {
        match self {
            Cmd::Init { pool, .. }
            | Cmd::Scheme { pool, .. }
            | Cmd::List { pool }
            | Cmd::Info { pool, .. } => (Some(pool), None),
            Cmd::Create { pool, key, .. }
            | Cmd::Destroy { pool, key, .. }
            | Cmd::Write { pool, key, .. }
            | Cmd::Read { pool, key, .. }
            | Cmd::Check { pool, key, .. }
            | Cmd::Demo { pool, key }
            | Cmd::Lmdb { pool, key, .. }
            | Cmd::Fs { pool, key, .. } => (Some(pool), Some(key)),
            Cmd::Life(l) => l.pool_and_key(),
            Cmd::Resize(r) => r.pool_and_key(),
            Cmd::Cxlsim(_) | Cmd::Bench { .. } => (None, None),
        }
    }
}

/// `pmo bench filebench`'s own options.
#[derive(clap::Args, Debug)]
struct FilebenchArgs {
    /// filebench: set a workload variable before its defines use it (repeatable)
    #[arg(long = "set", value_name = "VAR=VALUE")]
    sets: Vec<String>,
    /// filebench: cap on each run, whatever its `run` line says
    #[arg(long)]
    seconds: Option<f64>,
    /// filebench: sync modes, paper or fsync (repeatable)
    #[arg(long = "sync")]
    syncs: Vec<String>,
    /// filebench: latency profiles (repeatable)
    #[arg(long = "latency")]
    latencies: Vec<String>,
    /// filebench: the papers' 5 runs x 30 s at Filebench's own sizes
    #[arg(long)]
    paper: bool,
    /// filebench: runs per cell (medians), instead of the preset's (3; 1 with --quick, 5 with --paper)
    #[arg(long)]
    repeats: Option<usize>,
}

const BENCH_HELP: &str = "\
Workloads: 2dconv, gauss, lu, tmm, cholesky (crate pmo-workloads; each verified against a DRAM run)
Schemes:   none, wed, wedi, bp, bp-ip, bp-id, sp, sp-ip, sp-id, secure, each also with
           ':medium' (the plaintext copy on the medium instead of DRAM)
Depths:    off, 1, 2, 4, 8, 16, ..., adaptive (PMO_PREDICT)
Latency:   dram, optane, cxl-near, cxl-far, custom:... (PMO_LATENCY; docs/latency.md)
Placement: DRAM (default; PMO_NUMA_NODE picks the node) or ':medium'
Studies:   breakdown (LOaPP Fig. 6), session (Figs. 7 and 8), predict, threads, cxl, placement,
           tracking (dirty tracking and fault-around; only when asked for)
Output:    CSV (and --json) records in --out, SVG (and PNG) figures beside them;
           --from FILE.json redraws them from saved records";

pub(crate) fn parse_bytes(s: &str) -> Result<u64, String> {
    parse_size::Config::new()
        .with_binary()
        .parse_size(s)
        .map_err(|e| format!("'{s}': {e}"))
}

/// A number of seconds, e.g. 0.5 or 30 (finite, not negative).
fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|e| format!("'{s}': {e}"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| {
        format!(
            "'{s}': not a number of seconds (finite, not negative, at most {})",
            u64::MAX
        )
    })
}

/// Exit code and one-line message for an error. A closed standard output is a quiet success
/// (the reader has all it wanted); a cause whose text its context already repeats is said once.
fn report(e: &anyhow::Error) -> ExitCode {
    if e.chain()
        .any(|c| c.downcast_ref::<crate::out::StdoutClosed>().is_some())
    {
        return ExitCode::SUCCESS;
    }
    let integrity = e.chain().any(|c| {
        c.downcast_ref::<StoreError>()
            .is_some_and(StoreError::is_integrity)
    }) || e.downcast_ref::<IntegrityProblem>().is_some();
    errln!("pmo: {}", one_line(e));
    ExitCode::from(if integrity { 2 } else { 1 })
}

/// The error chain on one line: each cause once, OS errors as words ("no such file or
/// directory", not "No such file or directory (os error 2)").
fn one_line(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for c in e.chain() {
        let t = match c.downcast_ref::<std::io::Error>() {
            Some(io) => crate::errtext::io(io),
            None => crate::errtext::strip_os_error(&c.to_string()),
        };
        if t.is_empty() || msg.contains(&t) {
            continue;
        }
        if !msg.is_empty() {
            msg.push_str(": ");
        }
        msg.push_str(&t);
    }
    msg.replace('\n', " ")
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

pub fn main() -> ExitCode {
    // `pmo __assets DIR`: man pages and completions for scripts/install (outside the clap
    // definition, so that they do not list it).
    if std::env::args_os().nth(1).is_some_and(|a| a == "__assets") {
        return crate::assets::main(Cli::command());
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let mut cli = cli;
    let (pool, key) = cli.cmd.pool_and_key();
    let (pool, key) = (
        pool.and_then(|p| p.pool.clone()),
        key.and_then(|k| k.key_file.clone()),
    );
    // The command's own option wins over one given before the command.
    if pool.is_some() {
        cli.pool.pool = pool;
    }
    if key.is_some() {
        cli.key.key_file = key;
    }
    if let Cmd::Cxlsim(cmd) = cli.cmd {
        // The simulator prints with `println!`, which panics on a closed standard output. It
        // holds no pool, so it may end the Unix way instead: killed quietly by SIGPIPE.
        #[allow(unsafe_code)]
        // SAFETY: no other thread runs yet; SIG_DFL is a valid disposition for SIGPIPE.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
        // The simulator reports its own errors and exit codes (2 = checker violation).
        return ExitCode::from(pmo_cxlsim::cli::run(*cmd).clamp(0, 255) as u8);
    }
    let r = crate::envcheck::check().and_then(|()| run(cli));
    // Background detach work (integrity-at-detach checksums) finishes before the process exits.
    pmo_store::wait_for_background_detaches();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report(&e),
    }
}

fn pool_path(cli: &Cli) -> PathBuf {
    cli.pool
        .pool
        .clone()
        .unwrap_or_else(pmo_store::default_pool_path)
}

fn open(cli: &Cli) -> anyhow::Result<Pool> {
    let path = pool_path(cli);
    if !path.exists() {
        bail!(
            "no pool at {}: create one with `pmo init --size 1GiB`, or name another with --pool or PMO_POOL",
            path.display()
        );
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

/// An error (exit 2) naming the damaged namespace slots, if any.
fn damaged_error(pool: &Pool) -> anyhow::Result<()> {
    let damaged = pool.damaged_slots()?;
    if damaged.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = damaged
        .iter()
        .map(|(i, why)| format!("namespace slot {i}: {why}"))
        .collect();
    Err(IntegrityProblem(format!(
        "damaged namespace: {} (`pmo check --repair`)",
        list.join("; ")
    ))
    .into())
}

/// A pool is a regular file or a device-DAX device; anything else (`/dev/null`, a directory)
/// is a mistake the user should hear about in those words.
fn is_pool_file_or_dax(path: &std::path::Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file()) || is_dax_device(path)
}

fn key(cli: &Cli) -> anyhow::Result<zeroize::Zeroizing<Vec<u8>>> {
    crate::keysrc::load(cli.key.key_file.as_deref()).map_err(|e| anyhow!(e))
}

pub fn human(bytes: u64) -> String {
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

/// `bytes` for people, never more than it is: "504.5 MiB" for 504.59 MiB, and the exact
/// count of bytes when the unit is not a whole number.
fn human_at_most(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 1u64;
    let mut u = 0;
    while bytes / unit >= 1024 && u < UNITS.len() - 1 {
        unit *= 1024;
        u += 1;
    }
    if bytes.is_multiple_of(unit) {
        return format!("{} {}", bytes / unit, UNITS[u]);
    }
    let tenths = bytes * 10 / unit; // rounded down
    format!(
        "{bytes} bytes (over {}.{} {})",
        tenths / 10,
        tenths % 10,
        UNITS[u]
    )
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match &cli.cmd {
        Cmd::Init {
            pool: _,
            size,
            kdf_mem_kib,
            kdf_iters,
            max_pmos,
            medium,
            sparse,
            scheme,
            shadow,
        } => {
            let path = pool_path(&cli);
            let medium = match medium {
                None => None,
                Some(m) => Some(
                    pmo_medium::MediumKind::parse(m)
                        .ok_or_else(|| anyhow!("unknown medium '{m}' (file, dax, pmem-emul)"))?,
                ),
            };
            if path.exists() && !is_dax_device(&path) {
                bail!(
                    "{} already exists: give another --pool (or remove the file if it is an old pool you no longer need)",
                    path.display()
                );
            }
            // Whatever this init creates (directories, the pool file) goes again if it fails.
            let mut created = Created::default();
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                created.dirs(dir)?;
            }
            if !path.exists() {
                created.file = Some(path.clone());
            }
            let opts = PoolOptions {
                kdf: KdfParams {
                    alg: 1,
                    m_kib: *kdf_mem_kib,
                    t: *kdf_iters,
                    p: 1,
                },
                ns_capacity: *max_pmos,
                base_addr: None,
                medium,
                preallocate: !*sparse,
                scheme: with_shadow(parse_scheme(scheme)?, shadow.as_deref())?,
            };
            let created_pool = Pool::create(&path, *size, &opts);
            if let Err(StoreError::PoolExists(_)) = &created_pool {
                created.file = None; // someone else's, made since the check above
            }
            let pool = created_pool.map_err(|e| {
                let dax_hint = opts.medium == Some(pmo_medium::MediumKind::Dax)
                    && matches!(&e, StoreError::Medium(_) | StoreError::Os(_));
                if dax_hint {
                    anyhow!(
                        "pool {}: {e} (--medium dax needs a /dev/daxX.Y device or a file on a DAX filesystem; use --medium file or pmem-emul here)",
                        path.display()
                    )
                } else if matches!(&e, StoreError::Os(m) if m.contains("no room")) {
                    anyhow!(
                        "pool {}: {e} (try a smaller --size, or --sparse to allocate on use)",
                        path.display()
                    )
                } else {
                    anyhow::Error::from(e).context(format!("pool {}", path.display()))
                }
            })?;
            created.keep();
            let info = pool.pool_info()?;
            outln!(
                "created pool {} ({}, {} usable, up to {} PMOs, medium {})",
                path.display(),
                human(info.pool_size),
                human(info.heap_len),
                info.ns_capacity,
                info.medium.name()
            )?;
        }
        Cmd::Create {
            name,
            size,
            scheme,
            shadow,
            max_size,
            ..
        } => {
            let pool = open(&cli)?;
            let scheme = match (scheme.as_deref(), shadow.as_deref()) {
                (None, None) => None,
                (Some(s), shadow) => Some(with_shadow(parse_scheme(s)?, shadow)?),
                (None, shadow) => {
                    let base = match pmo_store::Scheme::from_env()? {
                        Some(s) => s,
                        None => pool.default_scheme()?,
                    };
                    Some(with_shadow(base, shadow)?)
                }
            };
            let key = key(&cli)?;
            let info = pool.pcreate_max(name, *size, max_size.unwrap_or(0), &key, scheme)?;
            outln!(
                "created PMO '{}' ({}, scheme {}) at {:#x}",
                info.name,
                human(info.size),
                scheme_name(info.scheme),
                info.base_addr
            )?;
        }
        Cmd::Scheme { action, .. } => {
            let pool = open(&cli)?;
            match action {
                SchemeAction::Set { name, shadow } => {
                    let s = with_shadow(parse_scheme(name)?, shadow.as_deref())?;
                    pool.set_default_scheme(s)?;
                    outln!("default scheme of new PMOs: {s}")?;
                }
                SchemeAction::Show => {
                    outln!("default scheme of new PMOs: {}", pool.default_scheme()?)?;
                    outln!(
                        "{:<8} {:<6} {:<12} {:<10} PLAINTEXT COPY",
                        "SCHEME",
                        "UNIT",
                        "CIPHER",
                        "INTEGRITY"
                    )?;
                    for s in pmo_store::Scheme::all() {
                        outln!(
                            "{:<8} {:<6} {:<12} {:<10} {}",
                            s.name(),
                            format!("{:?}", s.granularity()).to_lowercase(),
                            format!("{:?}", s.cipher()).to_lowercase(),
                            match s.integrity_at() {
                                pmo_store::scheme::IntegrityAt::Never => "none",
                                pmo_store::scheme::IntegrityAt::Psync => "at psync",
                                pmo_store::scheme::IntegrityAt::Detach => "at detach",
                            },
                            match s.id {
                                pmo_store::scheme::SchemeId::Bp
                                | pmo_store::scheme::SchemeId::BpIp
                                | pmo_store::scheme::SchemeId::BpId => {
                                    "dram (default) or :medium (psync commits plaintext until detach)"
                                }
                                _ => "dram (default) or :medium",
                            }
                        )?;
                    }
                    let without: Vec<String> = pmo_store::Scheme::all()
                        .filter(|s| s.integrity_at() == pmo_store::scheme::IntegrityAt::Never)
                        .map(|s| s.name())
                        .collect();
                    outln!(
                        "without integrity: {} (a damaged or altered data page reads as wrong data, undetected)",
                        without.join(", ")
                    )?;
                }
            }
        }
        Cmd::Life(l) => crate::life::run(l, open(&cli)?, &key(&cli)?)?,
        Cmd::Resize(r) => {
            let key = if r.needs_key() {
                key(&cli)?
            } else {
                Default::default()
            };
            crate::resize::run(r, open(&cli)?, &pool_path(&cli), &key)?
        }
        Cmd::Destroy { name, .. } => {
            let pool = open(&cli)?;
            let key = key(&cli)?;
            pool.pdestroy(name, &key)?;
            outln!("destroyed PMO '{name}'")?;
        }
        Cmd::List { .. } => {
            let pool = open(&cli)?;
            let list = pool.list()?;
            outln!(
                "{:<32} {:>12} {:<24} {:<13} ADDRESS",
                "NAME",
                "SIZE",
                "STATE",
                "SCHEME"
            )?;
            for p in list {
                outln!(
                    "{} {:>12} {:<24} {:<13} {:#x}",
                    crate::text::pad(&p.name, 32),
                    human(p.size),
                    state_text(&p),
                    scheme_name(p.scheme),
                    p.base_addr
                )?;
            }
            for (slot, _) in pool.damaged_slots()? {
                outln!(
                    "{:<32} {:>12} {:<24} {:<13} ?",
                    format!("<namespace slot {slot}>"),
                    "?",
                    "damaged",
                    "?"
                )?;
            }
            damaged_error(&pool)?;
        }
        Cmd::Info { name: None, .. } => {
            let pool = open(&cli)?;
            let i = pool.pool_info()?;
            outln!(
                "pool:            {}",
                i.path
                    .as_deref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            )?;
            outln!("medium:          {}", i.medium.name())?;
            outln!("format version:  {}", i.format_version)?;
            outln!("uuid:            {}", hex(&i.uuid))?;
            outln!(
                "size:            {} (heap {}, free {}, largest free extent {})",
                human(i.pool_size),
                human(i.heap_len),
                human(i.free_bytes),
                human(i.largest_free)
            )?;
            let scheme = pmo_store::Scheme::from_code(i.config.scheme).ok();
            match scheme {
                Some(sch) => outln!(
                    "largest new PMO: {} with the default scheme (a PMO takes about {} its size)",
                    human_at_most(largest_pmo(i.largest_free, sch)),
                    if sch.shadow == pmo_store::Shadow::Medium {
                        "three times"
                    } else {
                        "twice"
                    }
                )?,
                None => outln!("largest new PMO: unknown (unknown default scheme)")?,
            }
            outln!("PMOs:            {} of {}", i.pmos, i.ns_capacity)?;
            outln!(
                "address range:   {:#x}..{:#x}",
                i.base_addr,
                i.base_addr + i.heap_len
            )?;
            outln!(
                "kdf:             argon2id m={} KiB t={} p={}",
                i.kdf.m_kib,
                i.kdf.t,
                i.kdf.p
            )?;
            outln!("default scheme:  {}", scheme_name(i.config.scheme))?;
            print_fault_defaults(None)?;
            outln!("cache flush:     {}", pmo_os::persist::flush_kind().name())?;
            damaged_error(&pool)?;
        }
        Cmd::Info {
            name: Some(name), ..
        } => {
            let pool = open(&cli)?;
            let p = pool.info(name)?;
            outln!("name:            {}", p.name)?;
            outln!(
                "size:            {} ({})",
                human(p.size),
                crate::text::count(p.size / 4096, "page")
            )?;
            outln!("uuid:            {}", hex(&p.uuid))?;
            outln!("state:           {}", state_text(&p))?;
            outln!("scheme:          {}", scheme_name(p.scheme))?;
            outln!("stable address:  {:#x}", p.base_addr)?;
            if p.capacity > p.size {
                outln!(
                    "capacity:        {} (resizes up to it change only metadata)",
                    human(p.capacity)
                )?;
            }
            let on_medium = pmo_store::Scheme::from_code(p.scheme)
                .is_ok_and(|s| s.shadow == pmo_store::Shadow::Medium);
            outln!(
                "extent:          {:#x} + {} (data twice, for shadow paging{})",
                p.extent_off,
                human(p.extent_len),
                if on_medium {
                    ", and the plaintext area"
                } else {
                    ""
                }
            )?;
            if on_medium {
                outln!(
                    "fault mechanism: sigsegv (the view maps the plaintext area on the medium)"
                )?;
                outln!("dirty tracking:  fault")?;
            } else {
                print_fault_defaults(Some(p.size))?;
            }
            match pool.last_session(name)? {
                None => outln!("last session:    none recorded")?,
                Some(s) => {
                    outln!(
                        "last session:    {:.3} ms: {}, {}, {} decrypted at a fault + {} ahead of use, {} encrypted, {} persisted",
                        s.wall_ns as f64 / 1e6,
                        crate::text::count(s.psyncs, "psync"),
                        crate::text::count(s.faults, "fault"),
                        crate::text::count(s.pages_decrypted, "page"),
                        s.predicted,
                        s.pages_encrypted,
                        human(s.bytes_persisted)
                    )?;
                    for (cat, ns) in s.categories() {
                        let share = if s.wall_ns > 0 {
                            100.0 * ns as f64 / s.wall_ns as f64
                        } else {
                            0.0
                        };
                        outln!("  {cat:<14} {:>10.3} ms {share:>5.1}%", ns as f64 / 1e6)?;
                    }
                }
            }
        }
        Cmd::Write {
            name,
            offset,
            file,
            wait,
            ..
        } => {
            let pool = open(&cli)?;
            let key = key(&cli)?;
            let size = pool.info(name)?.size;
            let room = size.saturating_sub(*offset);
            let mut input: Box<dyn Read> = match file {
                Some(f) => Box::new(
                    std::fs::File::open(f).with_context(|| format!("open {}", f.display()))?,
                ),
                None => Box::new(std::io::stdin().lock()),
            };
            let mut data = Vec::new();
            (&mut input)
                .take(room + 1)
                .read_to_end(&mut data)
                .context("read the input")?;
            if data.len() as u64 > room {
                // Count what was given, for the message, without keeping it (up to 1 GiB
                // more: an endless input such as a device must end too).
                const COUNTED: u64 = 1 << 30;
                let rest = std::io::copy(&mut (&mut input).take(COUNTED), &mut std::io::sink())
                    .context("read the input")?;
                let more = if rest == COUNTED { "more than " } else { "" };
                bail!(
                    "{more}{} bytes at offset {offset} do not fit in PMO '{name}' ({size} bytes: room for {room} there)",
                    data.len() as u64 + rest
                );
            }
            // A real attach session, so `pmo info NAME` shows its breakdown afterwards.
            let a = pool
                .attach_with(
                    name,
                    Perm::Write,
                    &key,
                    pmo_store::AttachOptions {
                        wait: *wait,
                        relocate: true,
                        ..Default::default()
                    },
                )
                .map_err(|e| match e {
                    StoreError::Busy { .. } if wait.is_none() => {
                        anyhow!("{e}: wait for it with --wait SECONDS")
                    }
                    e => e.into(),
                })?;
            a.write_at(*offset as usize, &data)?;
            let stats = a.psync()?;
            a.detach()?;
            errln!(
                "wrote {} at offset {offset} of '{name}' ({} committed atomically)",
                crate::text::count(data.len() as u64, "byte"),
                crate::text::count(stats.pages, "page")
            );
        }
        Cmd::Read {
            name, offset, len, ..
        } => {
            let pool = open(&cli)?;
            let key = key(&cli)?;
            let h = pool.open_pmo(name, Perm::Read, &key, None)?;
            // Without --len: everything from the offset to the end (nothing at the end).
            if *offset > h.size() {
                bail!(
                    "offset {offset} is past the end of the {}-byte PMO '{name}'",
                    h.size()
                );
            }
            let room = h.size() - *offset;
            if len.is_some_and(|l| l > room) {
                bail!(
                    "{} bytes at offset {offset} do not fit in the {}-byte PMO '{name}' (room for {room} there)",
                    len.unwrap_or_default(),
                    h.size()
                );
            }
            let len = &len.unwrap_or(room);
            let mut done = 0u64;
            let mut buf = vec![0u8; 1 << 20];
            while done < *len {
                let n = (*len - done).min(buf.len() as u64) as usize;
                h.read_at(offset + done, &mut buf[..n])?;
                crate::out::stdout_bytes(&buf[..n])?;
                done += n as u64;
            }
        }
        Cmd::Check {
            names,
            repair,
            drop_damaged,
            ..
        } => {
            let pool = open(&cli)?;
            let key = if names.is_empty() {
                None
            } else {
                Some(key(&cli)?)
            };
            if *repair {
                // The open above rewrote every damaged copy from its mirror (reported); a slot
                // with both copies damaged is rebuilt from its PMO's header page.
                for (slot, name) in pool.rebuild_damaged_slots()? {
                    outln!("namespace slot {slot}: rebuilt PMO '{name}' from its header page")?;
                }
                if *drop_damaged {
                    for slot in pool.drop_damaged_slots()? {
                        outln!("namespace slot {slot}: both copies damaged: dropped")?;
                    }
                }
                for (slot, why) in pool.damaged_slots()? {
                    errln!(
                        "could not repair namespace slot {slot}: {why} (no intact copy, no header page names it; `--drop-damaged` frees it)"
                    );
                }
                for name in names {
                    let key = key.as_deref().map(|k| &k[..]).unwrap_or_default();
                    drop(pool.open_pmo(name, Perm::Write, key, None)?);
                    outln!("'{name}': recovered (journal, pending checksums, plaintext copy)")?;
                }
            }
            for name in names {
                let key = key.as_deref().map(|k| &k[..]).unwrap_or_default();
                let pages = deep_check(&pool, name, key)?;
                match pmo_heap::check_pmo(&pool, name, key) {
                    Ok(None) => outln!(
                        "'{name}': {} verified; no heap",
                        crate::text::count(pages, "page")
                    )?,
                    Ok(Some(h)) => {
                        outln!(
                        "'{name}': {} verified; heap ok: {} live blocks, {} of {} bytes allocated",
                        crate::text::count(pages, "page"),
                        h.live_allocations, h.allocated_bytes, h.capacity_bytes
                    )?
                    }
                    Err(pmo_heap::PmoHeapError::Store(e)) => return Err(e.into()),
                    Err(e) => {
                        return Err(IntegrityProblem(format!("'{name}': heap check: {e}")).into())
                    }
                }
            }
            let r = pool.check()?;
            for s in &r.skipped {
                errln!("skipped '{s}': attached read-write by another process (its pages are checked once it detaches)");
            }
            outln!(
                "checked {}; heap {} = used {} + free {}",
                crate::text::count(r.pmos as u64, "PMO"),
                r.heap_len,
                r.used_bytes,
                r.free_bytes
            )?;
            if !r.problems.is_empty() {
                for p in &r.problems {
                    errln!("problem: {p}");
                }
                return Err(
                    IntegrityProblem(format!("{} problem(s) found", r.problems.len())).into(),
                );
            }
            if names.is_empty() {
                outln!(
                    "ok: metadata only; not verified: the data pages (decrypting and verifying them needs each PMO's key: `pmo check NAME...`)"
                )?;
            } else {
                outln!(
                    "ok; not verified: the data pages of PMOs not named ({} named)",
                    names.len()
                )?;
            }
        }
        Cmd::Cxlsim(_) => unreachable!("handled in main"),
        Cmd::Demo { .. } => {
            // Never a prompt: the demo runs the same way with or without a terminal.
            let key = match crate::keysrc::given(cli.key.key_file.as_deref())
                .map_err(|e| anyhow!(e))?
            {
                Some(k) => k,
                None => {
                    outln!(
                        "(no key given: using the demo key \"{}\"; set PMO_KEY or --key-file for your own)",
                        crate::demo::DEMO_KEY
                    )?;
                    zeroize::Zeroizing::new(crate::demo::DEMO_KEY.as_bytes().to_vec())
                }
            };
            crate::demo::run(&pool_path(&cli), &key)?;
        }
        Cmd::Lmdb { tool, args, .. } => {
            let pool = open(&cli)?;
            let key = key(&cli)?;
            let code = pmo_lmdb::programs::cli(pool, &key, tool, args)?;
            if code != 0 {
                std::process::exit(code);
            }
        }
        Cmd::Fs { action, .. } => {
            let key = crate::keysrc::given(cli.key.key_file.as_deref()).map_err(|e| anyhow!(e))?;
            crate::fs::run(action, open(&cli)?, key)?;
        }
        Cmd::Bench {
            which,
            quick,
            json,
            out,
            dir,
            workloads,
            schemes,
            studies,
            depths,
            sessions,
            threads,
            size,
            psync_interval,
            from,
            fb,
        } => {
            let mut records = pmo_bench::Records::default();
            if from.is_some() && which != "suite" {
                bail!("--from is for the suite");
            }
            if psync_interval.is_some() && which != "suite" {
                bail!("--psync-interval is for the suite");
            }
            match which.as_str() {
                "suite" if from.is_some() => {
                    let f = from.as_deref().unwrap_or(std::path::Path::new(""));
                    records = pmo_bench::Records::read_json(f)?;
                    std::fs::create_dir_all(out)
                        .with_context(|| format!("create {}", out.display()))?;
                    show_suite(&records, out)?;
                    return Ok(());
                }
                "suite" => {
                    let mut opts = pmo_bench::suite::SuiteOptions::new(*quick);
                    if let Some(d) = dir {
                        opts.dir = d.clone();
                    }
                    if let Some(s) = size {
                        opts.size = pmo_workloads::Size::from_name(s)?;
                    }
                    if let Some(s) = *psync_interval {
                        if !(s > 0.0 && s <= 3600.0) {
                            bail!("--psync-interval takes seconds above 0, at most 3600, not {s}");
                        }
                        opts.psync_interval = Some(std::time::Duration::from_secs_f64(s));
                    }
                    if !workloads.is_empty() {
                        opts.workloads = workloads
                            .iter()
                            .map(|w| pmo_workloads::Workload::from_name(w))
                            .collect::<Result<_, _>>()?;
                    }
                    if !schemes.is_empty() {
                        opts.schemes = schemes
                            .iter()
                            .map(|s| parse_scheme(s))
                            .collect::<anyhow::Result<_>>()?;
                    }
                    if !studies.is_empty() {
                        for s in studies {
                            if !pmo_bench::suite::STUDIES.contains(&s.as_str()) {
                                bail!(
                                    "unknown study '{s}' (one of {})",
                                    pmo_bench::suite::STUDIES.join(", ")
                                );
                            }
                        }
                        opts.studies = studies.clone();
                    }
                    if !depths.is_empty() {
                        opts.depths = depths.clone();
                    }
                    if let Some(bad) = sessions.iter().chain(threads).find(|&&n| n == 0) {
                        bail!("--k and --threads take positive numbers, not {bad}");
                    }
                    if !sessions.is_empty() {
                        opts.sessions = sessions.clone();
                    }
                    if !threads.is_empty() {
                        opts.threads = threads.clone();
                    }
                    std::fs::create_dir_all(out)
                        .with_context(|| format!("create {}", out.display()))?;
                    let r = pmo_bench::suite::run(&opts, &mut records);
                    show_suite(&records, out)?;
                    let csv = out.join("suite.csv");
                    records.write_csv(&csv)?;
                    outln!("records: {}", csv.display())?;
                    if let Some(j) = json {
                        records.write_json(j)?;
                        outln!("records: {}", j.display())?;
                    }
                    r?;
                    if *quick && workloads.is_empty() && studies.is_empty() {
                        let o = pmo_filebench::bench::FbOptions::new(true, false);
                        pmo_filebench::bench::run_and_report(&o, out, None)?;
                    }
                    return Ok(());
                }
                "store" => {
                    let mut opts = pmo_bench::store::StoreBenchOptions::new(*quick);
                    if let Some(d) = dir {
                        opts.dir = d.clone();
                    }
                    pmo_bench::store::run(&opts, &mut records)?;
                    out!("{}", pmo_bench::store::table(&records))?;
                }
                "schemes" => {
                    let mut opts = pmo_bench::schemes::SchemesBenchOptions::new(*quick);
                    if let Some(d) = dir {
                        opts.dir = d.clone();
                    }
                    pmo_bench::schemes::run(&opts, &mut records)?;
                    out!("{}", pmo_bench::schemes::table(&records))?;
                    std::fs::create_dir_all(out)
                        .with_context(|| format!("create {}", out.display()))?;
                    let svg = out.join("schemes-fig1.svg");
                    pmo_bench::schemes::draw_fig1(&records, &svg)?;
                    outln!("figure: {}", svg.display())?;
                    if let Some(png) = pmo_bench::plot::to_png(&svg) {
                        outln!("figure: {}", png.display())?;
                    }
                }
                "filebench" => {
                    let o = filebench_options(
                        *quick, workloads, schemes, studies, depths, threads, dir, fb,
                    )?;
                    pmo_filebench::bench::run_and_report(&o, out, json.as_deref())?;
                    return Ok(());
                }
                "lmdb" | "ycsb" => {
                    // Flags of the other benchmarks would be ignored here: a full run of
                    // something else than what was asked (YCSB's files come from PMO_YCSB_DIR).
                    for (flag, given) in [
                        ("--workload", !workloads.is_empty()),
                        ("--study", !studies.is_empty()),
                        ("--predict", !depths.is_empty()),
                        ("--k", !sessions.is_empty()),
                        ("--threads", !threads.is_empty()),
                        ("--size", size.is_some()),
                    ] {
                        if given {
                            bail!(
                                "{flag} is not an option of `pmo bench {which}` (its workloads \
                                 are YCSB A-F, read from PMO_YCSB_DIR or ../shared/ycsb)"
                            );
                        }
                    }
                    let mut opts = pmo_lmdb::bench::LmdbBenchOptions::new(*quick);
                    opts.others = pmo_ycsb_stores::bench::stores();
                    if let Some(d) = dir {
                        opts.dir = d.clone();
                    }
                    opts.disk_dir = out.join("lmdb-disk");
                    if !schemes.is_empty() {
                        opts.schemes = schemes.clone();
                    }
                    std::fs::create_dir_all(out)
                        .with_context(|| format!("create {}", out.display()))?;
                    let r = pmo_lmdb::bench::run(&opts, which, &mut records);
                    let _ = std::fs::remove_dir_all(&opts.disk_dir);
                    pmo_lmdb::bench::print_tables(&records);
                    for f in pmo_lmdb::bench::draw(&records, out)? {
                        outln!("figure: {}", f.display())?;
                    }
                    r?;
                }
                "lifecycle" => {
                    let mut opts = pmo_bench::lifecycle::LifecycleBenchOptions::new(*quick);
                    if let Some(d) = dir {
                        opts.dir = d.clone();
                    }
                    pmo_bench::lifecycle::run(&opts, &mut records)?;
                    out!("{}", pmo_bench::lifecycle::table(&records))?;
                    std::fs::create_dir_all(out)
                        .with_context(|| format!("create {}", out.display()))?;
                    for f in pmo_bench::lifecycle::draw(&records, out)? {
                        outln!("figure: {}", f.display())?;
                    }
                }
                other => {
                    bail!("unknown benchmark '{other}' (known: suite, store, schemes, filebench, lmdb, ycsb, lifecycle)")
                }
            }
            std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
            let csv = out.join(format!("{which}.csv"));
            records.write_csv(&csv)?;
            outln!("records: {}", csv.display())?;
            if let Some(j) = json {
                records.write_json(j)?;
                outln!("records: {}", j.display())?;
            }
        }
    }
    Ok(())
}

/// The largest PMO (whole pages) of scheme `scheme` whose extent fits in `free` contiguous
/// bytes of pool space: its data twice (shadow paging) plus the page map, journals and tags,
/// and a plaintext area when the plaintext copy is on the medium.
fn largest_pmo(free: u64, scheme: pmo_store::Scheme) -> u64 {
    let fits = |pages: u64| {
        pmo_format::PmoLayout::with_plain(
            pages,
            scheme.tag_bytes() as u64,
            scheme.shadow == pmo_store::Shadow::Medium,
        )
        .is_some_and(|l| l.extent_len <= free)
    };
    let (mut lo, mut hi) = (0u64, free / 4096 + 1); // fits(lo), !fits(hi)
    if !fits(1) {
        return 0;
    }
    lo = lo.max(1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo * 4096
}

/// Whether `path` is a device-DAX character device (`/dev/daxX.Y`), which init formats in place.
fn is_dax_device(path: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device())
        && path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("dax"))
}

/// What a `pmo init` created, removed on drop unless [`Created::keep`] is called.
#[derive(Default)]
struct Created {
    /// Directories created, outermost first.
    dirs: Vec<PathBuf>,
    file: Option<PathBuf>,
}

impl Created {
    /// Create `dir` and its missing parents, remembering the ones created.
    fn dirs(&mut self, dir: &std::path::Path) -> anyhow::Result<()> {
        let mut missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
            .map(PathBuf::from)
            .collect();
        missing.reverse();
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        self.dirs = missing;
        Ok(())
    }

    /// Init succeeded: keep everything.
    fn keep(&mut self) {
        self.dirs.clear();
        self.file = None;
    }
}

impl Drop for Created {
    fn drop(&mut self) {
        if let Some(f) = &self.file {
            let _ = std::fs::remove_file(f);
        }
        for d in self.dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn state_text(p: &pmo_store::PmoInfo) -> String {
    match p.holder_pid {
        Some(pid) => format!("{} by pid {pid}", p.state.name()),
        None => p.state.name().to_string(),
    }
}

/// Read every page of PMO `name` through its protection (decrypt + verify), and for a
/// whole-PMO scheme check the whole checksum through a full attach; the number of pages.
fn deep_check(pool: &Pool, name: &str, key: &[u8]) -> anyhow::Result<u64> {
    let h = pool.open_pmo(name, pmo_store::Perm::Read, key, None)?;
    let whole = h.scheme().whole_checksum();
    let pages = h.size() / 4096;
    let mut buf = [0u8; 4096];
    for p in 0..pages {
        h.read_page(p, &mut buf)?;
    }
    drop(h);
    if whole {
        // Attach populates and verifies the whole-PMO checksum.
        drop(pool.attach_with(
            name,
            pmo_store::Perm::Read,
            key,
            pmo_store::AttachOptions {
                relocate: true,
                ..Default::default()
            },
        )?);
    }
    Ok(pages)
}

fn scheme_name(code: u32) -> String {
    pmo_store::Scheme::from_code(code).map_or_else(|_| format!("unknown({code:#x})"), |s| s.name())
}

/// `pmo bench filebench`'s options from the command line (the filters `pmo bench` shares with
/// the suite, then filebench's own).
#[allow(clippy::too_many_arguments)]
fn filebench_options(
    quick: bool,
    workloads: &[String],
    schemes: &[String],
    studies: &[String],
    depths: &[String],
    threads: &[usize],
    dir: &Option<PathBuf>,
    fb: &FilebenchArgs,
) -> anyhow::Result<pmo_filebench::bench::FbOptions> {
    use pmo_filebench::{bench, run::SyncMode};
    let FilebenchArgs {
        sets,
        seconds,
        syncs,
        latencies,
        paper,
        repeats,
    } = fb;
    let (seconds, paper) = (*seconds, *paper);
    let mut o = bench::FbOptions::new(quick, paper);
    if !workloads.is_empty() {
        o.workloads = workloads.iter().map(|w| bench::Source::parse(w)).collect();
    }
    for s in schemes {
        parse_scheme(s)?;
    }
    if !schemes.is_empty() {
        o.schemes = schemes.to_vec();
    }
    for s in studies {
        if !bench::STUDIES.contains(&s.as_str()) {
            bail!("unknown study '{s}' (one of {})", bench::STUDIES.join(", "));
        }
    }
    if !studies.is_empty() {
        o.studies = studies.to_vec();
    }
    if let Some(d) = depths.first() {
        pmo_store::PredictConfig::parse(d)?;
        o.predict = d.clone();
    }
    o.posix_dir = dir.clone();
    for s in sets {
        let (k, v) = s
            .split_once('=')
            .with_context(|| format!("--set {s:?}: expected VAR=VALUE"))?;
        o.sets
            .push((k.trim_start_matches('$').to_string(), v.to_string()));
    }
    if let Some(s) = seconds {
        if !(s > 0.0 && s.is_finite()) {
            bail!("--seconds must be positive");
        }
        o.seconds = s;
    }
    match *repeats {
        Some(0) => bail!("--repeats must be at least 1"),
        Some(n) => o.repeats = n,
        None => {}
    }
    if threads.contains(&0) {
        bail!("--threads must be at least 1");
    }
    if !threads.is_empty() {
        o.threads = threads.to_vec();
    }
    if !syncs.is_empty() {
        o.sync = syncs
            .iter()
            .map(|s| {
                SyncMode::from_name(s)
                    .with_context(|| format!("unknown sync mode '{s}' (paper or fsync)"))
            })
            .collect::<anyhow::Result<_>>()?;
    }
    if !latencies.is_empty() {
        o.latency = latencies.to_vec();
    }
    Ok(o)
}

fn parse_scheme(name: &str) -> anyhow::Result<pmo_store::Scheme> {
    Ok(pmo_store::Scheme::from_name(name)?)
}

/// Print the suite's tables, draw its figures into `out` (SVG, and PNG where possible), and
/// print where they are.
fn show_suite(records: &pmo_bench::Records, out: &std::path::Path) -> anyhow::Result<()> {
    out!("{}", pmo_bench::suite::tables(records))?;
    for f in pmo_bench::suite::draw(records, out)? {
        outln!("figure: {}", f.display())?;
        if let Some(png) = pmo_bench::plot::to_png(&f) {
            outln!("figure: {}", png.display())?;
        }
    }
    Ok(())
}

/// The fault mechanism and dirty tracking attaches use by default in this process (for a PMO
/// of `size` bytes; `None`: the rule by size).
fn print_fault_defaults(size: Option<u64>) -> anyhow::Result<()> {
    use pmo_store::tracking::{default_tracking, SCAN_MAX_BYTES};
    outln!(
        "fault mechanism: {}",
        pmo_store::attach::fault_mechanism_name()
    )?;
    match (pmo_store::DirtyTracking::from_env(), size) {
        (Some(t), _) => outln!("dirty tracking:  {t} (PMO_DIRTY)")?,
        (None, Some(size)) => outln!("dirty tracking:  {}", default_tracking(size))?,
        (None, None) => outln!(
            "dirty tracking:  {} for PMOs up to {} MiB, {} above",
            default_tracking(SCAN_MAX_BYTES),
            SCAN_MAX_BYTES >> 20,
            pmo_store::DEFAULT_TRACKING
        )?,
    }
    Ok(())
}

/// `scheme` with the plaintext placement of `--shadow` (`None`: as named).
fn with_shadow(
    scheme: pmo_store::Scheme,
    shadow: Option<&str>,
) -> anyhow::Result<pmo_store::Scheme> {
    Ok(match shadow {
        None => scheme,
        Some(s) => pmo_store::Scheme {
            shadow: pmo_store::Shadow::from_name(s).map_err(|e| anyhow!("--shadow: {e}"))?,
            ..scheme
        },
    })
}
