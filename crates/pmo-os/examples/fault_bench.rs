//! Per-page costs of the view mechanisms, medians of repeats, all in one run:
//!
//! - read fault + fill (first touch is a read), per mechanism;
//! - write fault on a present clean page (the dirty-tracking cost), per mechanism;
//! - first touch that is a write (fill + dirty in one go), per mechanism;
//! - `collect_dirty` with k = 1, 16, 256, 4096 dirty pages, per mechanism;
//! - references: kernel first-touch fault of plain anonymous memory, and a bare 4 KiB memcpy.
//!
//! Run: `cargo run --release -p pmo-os --example fault_bench [-- --pages N --repeats R]`.
//! The fill callback copies the page from a prepared source buffer (what the `none` scheme does).

use std::sync::Arc;
use std::time::Instant;

use pmo_os::view::{DirtyTracking, FillError, Mechanism, PageSource, View, ViewOptions, PAGE_SIZE};

/// (configuration, read+fill µs, write(dirty) µs, collect share per page at k=256 µs)
type Row = (Config, f64, f64, f64);

/// A mechanism and, for userfaultfd, its dirty tracking.
#[derive(Clone, Copy)]
struct Config {
    mechanism: Mechanism,
    tracking: DirtyTracking,
}

impl Config {
    fn name(self) -> String {
        match self.mechanism {
            Mechanism::Userfaultfd => format!("uffd/{}", self.tracking),
            Mechanism::Sigsegv => "sigsegv".to_string(),
        }
    }
}

struct CopySource {
    data: Vec<u8>,
}

impl PageSource for CopySource {
    fn fill(&self, page_index: u64, dst: &mut [u8; PAGE_SIZE]) -> Result<(), FillError> {
        let off = page_index as usize * PAGE_SIZE;
        match self.data.get(off..off + PAGE_SIZE) {
            Some(src) => {
                dst.copy_from_slice(src);
                Ok(())
            }
            None => Err(FillError {
                reason: "page beyond the source",
            }),
        }
    }
    fn label(&self) -> &str {
        "bench"
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn new_view(m: Config, src: &Arc<CopySource>, pages: usize) -> View {
    let mut opts = ViewOptions::new(pages * PAGE_SIZE);
    opts.mechanism = Some(m.mechanism);
    View::with_tracking(opts, src.clone(), Some(m.tracking)).expect("View::new")
}

fn touch_read(v: &View, pages: usize) -> u64 {
    let mut sum = 0u64;
    for p in 0..pages {
        // SAFETY: inside the view, which serves the fault.
        sum = sum.wrapping_add(unsafe { v.addr().add(p * PAGE_SIZE + 8).read_volatile() } as u64);
    }
    sum
}

/// Write every page without reading it first (first touch is a write).
fn touch_write_only(v: &View, pages: usize) {
    for p in 0..pages {
        // SAFETY: inside the writable view, which serves the fault.
        unsafe { v.addr().add(p * PAGE_SIZE + 16).write_volatile(p as u8) };
    }
}

/// Invert one byte of every `step`-th page: a write that always changes the page (twin
/// tracking reports only pages that changed). The first touch is a read, then a write.
fn touch_write(v: &View, pages: usize, step: usize) {
    for p in (0..pages).step_by(step) {
        // SAFETY: inside the writable view, which serves the faults.
        unsafe {
            let b = v.addr().add(p * PAGE_SIZE + 16);
            b.write_volatile(!b.read_volatile());
        }
    }
}

/// µs per page of `f`, which handles `pages` pages, median over `repeats`.
fn per_page_us(repeats: usize, pages: usize, mut f: impl FnMut() -> f64) -> f64 {
    median((0..repeats).map(|_| f() * 1e6 / pages as f64).collect())
}

fn main() {
    let mut pages = 4096usize;
    let mut repeats = 9usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let value = args.next().and_then(|v| v.parse().ok());
        match (a.as_str(), value) {
            ("--pages", Some(n)) if n >= 4096 => pages = n,
            ("--repeats", Some(n)) if n >= 1 => repeats = n,
            _ => {
                eprintln!("usage: fault_bench [--pages N>=4096] [--repeats R>=1]");
                std::process::exit(1);
            }
        }
    }
    let src = Arc::new(CopySource {
        data: (0..pages * PAGE_SIZE)
            .map(|i| (i * 31 % 251) as u8)
            .collect(),
    });
    println!(
        "fault_bench: {pages} pages ({} MiB) per run, median of {repeats} runs, µs per page",
        (pages * PAGE_SIZE) >> 20
    );
    println!(
        "available: {:?}; best(): {}",
        Mechanism::available()
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>(),
        Mechanism::best()
    );

    // References.
    let memcpy_us = {
        let mut dst = vec![0u8; pages * PAGE_SIZE];
        per_page_us(repeats, pages, || {
            let t = Instant::now();
            for p in 0..pages {
                let r = p * PAGE_SIZE..(p + 1) * PAGE_SIZE;
                dst[r.clone()].copy_from_slice(&src.data[r]);
            }
            std::hint::black_box(&dst);
            t.elapsed().as_secs_f64()
        })
    };
    let memcpy_hot_us = {
        let mut dst = [0u8; PAGE_SIZE];
        let n = 100_000;
        per_page_us(repeats, n, || {
            let t = Instant::now();
            for i in 0..n {
                let off = (i % 16) * PAGE_SIZE;
                dst.copy_from_slice(std::hint::black_box(&src.data[off..off + PAGE_SIZE]));
                std::hint::black_box(&dst);
            }
            t.elapsed().as_secs_f64()
        })
    };
    let kernel_us = per_page_us(repeats, pages, || {
        let len = pages * PAGE_SIZE;
        // SAFETY: a fresh private anonymous mapping, 4 KiB pages only (no THP), unmapped below.
        let p = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED, "mmap");
            libc::madvise(p, len, libc::MADV_NOHUGEPAGE);
            p as *mut u8
        };
        let t = Instant::now();
        for i in 0..pages {
            // SAFETY: inside the mapping; first touch of fresh anonymous memory.
            unsafe { p.add(i * PAGE_SIZE).write_volatile(1) };
        }
        let dt = t.elapsed().as_secs_f64();
        // SAFETY: our mapping, no longer used.
        unsafe { libc::munmap(p as *mut libc::c_void, len) };
        dt
    });
    println!();
    println!("{:<44} {:>10}", "reference", "µs/page");
    println!(
        "{:<44} {:>10.3}",
        "memcpy 4 KiB, streaming (source 16+ MiB)", memcpy_us
    );
    println!(
        "{:<44} {:>10.3}",
        "memcpy 4 KiB, hot (cache-resident)", memcpy_hot_us
    );
    println!(
        "{:<44} {:>10.3}",
        "kernel first-touch fault, anonymous memory", kernel_us
    );
    // First touch of a sequential run through a userfaultfd view, without and with
    // fault-around (issue 16's target: at most 1.5x the kernel's own first-touch fault).
    if Mechanism::Userfaultfd.is_available() {
        let m = Config {
            mechanism: Mechanism::Userfaultfd,
            tracking: DirtyTracking::Fault,
        };
        for around in [1usize, 4, 16] {
            let us = per_page_us(repeats, pages, || {
                let v = new_view(m, &src, pages);
                v.set_fault_around(around);
                let t = Instant::now();
                std::hint::black_box(touch_read(&v, pages));
                t.elapsed().as_secs_f64()
            });
            println!(
                "{:<44} {:>10.3}  ({:.2}x the kernel's first-touch fault)",
                format!("uffd sequential read + fill, fault-around {around}"),
                us,
                us / kernel_us
            );
        }
    }
    // The floor of a transparent one-page psync (issue 16): one write to a clean resident page
    // (the kernel resolves the write-protect fault itself) and one `collect_dirty` (one
    // `PAGEMAP_SCAN` that reports and re-protects it), by view size. Nothing of the commit.
    if Mechanism::Userfaultfd.is_available() {
        let m = Config {
            mechanism: Mechanism::Userfaultfd,
            tracking: DirtyTracking::Scan,
        };
        println!();
        println!(
            "{:<44} {:>10} {:>10} {:>10}",
            "scan tracking, one written page per round", "write µs", "collect µs", "sum µs"
        );
        for view_pages in [1usize, 16, 256, 4096] {
            let v = new_view(m, &src, view_pages);
            v.populate_all().expect("populate_all");
            let mut out = Vec::with_capacity(view_pages);
            v.collect_dirty(&mut out).expect("collect");
            let rounds = 2000;
            let (mut w, mut c) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
            let mut x = 0x9e37_79b9u64;
            for _ in 0..rounds {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let p = (x >> 33) as usize % view_pages;
                let t = Instant::now();
                // SAFETY: inside the writable, populated view.
                unsafe {
                    let b = v.addr().add(p * PAGE_SIZE + 16);
                    b.write_volatile(b.read_volatile().wrapping_add(1));
                }
                let t1 = Instant::now();
                out.clear();
                v.collect_dirty(&mut out).expect("collect");
                let t2 = Instant::now();
                assert_eq!(out, [p as u64], "the written page, and it alone");
                w.push((t1 - t).as_secs_f64() * 1e6);
                c.push((t2 - t1).as_secs_f64() * 1e6);
            }
            let (w, c) = (median(w), median(c));
            println!(
                "{:<44} {:>10.3} {:>10.3} {:>10.3}",
                format!("  view of {view_pages} pages"),
                w,
                c,
                w + c
            );
        }
    }
    let signal_us = signal_round_trip_us(repeats);
    println!(
        "{:<44} {:>10.3}",
        "signal delivery + return (raise, SA_ONSTACK)", signal_us
    );

    println!();
    println!(
        "{:<14} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "mechanism",
        "read+fill",
        "write(dirty)",
        "write-first",
        "collect k=1",
        "k=16",
        "k=256",
        "k=4096"
    );
    let mut rows = Vec::new();
    let mut sparse_rows = Vec::new();
    let mut populate_rows = Vec::new();
    let mut configs = Vec::new();
    for mechanism in Mechanism::available() {
        if mechanism == Mechanism::Userfaultfd {
            configs.push(Config {
                mechanism,
                tracking: DirtyTracking::Scan,
            });
        }
        configs.push(Config {
            mechanism,
            tracking: DirtyTracking::Fault,
        });
        if mechanism == Mechanism::Userfaultfd {
            configs.push(Config {
                mechanism,
                tracking: DirtyTracking::Twin,
            });
        }
    }
    for m in configs {
        let read_fill = per_page_us(repeats, pages, || {
            let v = new_view(m, &src, pages);
            let t = Instant::now();
            std::hint::black_box(touch_read(&v, pages));
            t.elapsed().as_secs_f64()
        });
        let write_dirty = per_page_us(repeats, pages, || {
            let v = new_view(m, &src, pages);
            v.populate_all().expect("populate_all");
            let t = Instant::now();
            touch_write(&v, pages, 1);
            t.elapsed().as_secs_f64()
        });
        let populate = per_page_us(repeats, pages, || {
            let v = new_view(m, &src, pages);
            let t = Instant::now();
            v.populate_all().expect("populate_all");
            t.elapsed().as_secs_f64()
        });
        // install(): one UFFDIO_COPY (or copy + mprotect) per page from normal context.
        let page = [7u8; PAGE_SIZE];
        let install = per_page_us(repeats, pages, || {
            let v = new_view(m, &src, pages);
            let t = Instant::now();
            for p in 0..pages as u64 {
                v.install(p, &page).expect("install");
            }
            t.elapsed().as_secs_f64()
        });
        // Two threads faulting on disjoint halves at once: wall time per page.
        let parallel = per_page_us(repeats, pages, || {
            let v = new_view(m, &src, pages);
            let half = pages / 2;
            let t = Instant::now();
            std::thread::scope(|s| {
                for k in 0..2 {
                    let v = &v;
                    s.spawn(move || {
                        for p in k * half..(k + 1) * half {
                            // SAFETY: inside the view, which serves the fault.
                            std::hint::black_box(unsafe {
                                v.addr().add(p * PAGE_SIZE).read_volatile()
                            });
                        }
                    });
                }
            });
            t.elapsed().as_secs_f64()
        });
        populate_rows.push((m, populate, install, parallel));
        let write_first = per_page_us(repeats, pages, || {
            let v = new_view(m, &src, pages);
            let t = Instant::now();
            touch_write_only(&v, pages);
            t.elapsed().as_secs_f64()
        });
        // collect_dirty: µs per call (not per page) with k dirty pages spread over the view.
        let v = new_view(m, &src, pages);
        v.populate_all().expect("populate_all");
        let mut out = Vec::with_capacity(pages);
        v.collect_dirty(&mut out).expect("collect");
        let collect: Vec<f64> = [1usize, 16, 256, 4096]
            .iter()
            .map(|&k| {
                median(
                    (0..repeats)
                        .map(|_| {
                            touch_write(&v, pages, pages / k);
                            out.clear();
                            let t = Instant::now();
                            v.collect_dirty(&mut out).expect("collect");
                            let dt = t.elapsed().as_secs_f64() * 1e6;
                            assert_eq!(
                                out.len(),
                                k,
                                "collect_dirty reported {} of {k} pages",
                                out.len()
                            );
                            dt
                        })
                        .collect(),
                )
            })
            .collect();
        // The same on a view where only the dirty pages were ever touched.
        let sparse: Vec<f64> = [1usize, 16, 256, 4096]
            .iter()
            .map(|&k| {
                median(
                    (0..repeats)
                        .map(|_| {
                            let v = new_view(m, &src, pages);
                            touch_write(&v, pages, pages / k);
                            out.clear();
                            let t = Instant::now();
                            v.collect_dirty(&mut out).expect("collect");
                            let dt = t.elapsed().as_secs_f64() * 1e6;
                            assert_eq!(
                                out.len(),
                                k,
                                "collect_dirty reported {} of {k} pages",
                                out.len()
                            );
                            dt
                        })
                        .collect(),
                )
            })
            .collect();
        sparse_rows.push((m, sparse));
        println!(
            "{:<14} {:>12.3} {:>12.3} {:>12.3} {:>12.2} {:>12.2} {:>12.2} {:>12.2}",
            &m.name(),
            read_fill,
            write_dirty,
            write_first,
            collect[0],
            collect[1],
            collect[2],
            collect[3]
        );
        rows.push((m, read_fill, write_dirty, collect[2] / 256.0));
    }
    println!("(read+fill, write(dirty), write-first: µs per page; collect: µs per call, every page of the view resident)");
    println!();
    println!(
        "{:<14} {:>12} {:>12} {:>12} {:>12}   (only the k dirty pages ever touched)",
        "collect", "k=1", "k=16", "k=256", "k=4096"
    );
    for (m, c) in &sparse_rows {
        println!(
            "{:<14} {:>12.2} {:>12.2} {:>12.2} {:>12.2}",
            &m.name(),
            c[0],
            c[1],
            c[2],
            c[3]
        );
    }
    println!();
    for (m, populate, install, parallel) in &populate_rows {
        println!(
            "{:<14} populate_all: {populate:.3} µs per page; install one page: {install:.3} µs; \
             read+fill on 2 threads: {parallel:.3} µs per page (wall)",
            m.name()
        );
    }
    println!();
    for (m, read_fill, write_dirty, collect_per_page) in &rows {
        println!(
            "{:<14} fault service over memcpy: {:.2}x; dirty page (write fault + collect share at k=256): {:.3} µs",
            &m.name(),
            read_fill / memcpy_us,
            write_dirty + collect_per_page
        );
    }
    let best = |key: &dyn Fn(&Row) -> f64| {
        rows.iter()
            .min_by(|a, b| key(a).total_cmp(&key(b)))
            .map(|r| r.0.name())
            .unwrap_or_default()
    };
    println!(
        "fastest read+fill: {}; fastest dirty page at k=256: {}",
        best(&|r| r.1),
        best(&|r| r.2 + r.3)
    );
}

extern "C" fn on_usr2(_: libc::c_int) {}

/// µs per `raise(SIGUSR2)` with an empty `SA_ONSTACK` handler: the signal part of a fault.
fn signal_round_trip_us(repeats: usize) -> f64 {
    // SAFETY: installs an empty handler for SIGUSR2, which nothing else in this program uses.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_usr2 as extern "C" fn(libc::c_int) as usize;
        act.sa_flags = libc::SA_ONSTACK;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(libc::SIGUSR2, &act, std::ptr::null_mut());
    }
    let n = 20_000;
    per_page_us(repeats, n, || {
        let t = Instant::now();
        for _ in 0..n {
            // SAFETY: raising a signal with a handler installed above.
            unsafe { libc::raise(libc::SIGUSR2) };
        }
        t.elapsed().as_secs_f64()
    })
}
