//! The `PMO_*` environment knobs, checked once at start: a set but invalid value is a usage
//! error before anything is opened, whichever command would (or would not) have read it.

use anyhow::{anyhow, bail};

/// Check every knob that is set; the first bad one is the error.
pub fn check() -> anyhow::Result<()> {
    let set = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    if let Some(v) = set("PMO_FAULT") {
        if pmo_store::Mechanism::from_name(&v).is_none() {
            bail!("PMO_FAULT={v:?} is not a fault mechanism (userfaultfd or sigsegv)");
        }
    }
    if let Some(v) = set("PMO_DIRTY") {
        if pmo_store::DirtyTracking::from_name(&v).is_none() {
            bail!("PMO_DIRTY={v:?} is not a dirty tracking (fault, twin, scan or declared)");
        }
    }
    if let Some(v) = set("PMO_MEDIUM") {
        if pmo_medium::MediumKind::parse(&v).is_none() {
            bail!("PMO_MEDIUM={v:?} is not a medium (file, dax or pmem-emul)");
        }
    }
    if let Some(v) = set("PMO_NUMA_NODE") {
        if v.trim().parse::<u32>().is_err() {
            bail!("PMO_NUMA_NODE={v:?} is not a node number");
        }
    }
    // Page counts: the store reads them where they apply (an attach, a detach, a twin
    // view), and a library user's bad value falls back or fails there; the command refuses it
    // up front like every other knob.
    for (k, min, what) in [
        (
            "PMO_FAULT_AROUND",
            1,
            "a fault-around window in pages (1: off)",
        ),
        (
            "PMO_DETACH_INLINE_PAGES",
            0,
            "a page count (0: every detach to the worker)",
        ),
        (
            "PMO_HOT_PAGES",
            0,
            "a page count (twin pages kept per view)",
        ),
    ] {
        if let Some(v) = set(k) {
            if v.trim().parse::<u64>().map_or(true, |n| n < min) {
                bail!("{k}={v:?} is not {what}");
            }
        }
    }
    if let Some(v) = set("PMO_LOG") {
        if !matches!(v.trim(), "0" | "1") {
            bail!("PMO_LOG={v:?} is not 0 or 1 (1: every new PMO gets a sub-page commit log, 0: not even heaps)");
        }
    }
    // `pmo bench lmdb|ycsb` reads YCSB's files from here; one it cannot use would silently run
    // the built-in workloads (or another directory's files) instead.
    if let Some(v) = set("PMO_YCSB_DIR") {
        if !std::path::Path::new(&v).join("workloada").is_file() {
            bail!(
                "PMO_YCSB_DIR={v:?} is not a directory of YCSB workload files (no workloada there)"
            );
        }
    }
    pmo_store::PredictConfig::from_env()?;
    pmo_store::Scheme::from_env().map_err(|e| anyhow!("PMO_SCHEME: {e}"))?;
    pmo_medium::LatencyProfile::from_env().map_err(|e| anyhow!("PMO_LATENCY: {e}"))?;
    Ok(())
}
