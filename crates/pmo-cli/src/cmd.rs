//! Command-line parsing and the commands.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::{Parser, Subcommand};
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, StoreError};

#[derive(Parser)]
#[command(name = "pmo", version, about = "Persistent Memory Objects: named, crash-consistent, at-rest protected memory", long_about = None)]
struct Cli {
    /// Pool file or device [env: PMO_POOL; default: ~/.local/share/pmo/default.pool]
    #[arg(long, global = true)]
    pool: Option<PathBuf>,
    /// File holding the key (else env PMO_KEY; a prompt only on a terminal)
    #[arg(long, global = true)]
    key_file: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum SchemeAction {
    /// Print the pool's default scheme and every scheme with its policies
    Show,
    /// Set the pool's default scheme
    Set {
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
        /// Size, e.g. 1GiB, 512MiB (ignored for devices)
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
        /// Default protection scheme of new PMOs: secure (default), none, wed, wedi, bp, bp-ip,
        /// bp-id, sp, sp-ip, sp-id; a ':medium' suffix (or --shadow medium) puts the plaintext
        /// copy on the medium
        #[arg(long, default_value = "secure")]
        scheme: String,
        /// Where the plaintext copy of an attached PMO lives: dram (default) or medium
        #[arg(long)]
        shadow: Option<String>,
    },
    /// Create a PMO
    Create {
        name: String,
        #[arg(long, value_parser = parse_bytes)]
        size: u64,
        /// Protection scheme (default: PMO_SCHEME, else the pool's default)
        #[arg(long)]
        scheme: Option<String>,
        /// Where the plaintext copy lives when attached: dram or medium (default: the scheme's)
        #[arg(long)]
        shadow: Option<String>,
    },
    /// Show or set the pool's default protection scheme for new PMOs
    Scheme {
        /// `show` or `set`
        #[command(subcommand)]
        action: SchemeAction,
    },
    /// Destroy a PMO (needs its key; fails while attached)
    Destroy { name: String },
    /// List PMOs: name, size, state, address
    List,
    /// Show the pool, or one PMO
    Info { name: Option<String> },
    /// Write bytes into a PMO atomically (attach read-write, copy, psync, detach)
    Write {
        name: String,
        #[arg(long, default_value_t = 0, value_parser = parse_bytes)]
        offset: u64,
        /// Read the bytes from this file (default: standard input)
        #[arg(long)]
        file: Option<PathBuf>,
        /// Wait up to this many seconds for another writer to detach
        #[arg(long)]
        wait: Option<f64>,
    },
    /// Copy bytes of a PMO to standard output (attach read-only)
    Read {
        name: String,
        #[arg(long, default_value_t = 0, value_parser = parse_bytes)]
        offset: u64,
        #[arg(long, value_parser = parse_bytes)]
        len: u64,
    },
    /// Verify every checksum, the namespace and the space accounting (exit 2 on any problem).
    /// With PMO names (and their key): also decrypt and verify every page of each, and run the
    /// heap checker on PMOs that hold a heap. Opening the pool recovers every PMO nobody holds
    /// (journal replayed, a plaintext copy left on the medium zeroed)
    Check {
        names: Vec<String>,
        /// Also run each named PMO's crash handler now (read-write open with its key: checksums
        /// left pending by a session with integrity at detach are written) before checking
        #[arg(long)]
        repair: bool,
    },
    /// Persistent CXL switch simulator: run traces, check correctness, reproduce the paper's study
    #[command(subcommand)]
    Cxlsim(Box<pmo_cxlsim::cli::Command>),
    /// Demonstrate the store on the default pool: a raw-pointer list that survives restarts
    Demo,
    /// LMDB's tools on environments kept in PMOs: stat, dump, load, copy, drop (mdb_TOOL's own
    /// options; environment paths are PMO names; docs/lmdb.md)
    Lmdb {
        /// stat, dump, load, copy or drop
        tool: String,
        /// The tool's arguments, e.g. `-e NAME`
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run benchmarks; write tidy CSV/JSON records and print tables
    #[command(after_help = BENCH_HELP)]
    Bench {
        /// Which benchmark: suite (the papers' workloads over the scheme/prediction/latency/
        /// thread matrix), store (psync, attach, faults, PMDK peer), schemes (protection costs),
        /// lmdb (LMDB on PMOs vs /dev/shm and disk), ycsb (YCSB A-F on those stores)
        #[arg(default_value = "suite")]
        which: String,
        /// suite: only these workloads (repeatable)
        #[arg(long = "workload")]
        workloads: Vec<String>,
        /// suite: only these schemes in the breakdown study (repeatable)
        #[arg(long = "scheme")]
        schemes: Vec<String>,
        /// suite: only these studies (repeatable): breakdown, session, predict, threads, cxl,
        /// placement
        #[arg(long = "study")]
        studies: Vec<String>,
        /// suite: prediction depths of the predict study (repeatable; off, N, adaptive)
        #[arg(long = "predict")]
        depths: Vec<String>,
        /// suite: matrix sizes: tiny, default, paper (the LOaPP paper's Table IV)
        #[arg(long)]
        size: Option<String>,
        /// suite: run nothing; print the tables and draw the figures of records saved with
        /// --json by an earlier run
        #[arg(long, value_name = "FILE.json")]
        from: Option<PathBuf>,
        /// Short configuration (fewer repeats)
        #[arg(long)]
        quick: bool,
        /// Also write the records as JSON here
        #[arg(long)]
        json: Option<PathBuf>,
        /// Directory for CSV (and figures)
        #[arg(long, default_value = "bench-out")]
        out: PathBuf,
        /// Directory for benchmark pools (default /dev/shm: emulated persistent memory)
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

const BENCH_HELP: &str = "\
Workloads: 2dconv, gauss, lu, tmm, cholesky (crate pmo-workloads; each verified against a DRAM run)
Schemes:   none, wed, wedi, bp, bp-ip, bp-id, sp, sp-ip, sp-id, secure, each also with
           ':medium' (the plaintext copy on the medium instead of DRAM)
Depths:    off, 1, 2, 4, 8, 16, ..., adaptive (PMO_PREDICT)
Latency:   dram, optane, cxl-near, cxl-far, custom:... (PMO_LATENCY; docs/latency.md)
Placement: DRAM (default; PMO_NUMA_NODE picks the node) or ':medium'
Studies:   breakdown (LOaPP Fig. 6), session (Figs. 7 and 8), predict, threads, cxl, placement
Output:    CSV (and --json) records in --out, SVG (and PNG) figures beside them;
           --from FILE.json redraws them from saved records";

fn parse_bytes(s: &str) -> Result<u64, String> {
    parse_size::Config::new()
        .with_binary()
        .parse_size(s)
        .map_err(|e| format!("'{s}': {e}"))
}

/// Exit code and one-line message for an error.
fn report(e: &anyhow::Error) -> ExitCode {
    let integrity = e.chain().any(|c| {
        c.downcast_ref::<StoreError>()
            .is_some_and(StoreError::is_integrity)
    }) || e.downcast_ref::<IntegrityProblem>().is_some();
    let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
    eprintln!("pmo: {}", msg.join(": "));
    ExitCode::from(if integrity { 2 } else { 1 })
}

/// `check` found problems.
#[derive(Debug)]
struct IntegrityProblem(String);
impl std::fmt::Display for IntegrityProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for IntegrityProblem {}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if let Cmd::Cxlsim(cmd) = cli.cmd {
        // The simulator reports its own errors and exit codes (2 = checker violation).
        return ExitCode::from(pmo_cxlsim::cli::run(*cmd).clamp(0, 255) as u8);
    }
    let r = run(cli);
    // Background detach work (integrity-at-detach checksums) finishes before the process exits.
    pmo_store::wait_for_background_detaches();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report(&e),
    }
}

fn pool_path(cli: &Cli) -> PathBuf {
    cli.pool
        .clone()
        .unwrap_or_else(pmo_store::default_pool_path)
}

fn open(cli: &Cli) -> anyhow::Result<Pool> {
    let path = pool_path(cli);
    Pool::open(&path).with_context(|| format!("pool {}", path.display()))
}

fn key(cli: &Cli) -> anyhow::Result<zeroize::Zeroizing<Vec<u8>>> {
    crate::keysrc::load(cli.key_file.as_deref()).map_err(|e| anyhow!(e))
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

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match &cli.cmd {
        Cmd::Init {
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
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("create {}", dir.display()))?;
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
            let pool = Pool::create(&path, *size, &opts)
                .with_context(|| format!("pool {}", path.display()))?;
            let info = pool.pool_info()?;
            println!(
                "created pool {} ({}, {} usable, up to {} PMOs, medium {})",
                path.display(),
                human(info.pool_size),
                human(info.heap_len),
                info.ns_capacity,
                info.medium.name()
            );
        }
        Cmd::Create {
            name,
            size,
            scheme,
            shadow,
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
            let info = pool.pcreate_with(name, *size, &key, scheme)?;
            println!(
                "created PMO '{}' ({}, scheme {}) at {:#x}",
                info.name,
                human(info.size),
                scheme_name(info.scheme),
                info.base_addr
            );
        }
        Cmd::Scheme { action } => {
            let pool = open(&cli)?;
            match action {
                SchemeAction::Set { name, shadow } => {
                    let s = with_shadow(parse_scheme(name)?, shadow.as_deref())?;
                    pool.set_default_scheme(s)?;
                    println!("default scheme of new PMOs: {s}");
                }
                SchemeAction::Show => {
                    println!("default scheme of new PMOs: {}", pool.default_scheme()?);
                    println!(
                        "{:<8} {:<6} {:<12} {:<10} PLAINTEXT COPY",
                        "SCHEME", "UNIT", "CIPHER", "INTEGRITY"
                    );
                    for s in pmo_store::Scheme::all() {
                        println!(
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
                        );
                    }
                }
            }
        }
        Cmd::Destroy { name } => {
            let pool = open(&cli)?;
            let key = key(&cli)?;
            pool.pdestroy(name, &key)?;
            println!("destroyed PMO '{name}'");
        }
        Cmd::List => {
            let pool = open(&cli)?;
            let list = pool.list()?;
            println!(
                "{:<32} {:>12} {:<24} {:<13} ADDRESS",
                "NAME", "SIZE", "STATE", "SCHEME"
            );
            for p in list {
                println!(
                    "{:<32} {:>12} {:<24} {:<13} {:#x}",
                    p.name,
                    human(p.size),
                    state_text(&p),
                    scheme_name(p.scheme),
                    p.base_addr
                );
            }
        }
        Cmd::Info { name: None } => {
            let pool = open(&cli)?;
            let i = pool.pool_info()?;
            println!(
                "pool:            {}",
                i.path
                    .as_deref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            );
            println!("medium:          {}", i.medium.name());
            println!("format version:  {}", i.format_version);
            println!("uuid:            {}", hex(&i.uuid));
            println!(
                "size:            {} (heap {}, free {}, largest free extent {})",
                human(i.pool_size),
                human(i.heap_len),
                human(i.free_bytes),
                human(i.largest_free)
            );
            println!("PMOs:            {} of {}", i.pmos, i.ns_capacity);
            println!(
                "address range:   {:#x}..{:#x}",
                i.base_addr,
                i.base_addr + i.heap_len
            );
            println!(
                "kdf:             argon2id m={} KiB t={} p={}",
                i.kdf.m_kib, i.kdf.t, i.kdf.p
            );
            println!("default scheme:  {}", scheme_name(i.config.scheme));
            print_fault_defaults();
            println!("cache flush:     {}", pmo_os::persist::flush_kind().name());
        }
        Cmd::Info { name: Some(name) } => {
            let pool = open(&cli)?;
            let p = pool.info(name)?;
            println!("name:            {}", p.name);
            println!(
                "size:            {} ({} pages)",
                human(p.size),
                p.size / 4096
            );
            println!("uuid:            {}", hex(&p.uuid));
            println!("state:           {}", state_text(&p));
            println!("scheme:          {}", scheme_name(p.scheme));
            println!("stable address:  {:#x}", p.base_addr);
            let on_medium = pmo_store::Scheme::from_code(p.scheme)
                .is_ok_and(|s| s.shadow == pmo_store::Shadow::Medium);
            println!(
                "extent:          {:#x} + {} (data twice, for shadow paging{})",
                p.extent_off,
                human(p.extent_len),
                if on_medium {
                    ", and the plaintext area"
                } else {
                    ""
                }
            );
            if on_medium {
                println!(
                    "fault mechanism: sigsegv (the view maps the plaintext area on the medium)"
                );
                println!("dirty tracking:  fault");
            } else {
                print_fault_defaults();
            }
            match pool.last_session(name)? {
                None => println!("last session:    none recorded"),
                Some(s) => {
                    println!(
                        "last session:    {:.3} ms: {} psyncs, {} faults, {} pages decrypted at a fault + {} ahead of use, {} encrypted, {} persisted",
                        s.wall_ns as f64 / 1e6,
                        s.psyncs,
                        s.faults,
                        s.pages_decrypted,
                        s.predicted,
                        s.pages_encrypted,
                        human(s.bytes_persisted)
                    );
                    for (cat, ns) in s.categories() {
                        let share = if s.wall_ns > 0 {
                            100.0 * ns as f64 / s.wall_ns as f64
                        } else {
                            0.0
                        };
                        println!("  {cat:<14} {:>10.3} ms {share:>5.1}%", ns as f64 / 1e6);
                    }
                }
            }
        }
        Cmd::Write {
            name,
            offset,
            file,
            wait,
        } => {
            let pool = open(&cli)?;
            let key = key(&cli)?;
            let size = pool.info(name)?.size;
            let mut data = Vec::new();
            let limit = size.saturating_sub(*offset) + 1;
            match file {
                Some(f) => std::fs::File::open(f)
                    .with_context(|| format!("open {}", f.display()))?
                    .take(limit)
                    .read_to_end(&mut data)?,
                None => std::io::stdin().lock().take(limit).read_to_end(&mut data)?,
            };
            if *offset + data.len() as u64 > size {
                bail!(
                    "{} bytes at offset {offset} do not fit in the {}-byte PMO '{name}'",
                    data.len(),
                    size
                );
            }
            let h = pool.open_pmo(name, Perm::Write, &key, wait.map(Duration::from_secs_f64))?;
            let stats = h.write_at(*offset, &data)?;
            eprintln!(
                "wrote {} bytes at offset {offset} of '{name}' (psync {}: {} pages)",
                data.len(),
                stats.seq,
                stats.pages
            );
        }
        Cmd::Read { name, offset, len } => {
            let pool = open(&cli)?;
            let key = key(&cli)?;
            let h = pool.open_pmo(name, Perm::Read, &key, None)?;
            let mut out = std::io::stdout().lock();
            let mut done = 0u64;
            let mut buf = vec![0u8; 1 << 20];
            while done < *len {
                let n = (*len - done).min(buf.len() as u64) as usize;
                h.read_at(offset + done, &mut buf[..n])?;
                out.write_all(&buf[..n])?;
                done += n as u64;
            }
            out.flush()?;
        }
        Cmd::Check { names, repair } => {
            let pool = open(&cli)?;
            let key = if names.is_empty() {
                None
            } else {
                Some(key(&cli)?)
            };
            if *repair {
                if names.is_empty() {
                    bail!("--repair needs the names of the PMOs to repair (and their key)");
                }
                for name in names {
                    let key = key.as_deref().map(|k| &k[..]).unwrap_or_default();
                    drop(pool.open_pmo(name, Perm::Write, key, None)?);
                    println!("'{name}': recovered (journal, pending checksums, plaintext copy)");
                }
            }
            for name in names {
                let key = key.as_deref().map(|k| &k[..]).unwrap_or_default();
                let pages = deep_check(&pool, name, key)?;
                match pmo_heap::check_pmo(&pool, name, key) {
                    Ok(None) => println!("'{name}': {pages} pages verified; no heap"),
                    Ok(Some(h)) => println!(
                        "'{name}': {pages} pages verified; heap ok: {} live blocks, {} of {} bytes allocated",
                        h.live_allocations, h.allocated_bytes, h.capacity_bytes
                    ),
                    Err(pmo_heap::PmoHeapError::Store(e)) => return Err(e.into()),
                    Err(e) => {
                        return Err(IntegrityProblem(format!("'{name}': heap check: {e}")).into())
                    }
                }
            }
            let r = pool.check()?;
            for s in &r.skipped {
                eprintln!("skipped '{s}': attached read-write by another user");
            }
            println!(
                "checked {} PMOs; heap {} = used {} + free {}",
                r.pmos, r.heap_len, r.used_bytes, r.free_bytes
            );
            if !r.problems.is_empty() {
                for p in &r.problems {
                    eprintln!("problem: {p}");
                }
                return Err(
                    IntegrityProblem(format!("{} problem(s) found", r.problems.len())).into(),
                );
            }
            println!("ok");
        }
        Cmd::Cxlsim(_) => unreachable!("handled in main"),
        Cmd::Demo => {
            let key = match crate::keysrc::load(cli.key_file.as_deref()) {
                Ok(k) => k,
                Err(_) => {
                    println!(
                        "(no key given: using the demo key \"demo\"; set PMO_KEY for your own)"
                    );
                    zeroize::Zeroizing::new(b"demo".to_vec())
                }
            };
            crate::demo::run(&pool_path(&cli), &key)?;
        }
        Cmd::Lmdb { tool, args } => {
            let pool = Pool::open(&pool_path(&cli))?;
            let key = key(&cli)?;
            let code = pmo_lmdb::programs::cli(pool, &key, tool, args)?;
            if code != 0 {
                std::process::exit(code);
            }
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
            size,
            from,
        } => {
            let mut records = pmo_bench::Records::default();
            if from.is_some() && which != "suite" {
                bail!("--from is for the suite");
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
                    std::fs::create_dir_all(out)
                        .with_context(|| format!("create {}", out.display()))?;
                    let r = pmo_bench::suite::run(&opts, &mut records);
                    show_suite(&records, out)?;
                    let csv = out.join("suite.csv");
                    records.write_csv(&csv)?;
                    println!("records: {}", csv.display());
                    if let Some(j) = json {
                        records.write_json(j)?;
                        println!("records: {}", j.display());
                    }
                    r?;
                    return Ok(());
                }
                "store" => {
                    let mut opts = pmo_bench::store::StoreBenchOptions::new(*quick);
                    if let Some(d) = dir {
                        opts.dir = d.clone();
                    }
                    pmo_bench::store::run(&opts, &mut records)?;
                    pmo_bench::store::print_table(&records);
                }
                "schemes" => {
                    let mut opts = pmo_bench::schemes::SchemesBenchOptions::new(*quick);
                    if let Some(d) = dir {
                        opts.dir = d.clone();
                    }
                    pmo_bench::schemes::run(&opts, &mut records)?;
                    pmo_bench::schemes::print_table(&records);
                    std::fs::create_dir_all(out)
                        .with_context(|| format!("create {}", out.display()))?;
                    let svg = out.join("schemes-fig1.svg");
                    pmo_bench::schemes::draw_fig1(&records, &svg)?;
                    println!("figure: {}", svg.display());
                    if let Some(png) = pmo_bench::plot::to_png(&svg) {
                        println!("figure: {}", png.display());
                    }
                }
                "lmdb" | "ycsb" => {
                    let mut opts = pmo_lmdb::bench::LmdbBenchOptions::new(*quick);
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
                        println!("figure: {}", f.display());
                    }
                    r?;
                }
                other => {
                    bail!("unknown benchmark '{other}' (known: suite, store, schemes, lmdb, ycsb)")
                }
            }
            std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
            let csv = out.join(format!("{which}.csv"));
            records.write_csv(&csv)?;
            println!("records: {}", csv.display());
            if let Some(j) = json {
                records.write_json(j)?;
                println!("records: {}", j.display());
            }
        }
    }
    Ok(())
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

fn parse_scheme(name: &str) -> anyhow::Result<pmo_store::Scheme> {
    Ok(pmo_store::Scheme::from_name(name)?)
}

/// Print the suite's tables, draw its figures into `out` (SVG, and PNG where possible), and
/// print where they are.
fn show_suite(records: &pmo_bench::Records, out: &std::path::Path) -> anyhow::Result<()> {
    pmo_bench::suite::print_tables(records);
    for f in pmo_bench::suite::draw(records, out)? {
        println!("figure: {}", f.display());
        if let Some(png) = pmo_bench::plot::to_png(&f) {
            println!("figure: {}", png.display());
        }
    }
    Ok(())
}

/// The fault mechanism and dirty tracking attaches use by default in this process.
fn print_fault_defaults() {
    println!(
        "fault mechanism: {}",
        pmo_store::attach::fault_mechanism_name()
    );
    println!(
        "dirty tracking:  {}",
        pmo_store::DirtyTracking::from_env().unwrap_or(pmo_store::DEFAULT_TRACKING)
    );
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
