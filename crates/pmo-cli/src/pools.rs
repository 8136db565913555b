//! `pmo init|scheme|list|info|check`: the commands on the pool as a whole (`info` and `check`
//! also take PMO names: one PMO's details, its pages verified).

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context};
use clap::Subcommand;
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, StoreError};

use crate::common::{
    human, is_dax_device, parse_bytes, parse_scheme, scheme_name, with_shadow, Ctx,
    IntegrityProblem, KeyArg, PoolArg,
};

#[derive(clap::Args)]
pub(crate) struct InitArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArg,
    /// Size, e.g. 1GiB, 512MiB (ignored for devices). A PMO takes about twice its size
    #[arg(long, value_parser = parse_bytes)]
    pub(crate) size: u64,
    /// Argon2id memory in KiB for keys of this pool
    #[arg(long, default_value_t = KdfParams::DEFAULT.m_kib)]
    pub(crate) kdf_mem_kib: u32,
    /// Argon2id iterations
    #[arg(long, default_value_t = KdfParams::DEFAULT.t)]
    pub(crate) kdf_iters: u32,
    /// Namespace slots (maximum number of PMOs)
    #[arg(long)]
    pub(crate) max_pmos: Option<u64>,
    /// Backend: file, dax or pmem-emul (default: detect)
    #[arg(long)]
    pub(crate) medium: Option<String>,
    /// Create a sparse file instead of allocating the whole pool now
    #[arg(long)]
    pub(crate) sparse: bool,
    /// Default scheme of new PMOs: secure, none, wed, wedi, bp, bp-ip, bp-id, sp, sp-ip,
    /// sp-id (`pmo scheme show`); a ':medium' suffix puts the plaintext copy on the medium
    #[arg(long, default_value = "secure")]
    pub(crate) scheme: String,
    /// Where the plaintext copy of an attached PMO lives: dram (default) or medium
    #[arg(long)]
    pub(crate) shadow: Option<String>,
    /// The AEAD of `secure`'s pages: aegis (AEGIS-256X4, the default) or gcm (AES-256-GCM);
    /// the same as the scheme suffix `:aegis` or `:gcm`
    #[arg(long)]
    pub(crate) cipher: Option<String>,
}

#[derive(clap::Args)]
pub(crate) struct SchemeArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArg,
    #[command(subcommand)]
    pub(crate) action: SchemeAction,
}

#[derive(Subcommand)]
pub(crate) enum SchemeAction {
    /// Print the pool's default scheme and every scheme with its policies
    Show,
    /// Set the pool's default scheme
    Set {
        /// Scheme: secure, none, wed, wedi, bp, bp-ip, bp-id, sp, sp-ip, sp-id (':medium' suffix allowed)
        name: String,
        /// Where the plaintext copy of an attached PMO lives: dram (default) or medium
        #[arg(long)]
        shadow: Option<String>,
        /// The AEAD of `secure`'s pages: aegis (AEGIS-256X4, the default) or gcm (AES-256-GCM);
        /// the same as the scheme suffix `:aegis` or `:gcm`
        #[arg(long)]
        cipher: Option<String>,
    },
}

#[derive(clap::Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArg,
}

#[derive(clap::Args)]
pub(crate) struct InfoArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArg,
    /// PMO to show (default: the pool)
    pub(crate) name: Option<String>,
}

#[derive(clap::Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArg,
    #[command(flatten)]
    pub(crate) key: KeyArg,
    /// PMOs to verify page by page (needs their key)
    pub(crate) names: Vec<String>,
    /// Repair first: without names, the namespace (each damaged copy rewritten from its
    /// mirror, done by any open; reports what it cannot rebuild); with names, also run each
    /// named PMO's crash handler now (read-write open with its key: checksums left pending by
    /// a session with integrity at detach are written) before checking
    #[arg(long)]
    pub(crate) repair: bool,
    /// With --repair: free namespace slots whose two copies are both damaged. The PMO such
    /// a slot held is lost, and the space it may cover becomes free
    #[arg(long, requires = "repair")]
    pub(crate) drop_damaged: bool,
}

/// `pmo init`.
pub(crate) fn init(args: &InitArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let InitArgs {
        pool: _,
        size,
        kdf_mem_kib,
        kdf_iters,
        max_pmos,
        medium,
        sparse,
        scheme,
        shadow,
        cipher,
    } = args;
    let path = ctx.pool_path();
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
        scheme: with_shadow(parse_scheme(scheme)?, shadow.as_deref(), cipher.as_deref())?,
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
    Ok(())
}

/// `pmo scheme show|set`.
pub(crate) fn scheme(args: &SchemeArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let SchemeArgs { action, .. } = args;
    let pool = ctx.open()?;
    match action {
        SchemeAction::Set {
            name,
            shadow,
            cipher,
        } => {
            let s = with_shadow(parse_scheme(name)?, shadow.as_deref(), cipher.as_deref())?;
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
            outln!(
                "secure's AEAD: aegis-256x4 (default) or aes-256-gcm (secure:gcm, or --cipher gcm)"
            )?;
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
    Ok(())
}

/// `pmo list`.
pub(crate) fn list(args: &ListArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let ListArgs { .. } = args;
    let pool = ctx.open()?;
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
    Ok(())
}

/// `pmo info [NAME]`: the pool, or one PMO and its last session.
pub(crate) fn info(args: &InfoArgs, ctx: &Ctx) -> anyhow::Result<()> {
    match &args.name {
        None => {
            let pool = ctx.open()?;
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
        Some(name) => {
            let pool = ctx.open()?;
            let p = pool.info(name)?;
            outln!("name:            {}", p.name)?;
            outln!(
                "size:            {} ({})",
                human(p.size),
                crate::text::count(p.size / 4096, "page")
            )?;
            outln!("uuid:            {}", hex(&p.uuid))?;
            outln!("state:           {}", state_text(&p))?;
            if p.readers > 0 {
                outln!(
                    "readers:         {} beside the writer, the oldest on psync {} (its page versions are kept for it)",
                    p.readers,
                    p.oldest_pin.map_or_else(|| "?".into(), |s| s.to_string())
                )?;
            }
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
    }
    Ok(())
}

/// `pmo check [NAME...]`.
pub(crate) fn check(args: &CheckArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let CheckArgs {
        names,
        repair,
        drop_damaged,
        ..
    } = args;
    let pool = ctx.open()?;
    let key = if names.is_empty() {
        None
    } else {
        Some(ctx.key()?)
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
            Ok(Some(h)) => outln!(
                "'{name}': {} verified; heap ok: {} live blocks, {} of {} bytes allocated",
                crate::text::count(pages, "page"),
                h.live_allocations,
                h.allocated_bytes,
                h.capacity_bytes
            )?,
            Err(pmo_heap::PmoHeapError::Store(e)) => return Err(e.into()),
            Err(e) => return Err(IntegrityProblem(format!("'{name}': heap check: {e}")).into()),
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
        return Err(IntegrityProblem(format!("{} problem(s) found", r.problems.len())).into());
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
    Ok(())
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
    let state = match p.holder_pid {
        Some(pid) => format!("{} by pid {pid}", p.state.name()),
        None => p.state.name().to_string(),
    };
    match p.readers {
        0 => state,
        n if p.state == pmo_store::AttachState::Readers => format!("{state} ({n})"),
        n => format!("{state} +{n}r"),
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
