//! The dispatcher, on top of the command modules: the command line (`Cli`, `Cmd`: every
//! command in the order `pmo --help` lists them, each with its help text), `main`, the merge of
//! `--pool`/`--key-file` given before and after the command, error reporting and exit codes.
//! The commands themselves live one module per group (`pools`, `pmos`, `life`, `resize`,
//! `demo`, `lmdb`, `fs`, `bench`; `cxlsim` is `pmo_cxlsim::cli`), over `common`; none of them
//! imports this module.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use pmo_store::StoreError;

use crate::common::{Ctx, IntegrityProblem, KeyArg, PoolArg};
use crate::{bench, demo, fs, life, lmdb, pmos, pools, resize};

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

#[derive(Subcommand)]
enum Cmd {
    /// Create a pool (a file, or format a /dev/daxX.Y device)
    Init(pools::InitArgs),
    /// Create a PMO (it takes about twice its size in the pool: shadow paging)
    #[command(
        after_help = "A PMO needs about twice its size in pool space (a primary and a shadow copy of \
                      every page; three times with the plaintext copy on the medium): `pmo info` \
                      shows the largest PMO that still fits."
    )]
    Create(pmos::CreateArgs),
    /// Show or set the pool's default protection scheme for new PMOs
    #[command(mut_arg("pool", |a| a.global(true)))]
    Scheme(pools::SchemeArgs),
    /// Destroy a PMO (needs its key; fails while attached)
    Destroy(pmos::DestroyArgs),
    /// List PMOs: name, size, state, scheme, address
    List(pools::ListArgs),
    /// Show the pool (free space, largest PMO that fits), or one PMO and its last session
    Info(pools::InfoArgs),
    /// Write bytes into a PMO atomically (attach read-write, copy, psync, detach)
    Write(pmos::WriteArgs),
    /// Copy bytes of a PMO to standard output (attach read-only)
    Read(pmos::ReadArgs),
    /// Verify checksums, the namespace and the space accounting (exit 2 on any problem)
    ///
    /// With PMO names (and their key): also decrypt and verify every page of each, and run the
    /// heap checker on PMOs that hold a heap. Opening the pool recovers every PMO nobody holds
    /// (journal replayed, a plaintext copy left on the medium zeroed).
    Check(pools::CheckArgs),
    /// A PMO's life after create: rename, rekey, export, import, copy, snapshot
    #[command(flatten)]
    Life(life::LifeCmd),
    /// Grow or shrink a PMO; grow the pool
    #[command(flatten)]
    Resize(resize::ResizeCmd),
    /// Persistent CXL switch simulator: run traces, check correctness, reproduce the paper's study
    #[command(subcommand)]
    Cxlsim(Box<pmo_cxlsim::cli::Command>),
    /// Demonstrate the store: a raw-pointer list in a PMO that survives restarts
    #[command(
        after_help = "Without --key-file or PMO_KEY the demo uses the key \"demo\" (never a prompt)."
    )]
    Demo(demo::DemoArgs),
    /// LMDB's tools on environments kept in PMOs: stat, dump, load, copy, drop (mdb_TOOL's own
    /// options; environment paths are PMO names; docs/lmdb.md)
    Lmdb(lmdb::LmdbArgs),
    /// The file store in PMOs that `pmo bench filebench` uses: check, ls, cat, put, rm, mkdir
    /// (docs/filebench.md)
    #[command(
        after_help = "Without --key-file or PMO_KEY the store's default key (\"pmo-fs\", the one `pmo bench filebench` uses) opens its PMOs.",
        mut_arg("pool", |a| a.global(true)),
        mut_arg("key_file", |a| a.global(true))
    )]
    Fs(fs::FsArgs),
    /// Run benchmarks; write tidy CSV/JSON records, tables and figures
    #[command(after_help = bench::BENCH_HELP)]
    Bench(bench::BenchArgs),
}

impl Cmd {
    /// The command's own `--pool` and `--key-file` (none for commands without a pool).
    fn pool_and_key(&self) -> (Option<&PoolArg>, Option<&KeyArg>) {
        match self {
            Cmd::Init(pools::InitArgs { pool, .. })
            | Cmd::Scheme(pools::SchemeArgs { pool, .. })
            | Cmd::List(pools::ListArgs { pool })
            | Cmd::Info(pools::InfoArgs { pool, .. }) => (Some(pool), None),
            Cmd::Create(pmos::CreateArgs { pool, key, .. })
            | Cmd::Destroy(pmos::DestroyArgs { pool, key, .. })
            | Cmd::Write(pmos::WriteArgs { pool, key, .. })
            | Cmd::Read(pmos::ReadArgs { pool, key, .. })
            | Cmd::Check(pools::CheckArgs { pool, key, .. })
            | Cmd::Demo(demo::DemoArgs { pool, key })
            | Cmd::Lmdb(lmdb::LmdbArgs { pool, key, .. })
            | Cmd::Fs(fs::FsArgs { pool, key, .. }) => (Some(pool), Some(key)),
            Cmd::Life(l) => l.pool_and_key(),
            Cmd::Resize(r) => r.pool_and_key(),
            Cmd::Cxlsim(_) | Cmd::Bench(_) => (None, None),
        }
    }
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
    let Cli { pool, key, cmd } = cli;
    let ctx = Ctx { pool, key };
    let r = crate::envcheck::check().and_then(|()| run(&cmd, &ctx));
    // Background detach work (integrity-at-detach checksums) finishes before the process exits.
    pmo_store::wait_for_background_detaches();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report(&e),
    }
}

fn run(cmd: &Cmd, ctx: &Ctx) -> anyhow::Result<()> {
    match cmd {
        Cmd::Init(a) => pools::init(a, ctx),
        Cmd::Create(a) => pmos::create(a, ctx),
        Cmd::Scheme(a) => pools::scheme(a, ctx),
        Cmd::Life(l) => life::command(l, ctx),
        Cmd::Resize(r) => resize::command(r, ctx),
        Cmd::Destroy(a) => pmos::destroy(a, ctx),
        Cmd::List(a) => pools::list(a, ctx),
        Cmd::Info(a) => pools::info(a, ctx),
        Cmd::Write(a) => pmos::write(a, ctx),
        Cmd::Read(a) => pmos::read(a, ctx),
        Cmd::Check(a) => pools::check(a, ctx),
        Cmd::Cxlsim(_) => unreachable!("handled in main"),
        Cmd::Demo(_) => demo::command(ctx),
        Cmd::Lmdb(a) => lmdb::command(a, ctx),
        Cmd::Fs(a) => fs::command(a, ctx),
        Cmd::Bench(a) => bench::command(a),
    }
}
