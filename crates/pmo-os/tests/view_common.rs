//! Helpers shared by the view integration tests: a deterministic page source and raw accessors.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pmo_os::view::{
    DirtyTracking, FillError, Mechanism, PageSource, View, ViewError, ViewOptions, PAGE_SIZE,
};

/// Word `i` of page `p` as the pattern source fills it.
pub fn word(p: u64, i: usize) -> u64 {
    p.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64).wrapping_mul(0x0100_0000_01B3) ^ 0x5555
}

/// Fills page `p` with `word(p, i)`; fails on `fails_at`; counts fills.
pub struct Pattern {
    pub label: String,
    pub fails_at: Option<u64>,
    pub fills: AtomicU64,
}

impl Pattern {
    pub fn new(label: &str) -> Arc<Pattern> {
        Arc::new(Pattern {
            label: label.to_string(),
            fails_at: None,
            fills: AtomicU64::new(0),
        })
    }
    pub fn failing(label: &str, page: u64) -> Arc<Pattern> {
        Arc::new(Pattern {
            label: label.to_string(),
            fails_at: Some(page),
            fills: AtomicU64::new(0),
        })
    }
}

impl PageSource for Pattern {
    fn fill(&self, page_index: u64, dst: &mut [u8; PAGE_SIZE]) -> Result<(), FillError> {
        if self.fails_at == Some(page_index) {
            return Err(FillError {
                reason: "tag mismatch (test)",
            });
        }
        for (i, chunk) in dst.chunks_exact_mut(8).enumerate() {
            chunk.copy_from_slice(&word(page_index, i).to_le_bytes());
        }
        self.fills.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn label(&self) -> &str {
        &self.label
    }
}

/// One way of serving a view: a mechanism, and for userfaultfd how writes are tracked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub mechanism: Mechanism,
    pub tracking: DirtyTracking,
}

impl std::fmt::Display for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.mechanism, self.tracking)
    }
}

impl Config {
    pub fn options(self, pages: usize, writable: bool) -> ViewOptions {
        let mut opts = ViewOptions::new(pages * PAGE_SIZE);
        opts.writable = writable;
        opts.mechanism = Some(self.mechanism);
        opts
    }

    pub fn create(self, opts: ViewOptions, src: Arc<dyn PageSource>) -> Result<View, ViewError> {
        View::with_tracking(opts, src, Some(self.tracking))
    }
}

pub fn view(c: Config, pages: usize, writable: bool, src: Arc<Pattern>) -> View {
    c.create(c.options(pages, writable), src)
        .unwrap_or_else(|e| panic!("{c}: View::new: {e}"))
}

pub fn read(v: &View, page: u64, i: usize) -> u64 {
    assert!(page < v.pages() && i < PAGE_SIZE / 8);
    // SAFETY: inside the view, aligned; the view serves the fault.
    unsafe {
        (v.addr().add(page as usize * PAGE_SIZE) as *const u64)
            .add(i)
            .read_volatile()
    }
}

pub fn write(v: &View, page: u64, i: usize, value: u64) {
    assert!(page < v.pages() && i < PAGE_SIZE / 8);
    // SAFETY: inside the writable view, aligned; the view serves the fault.
    unsafe {
        (v.addr().add(page as usize * PAGE_SIZE) as *mut u64)
            .add(i)
            .write_volatile(value)
    }
}

pub fn dirty(v: &View) -> Vec<u64> {
    let mut out = Vec::new();
    v.collect_dirty(&mut out).expect("collect_dirty");
    out
}

/// Every mechanism (and userfaultfd tracking) that works here; sigsegv always does.
pub fn mechanisms() -> Vec<Config> {
    let available = Mechanism::available();
    assert!(
        available.contains(&Mechanism::Sigsegv),
        "sigsegv must work everywhere"
    );
    let mut configs = Vec::new();
    for m in available {
        let trackings: &[DirtyTracking] = match m {
            Mechanism::Userfaultfd => &[
                DirtyTracking::Scan,
                DirtyTracking::Fault,
                DirtyTracking::Twin,
            ],
            Mechanism::Sigsegv => &[DirtyTracking::Fault],
        };
        for &tracking in trackings {
            if m == Mechanism::Userfaultfd && !tracking.is_available() {
                continue;
            }
            configs.push(Config {
                mechanism: m,
                tracking,
            });
        }
    }
    configs
}

#[test]
fn pattern_is_deterministic_and_fails_where_told() {
    let p = Pattern::new("x");
    let mut a = [0u8; PAGE_SIZE];
    let mut b = [0u8; PAGE_SIZE];
    p.fill(3, &mut a).unwrap();
    p.fill(3, &mut b).unwrap();
    assert_eq!(a, b);
    p.fill(4, &mut b).unwrap();
    assert_ne!(a, b);
    assert_eq!(u64::from_le_bytes(a[8..16].try_into().unwrap()), word(3, 1));
    assert!(Pattern::failing("y", 2).fill(2, &mut a).is_err());
}
