//! One measured run of a workload in a PMO: the attach-session driver.
//!
//! Owns [`RunConfig`], [`RunResult`], [`run`], [`run_with_reference`] and [`verify_pmo`].
//!
//! A run:
//! 1. setup (not timed in `wall_ns`): create a PMO of the workload's size with the configured
//!    scheme, attach, write the input, psync, detach;
//! 2. the measured part: attach; run the critical loop; after every `iters_per_psync`
//!    iterations psync; after every `session_psyncs` (K) psyncs detach and attach again; after
//!    the last iteration psync what is left and detach. Each store call and each iteration is
//!    timed around the call;
//! 3. verification (not timed; a test's `tamper` hook runs just before it): attach read-only, which decrypts and checks integrity, and
//!    compare every element bitwise with the same kernel run on a `Vec` in DRAM. An integrity
//!    error at this attach also counts as a failed verification;
//! 4. the PMO is destroyed unless `keep_pmo`.
//!
//! Invariant: `wall_ns >= attach_ns + psync_ns + detach_ns + compute_ns` (the rest is the
//! driver's own bookkeeping).

use std::time::Instant;

use pmo_store::{AttachOptions, Attachment, Perm, Pool, Scheme, StoreError};

use crate::calibrate::{check_threads, default_psync_interval, Calibration, Reference};
use crate::error::{invalid, Result};
use crate::kernels::{Dims, Size, Workload};
use crate::mem::{with_f64s, with_f64s_ref};

/// Largest attach-session size accepted (the paper sweeps 1..=16).
pub const MAX_SESSION_PSYNCS: usize = 1024;

/// What to run and how.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub workload: Workload,
    pub dims: Dims,
    /// Threads computing each iteration (rows split between them).
    pub threads: usize,
    /// Protection scheme of the PMO.
    pub scheme: Scheme,
    /// Critical-loop iterations per psync; `None`: calibrate from the DRAM reference run to
    /// `psync_interval`.
    pub iters_per_psync: Option<usize>,
    /// The psync tempo `iters_per_psync = None` calibrates to, in time of the unprotected run
    /// (`None`: [`default_psync_interval`]; the papers psync once per second).
    pub psync_interval: Option<std::time::Duration>,
    /// Attach-session size K: psyncs per attach session (detach and re-attach after every K).
    pub session_psyncs: usize,
    /// The PMO's key.
    pub key: Vec<u8>,
    /// Options of every attach of the measured part.
    pub attach: AttachOptions,
    /// Keep the PMO after the run (its name is in [`RunResult::pmo`]).
    pub keep_pmo: bool,
    /// Fault injection for testing the verifier: called on the PMO's memory after the
    /// measured part and before verification (then psynced). `None` in real runs.
    pub tamper: Option<fn(&mut [f64])>,
}

impl RunConfig {
    /// A workload at a size preset: 1 thread, scheme `secure`, calibrated tempo, K = 2 (the
    /// paper's default session size).
    pub fn new(workload: Workload, size: Size) -> RunConfig {
        RunConfig {
            workload,
            dims: workload.dims(size),
            threads: 1,
            scheme: Scheme::SECURE,
            iters_per_psync: None,
            psync_interval: None,
            session_psyncs: 2,
            key: b"pmo-workloads".to_vec(),
            attach: AttachOptions::default(),
            keep_pmo: false,
            tamper: None,
        }
    }

    fn validate(&self) -> Result<()> {
        self.workload.validate(self.dims)?;
        check_threads(self.threads)?;
        if self.session_psyncs == 0 || self.session_psyncs > MAX_SESSION_PSYNCS {
            return Err(invalid(
                "session_psyncs",
                format!("{} (1..={MAX_SESSION_PSYNCS})", self.session_psyncs),
            ));
        }
        if self.iters_per_psync == Some(0) {
            return Err(invalid("iters_per_psync", "0 (at least 1)"));
        }
        Ok(())
    }
}

/// What a run measured. Times are nanoseconds, measured around the calls.
#[derive(Clone, Debug, Default)]
pub struct RunResult {
    pub workload: String,
    pub scheme: String,
    pub dims: String,
    pub threads: usize,
    pub iters_per_psync: usize,
    pub session_psyncs: usize,
    /// The measured part, first attach to last detach.
    pub wall_ns: u64,
    /// Inside `attach_with` (whole-PMO designs decrypt and verify here).
    pub attach_ns: u64,
    /// Inside `psync`.
    pub psync_ns: u64,
    /// Inside `detach`.
    pub detach_ns: u64,
    /// Inside the critical-loop iterations (includes page faults taken while computing).
    pub compute_ns: u64,
    /// Setup: create, write the input, psync, detach (not part of `wall_ns`).
    pub setup_ns: u64,
    /// The same kernel on a `Vec` in DRAM, critical loop only (unprotected reference).
    pub dram_compute_ns: u64,
    /// psyncs made.
    pub psyncs: u64,
    /// Attach sessions (attaches in the measured part).
    pub sessions: u64,
    /// Pages the psyncs committed.
    pub pages_committed: u64,
    /// Bytes the psyncs wrote to the medium.
    pub bytes_persisted: u64,
    /// Page faults served by the store's handler.
    pub faults: u64,
    /// Time the fault handler spent filling pages (decrypt + verify), included in compute.
    pub fill_ns: u64,
    /// The store's own accounting, summed over the measured sessions: the LOaPP Fig. 6
    /// categories (`pmo_store::SessionStats::categories`) and event counts.
    pub session: pmo_store::SessionStats,
    /// Every element of the PMO equals the DRAM run's, bit for bit.
    pub verified: bool,
    /// Why verification failed (first differing element, or the integrity error).
    pub verify_error: Option<String>,
    /// The PMO's name.
    pub pmo: String,
}

impl RunResult {
    /// Wall time in seconds.
    pub fn wall_s(&self) -> f64 {
        self.wall_ns as f64 / 1e9
    }

    /// The run's parameters as (name, value) pairs, for tidy records.
    pub fn params(&self) -> Vec<(&'static str, String)> {
        vec![
            ("workload", self.workload.clone()),
            ("dims", self.dims.clone()),
            ("scheme", self.scheme.clone()),
            ("threads", self.threads.to_string()),
            ("session_psyncs", self.session_psyncs.to_string()),
            ("iters_per_psync", self.iters_per_psync.to_string()),
        ]
    }

    /// Every measurement as (metric, value, unit), for tidy records (times in ms).
    pub fn metrics(&self) -> Vec<(&'static str, f64, &'static str)> {
        let ms = |ns: u64| ns as f64 / 1e6;
        vec![
            ("wall", ms(self.wall_ns), "ms"),
            ("attach", ms(self.attach_ns), "ms"),
            ("psync", ms(self.psync_ns), "ms"),
            ("detach", ms(self.detach_ns), "ms"),
            ("compute", ms(self.compute_ns), "ms"),
            ("fill", ms(self.fill_ns), "ms"),
            ("setup", ms(self.setup_ns), "ms"),
            ("dram_compute", ms(self.dram_compute_ns), "ms"),
            ("psyncs", self.psyncs as f64, "count"),
            ("sessions", self.sessions as f64, "count"),
            ("pages_committed", self.pages_committed as f64, "pages"),
            ("bytes_persisted", self.bytes_persisted as f64, "bytes"),
            ("faults", self.faults as f64, "count"),
            ("verified", f64::from(u8::from(self.verified)), "bool"),
        ]
    }
}

/// Run `cfg` in a new PMO of `pool`, computing the DRAM reference first.
pub fn run(pool: &Pool, cfg: &RunConfig) -> Result<RunResult> {
    cfg.validate()?;
    let reference = Reference::compute(cfg.workload, cfg.dims, cfg.threads)?;
    run_with_reference(pool, cfg, &reference)
}

/// Run `cfg` against an already computed reference (the suite computes one per workload and
/// reuses it for every scheme).
pub fn run_with_reference(
    pool: &Pool,
    cfg: &RunConfig,
    reference: &Reference,
) -> Result<RunResult> {
    cfg.validate()?;
    if reference.workload != cfg.workload || reference.dims != cfg.dims {
        return Err(invalid(
            "reference",
            format!(
                "computed for {} {}, the run is {} {}",
                reference.workload, reference.dims, cfg.workload, cfg.dims
            ),
        ));
    }
    let w = cfg.workload;
    let dims = cfg.dims;
    let len_f64 = w.len_f64(dims);
    let steps = w.steps(dims);
    let iters_per_psync = match cfg.iters_per_psync {
        Some(n) => n,
        None => {
            let interval = cfg
                .psync_interval
                .unwrap_or_else(|| default_psync_interval(w, dims));
            Calibration::from_reference(reference, interval).iters_per_psync
        }
    };
    let name = unique_name(w);
    let mut r = RunResult {
        workload: w.name().into(),
        scheme: cfg.scheme.name(),
        dims: dims.to_string(),
        threads: cfg.threads,
        iters_per_psync,
        session_psyncs: cfg.session_psyncs,
        dram_compute_ns: reference.compute_ns,
        pmo: name.clone(),
        ..RunResult::default()
    };

    // 1. Setup.
    let t0 = Instant::now();
    pool.pcreate_with(&name, w.len_bytes(dims) as u64, &cfg.key, Some(cfg.scheme))?;
    let measured = (|| -> Result<()> {
        {
            let mut att = pool.attach_with(&name, Perm::Write, &cfg.key, cfg.attach)?;
            with_f64s(&mut att, len_f64, |mem| w.init(dims, mem))?;
            att.psync()?;
            att.detach()?;
        }
        r.setup_ns = t0.elapsed().as_nanos() as u64;

        // 2. The measured part.
        let wall = Instant::now();
        let mut att = Some(attach_timed(pool, &name, cfg, &mut r)?);
        let mut since_psync = 0usize;
        let mut psyncs_in_session = 0usize;
        for step in 0..steps {
            let a = att
                .as_mut()
                .ok_or_else(|| invalid("session", "not attached"))?;
            let t = Instant::now();
            with_f64s(a, len_f64, |mem| w.step(dims, mem, step, cfg.threads))?;
            r.compute_ns += t.elapsed().as_nanos() as u64;
            since_psync += 1;
            if since_psync == iters_per_psync || step + 1 == steps {
                psync_timed(a, &mut r)?;
                since_psync = 0;
                psyncs_in_session += 1;
                if psyncs_in_session == cfg.session_psyncs && step + 1 < steps {
                    if let Some(a) = att.take() {
                        detach_timed(a, &mut r)?;
                    }
                    att = Some(attach_timed(pool, &name, cfg, &mut r)?);
                    psyncs_in_session = 0;
                }
            }
        }
        if let Some(a) = att.take() {
            detach_timed(a, &mut r)?;
        }
        r.wall_ns = wall.elapsed().as_nanos() as u64;

        if let Some(tamper) = cfg.tamper {
            let mut a = pool.attach_with(&name, Perm::Write, &cfg.key, AttachOptions::default())?;
            with_f64s(&mut a, len_f64, tamper)?;
            a.psync()?;
            a.detach()?;
        }

        // 3. Verification.
        match verify_pmo(pool, &name, &cfg.key, reference) {
            Ok(()) => r.verified = true,
            Err(VerifyFailure::Mismatch(why)) | Err(VerifyFailure::Integrity(why)) => {
                r.verify_error = Some(why)
            }
            Err(VerifyFailure::Other(e)) => return Err(e),
        }
        Ok(())
    })();
    // 4. Cleanup, also after a failure.
    if !cfg.keep_pmo || measured.is_err() {
        let destroyed = pool.pdestroy(&name, &cfg.key);
        measured?;
        destroyed?;
    } else {
        measured?;
    }
    Ok(r)
}

/// Why [`verify_pmo`] did not pass.
#[derive(Debug)]
pub enum VerifyFailure {
    /// An element differs from the reference.
    Mismatch(String),
    /// The store refused a page (integrity check failed).
    Integrity(String),
    /// Anything else (the PMO is missing, busy, the key is wrong ...).
    Other(crate::error::WorkloadError),
}

/// Attach `name` read-only and compare its whole content with `reference`, bit for bit.
pub fn verify_pmo(
    pool: &Pool,
    name: &str,
    key: &[u8],
    reference: &Reference,
) -> std::result::Result<(), VerifyFailure> {
    let integrity = |e: StoreError| match e {
        e @ StoreError::Integrity { .. } => VerifyFailure::Integrity(e.to_string()),
        e => VerifyFailure::Other(e.into()),
    };
    // Populate at attach: every page is decrypted and checked here, so a page that fails its
    // check is an attach error, not a failed fault while the comparison reads it.
    let opts = AttachOptions {
        populate: true,
        ..AttachOptions::default()
    };
    let att = pool
        .attach_with(name, Perm::Read, key, opts)
        .map_err(integrity)?;
    let len_f64 = reference.memory.len();
    let mismatch = with_f64s_ref(&att, len_f64, |found| reference.first_mismatch(found))
        .map_err(VerifyFailure::Other)?;
    att.detach().map_err(integrity)?;
    match mismatch {
        None => Ok(()),
        Some(i) => Err(VerifyFailure::Mismatch(format!(
            "element {i} of {len_f64} differs from the DRAM run (expected {:e})",
            reference.memory.get(i).copied().unwrap_or(f64::NAN)
        ))),
    }
}

fn attach_timed(pool: &Pool, name: &str, cfg: &RunConfig, r: &mut RunResult) -> Result<Attachment> {
    let t = Instant::now();
    let a = pool.attach_with(name, Perm::Write, &cfg.key, cfg.attach)?;
    r.attach_ns += t.elapsed().as_nanos() as u64;
    r.sessions += 1;
    Ok(a)
}

fn psync_timed(a: &Attachment, r: &mut RunResult) -> Result<()> {
    let t = Instant::now();
    let stats = a.psync()?;
    r.psync_ns += t.elapsed().as_nanos() as u64;
    r.psyncs += 1;
    r.pages_committed += stats.pages;
    r.bytes_persisted += stats.bytes_persisted;
    Ok(())
}

fn detach_timed(a: Attachment, r: &mut RunResult) -> Result<()> {
    let v = a.view_stats();
    r.faults += v.faults;
    r.fill_ns += v.fill_ns;
    let mut s = a.session_stats();
    let t = Instant::now();
    a.detach()?;
    let dt = t.elapsed().as_nanos() as u64;
    r.detach_ns += dt;
    s.detach_ns = dt;
    s.wall_ns += dt;
    r.session.accumulate(&s);
    Ok(())
}

fn unique_name(w: Workload) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "wl-{}-{}-{}",
        w.name(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
