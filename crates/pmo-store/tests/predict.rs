//! Predictive decryption: contents are exact with prediction on (sequential, backward, strided,
//! random access; schemes `secure` and `none`; every fault mechanism; many threads at once);
//! detach while predictions are in flight (200 times, no crash, no leaked thread or view); a
//! page the application writes first is never overwritten by a stale predicted install; a
//! predicted (clean) page that is written later is committed by psync.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmo_os::view::{FillError, Mechanism, PageSource, View, ViewOptions, PAGE_SIZE};
use pmo_store::predict::{PredictConfig, PredictHook, Predictor};
use pmo_store::{AttachOptions, KdfParams, Perm, Pool, PoolOptions, Scheme};

const KEY: &[u8] = b"predict-key";
const PAGES: u64 = 512;
const NAME: &str = "p";

/// The tests of this binary run one at a time: the leak check counts the process's views and
/// threads, and the timing-sensitive races want the CPUs.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct TmpPool {
    pool: Pool,
    path: PathBuf,
}
impl Drop for TmpPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Byte `i` of page `p` as written by `make_pool`.
fn pattern(p: u64, i: usize) -> u8 {
    (p as u8) ^ (i as u8).wrapping_mul(29) ^ ((p >> 8) as u8).wrapping_mul(3)
}

/// A pool with one PMO of `PAGES` pages, every byte written with `pattern` and psynced.
fn make_pool(tag: &str, scheme: &str) -> TmpPool {
    let path = std::env::temp_dir().join(format!(
        "pmo-predict-{tag}-{scheme}-{}.pool",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        scheme: Scheme::from_name(scheme).unwrap(),
        ..Default::default()
    };
    let pool = Pool::create(&path, 16 << 20, &opts).unwrap();
    pool.pcreate(NAME, PAGES * PAGE_SIZE as u64, KEY).unwrap();
    let a = pool.attach(NAME, Perm::Write, KEY).unwrap();
    let mut buf = vec![0u8; PAGE_SIZE];
    for p in 0..PAGES {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = pattern(p, i);
        }
        a.write_at(p as usize * PAGE_SIZE, &buf).unwrap();
    }
    a.psync().unwrap();
    a.detach().unwrap();
    TmpPool { pool, path }
}

fn opts(cfg: PredictConfig, mech: Mechanism) -> AttachOptions {
    AttachOptions {
        predict: Some(cfg),
        mechanism: Some(mech),
        ..Default::default()
    }
}

fn check_page(a: &pmo_store::Attachment, p: u64) {
    let mut buf = vec![0u8; PAGE_SIZE];
    a.read_at(p as usize * PAGE_SIZE, &mut buf).unwrap();
    for (i, &b) in buf.iter().enumerate() {
        assert_eq!(b, pattern(p, i), "page {p} byte {i}");
    }
}

/// Wait until the predictor installed at least `n` pages (the shared machine may run the
/// worker late); false after 10 s.
fn wait_installed(a: &pmo_store::Attachment, n: u64) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if a.predict_stats().is_some_and(|s| s.installed >= n) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

fn orders() -> Vec<(&'static str, Vec<u64>)> {
    let mut random: Vec<u64> = (0..PAGES).collect();
    let mut x = 0x1234_5678_9abc_def1u64;
    for i in (1..random.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        random.swap(i, (x % (i as u64 + 1)) as usize);
    }
    vec![
        ("sequential", (0..PAGES).collect()),
        ("backward", (0..PAGES).rev().collect()),
        (
            "strided",
            (0..4).flat_map(|s| (s..PAGES).step_by(4)).collect(),
        ),
        ("random", random),
    ]
}

#[test]
fn contents_are_exact_with_prediction_on() {
    let _serial = serial();
    for scheme in ["secure", "none"] {
        let tp = make_pool("exact", scheme);
        for mech in Mechanism::available() {
            for cfg in [
                PredictConfig::fixed(1),
                PredictConfig::fixed(8),
                PredictConfig::adaptive(),
            ] {
                for (name, order) in orders() {
                    let a = tp
                        .pool
                        .attach_with(NAME, Perm::Read, KEY, opts(cfg, mech))
                        .unwrap();
                    for (i, &p) in order.iter().enumerate() {
                        check_page(&a, p);
                        if i == 3 && name != "random" {
                            // Give the worker a chance on this busy machine, so that
                            // predicted pages are really read below.
                            assert!(
                                wait_installed(&a, 1),
                                "{scheme} {mech} {name}: nothing predicted"
                            );
                        }
                    }
                    let s = a.predict_stats().unwrap();
                    let v = a.view_stats();
                    assert_eq!(
                        s.faults_seen, v.fills,
                        "{scheme} {mech} {name}: one notify per fill"
                    );
                    if name != "random" {
                        assert!(
                            s.installed > 0,
                            "{scheme} {mech} {name} {}: {s:?}",
                            cfg.label()
                        );
                        assert!(v.faults < PAGES, "{scheme} {mech} {name}: no fault avoided");
                    }
                    assert_eq!(s.fill_errors + s.install_errors, 0, "{s:?}");
                    a.detach().unwrap();
                }
            }
        }
    }
}

#[test]
fn many_threads_with_their_own_streams_read_exact_contents() {
    let _serial = serial();
    let tp = make_pool("threads", "secure");
    for mech in Mechanism::available() {
        for round in 0..3 {
            let a = Arc::new(
                tp.pool
                    .attach_with(NAME, Perm::Read, KEY, opts(PredictConfig::fixed(8), mech))
                    .unwrap(),
            );
            let threads = 4u64;
            let per = PAGES / threads;
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let a = a.clone();
                    std::thread::spawn(move || {
                        let range = t * per..(t + 1) * per;
                        // Even threads forward, odd threads backward; the last round all over
                        // the same pages at once.
                        let pages: Vec<u64> = match (round, t % 2) {
                            (2, _) => (0..per).collect(),
                            (_, 0) => range.collect(),
                            _ => range.rev().collect(),
                        };
                        for p in pages {
                            check_page(&a, p);
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            let s = a.predict_stats().unwrap();
            assert_eq!(s.fill_errors + s.install_errors, 0, "{s:?}");
            match Arc::try_unwrap(a) {
                Ok(a) => a.detach().unwrap(),
                Err(_) => panic!("attachment still shared"),
            }
        }
    }
}

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn detach_while_predictions_are_in_flight() {
    let _serial = serial();
    let tp = make_pool("detach", "secure");
    let views_before = pmo_os::view::live_views();
    let threads_before = thread_count();
    let mechs = Mechanism::available();
    let mut installed = 0;
    for i in 0..200u64 {
        let mech = mechs[i as usize % mechs.len()];
        let cfg = if i % 2 == 0 {
            PredictConfig::fixed(64)
        } else {
            PredictConfig::adaptive()
        };
        let a = tp
            .pool
            .attach_with(NAME, Perm::Read, KEY, opts(cfg, mech))
            .unwrap();
        // Start a stream somewhere, then detach at once, with the window in flight.
        let start = (i * 37) % (PAGES - 8);
        for p in start..start + 3 + i % 4 {
            check_page(&a, p);
        }
        installed += a.predict_stats().unwrap().installed;
        a.detach().unwrap();
    }
    assert_eq!(pmo_os::view::live_views(), views_before, "a view leaked");
    // Joined threads may linger a moment in /proc; 200 leaked workers would show.
    let threads_after = thread_count();
    assert!(
        threads_after < threads_before + 10,
        "threads {threads_before} -> {threads_after}: prediction workers leaked"
    );
    eprintln!("detach in flight: {installed} pages installed before the 200 detaches");
}

#[test]
fn predicted_pages_written_later_are_committed() {
    let _serial = serial();
    let tp = make_pool("commit", "secure");
    for mech in Mechanism::available() {
        let a = tp
            .pool
            .attach_with(NAME, Perm::Write, KEY, opts(PredictConfig::fixed(16), mech))
            .unwrap();
        for p in 0..3 {
            check_page(&a, p);
        }
        assert!(wait_installed(&a, 16), "{mech}: window not installed");
        // Pages 3..19 were installed clean by the predictor: now write them.
        for p in 3..19u64 {
            a.write_at(p as usize * PAGE_SIZE + 100, &[0xEE, p as u8])
                .unwrap();
        }
        let c = a.psync().unwrap();
        assert_eq!(
            c.pages, 16,
            "{mech}: every written predicted page is committed"
        );
        a.detach().unwrap();
        let b = tp.pool.attach(NAME, Perm::Write, KEY).unwrap();
        for p in 3..19u64 {
            let mut two = [0u8; 2];
            b.read_at(p as usize * PAGE_SIZE + 100, &mut two).unwrap();
            assert_eq!(two, [0xEE, p as u8], "{mech}: page {p} after re-attach");
            // Restore the pattern for the next mechanism.
            b.write_at(
                p as usize * PAGE_SIZE + 100,
                &[pattern(p, 100), pattern(p, 101)],
            )
            .unwrap();
        }
        b.psync().unwrap();
        b.detach().unwrap();
    }
}

/// Writes racing with predicted installs through the store: the application writes the pages of
/// a window while the worker installs them; every write must survive (read back at once and
/// after psync + re-attach).
#[test]
fn writes_racing_with_predicted_installs_survive() {
    let _serial = serial();
    let tp = make_pool("race", "secure");
    let mut lost_races = 0;
    for (i, mech) in Mechanism::available()
        .into_iter()
        .cycle()
        .take(40)
        .enumerate()
    {
        let a = tp
            .pool
            .attach_with(NAME, Perm::Write, KEY, opts(PredictConfig::fixed(64), mech))
            .unwrap();
        let start = (i as u64 * 53) % (PAGES - 80);
        for p in start..start + 3 {
            check_page(&a, p);
        }
        // The window start+3 .. start+67 is being installed now: write into it at once.
        let tag = i as u8 | 0x80;
        for p in start + 3..start + 67 {
            a.write_at(p as usize * PAGE_SIZE + 7, &[tag]).unwrap();
        }
        for p in start + 3..start + 67 {
            let mut b = [0u8];
            a.read_at(p as usize * PAGE_SIZE + 7, &mut b).unwrap();
            assert_eq!(
                b[0], tag,
                "{mech} round {i}: page {p} lost the application's write"
            );
        }
        let c = a.psync().unwrap();
        // Twin tracking may skip pages whose write stored the byte already there (a tag may
        // equal the pattern's byte): a hot page is compared, a write-protected one faults.
        if a.dirty_tracking() == pmo_store::DirtyTracking::Twin {
            let changed = (start + 3..start + 67)
                .filter(|&p| pattern(p, 7) != tag)
                .count() as u64;
            assert!((changed..=64).contains(&c.pages), "{}", c.pages);
        } else {
            assert_eq!(c.pages, 64);
        }
        lost_races += a.predict_stats().unwrap().lost_race;
        a.detach().unwrap();
        let b = tp.pool.attach(NAME, Perm::Write, KEY).unwrap();
        for p in start + 3..start + 67 {
            let mut x = [0u8];
            b.read_at(p as usize * PAGE_SIZE + 7, &mut x).unwrap();
            assert_eq!(x[0], tag, "{mech} round {i}: page {p} after re-attach");
            b.write_at(p as usize * PAGE_SIZE + 7, &[pattern(p, 7)])
                .unwrap();
        }
        b.psync().unwrap();
        b.detach().unwrap();
    }
    eprintln!("writes racing with installs: {lost_races} installs lost the race (not installed)");
}

/// Serves every page as `fill_byte`, optionally held until the test releases it; counts fills
/// begun; notifies a hook if set.
struct TestSource {
    fill_byte: u8,
    /// While set, a fill that has begun waits (the worker's source only: normal context).
    hold: AtomicBool,
    hook: Option<Arc<PredictHook>>,
    /// Fills begun.
    started: AtomicU64,
}

impl PageSource for TestSource {
    fn fill(&self, page: u64, dst: &mut [u8; PAGE_SIZE]) -> Result<(), FillError> {
        if let Some(h) = &self.hook {
            h.notify(page);
        }
        self.started.fetch_add(1, Ordering::SeqCst);
        // Only the worker's source is ever held (normal context, never the fault path).
        while self.hold.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        dst.fill(self.fill_byte);
        Ok(())
    }
    fn label(&self) -> &str {
        "predict-test"
    }
}

/// The race made certain: the worker's source returns stale bytes, and its first fill (a page of
/// the window 3..35, walked from the far end) is held until the application has written pages
/// 3..35. Every write survives, and the stale install reports that it lost (`View::install`
/// installs only absent pages).
#[test]
fn stale_install_never_overwrites_a_written_page() {
    let _serial = serial();
    for mech in Mechanism::available() {
        let pages = 64u64;
        let hook = PredictHook::new(PredictConfig::fixed(32), pages)
            .unwrap()
            .unwrap();
        let fault_source = Arc::new(TestSource {
            fill_byte: 0x11,
            hold: AtomicBool::new(false),
            hook: Some(hook.clone()),
            started: AtomicU64::new(0),
        });
        let worker_source = Arc::new(TestSource {
            fill_byte: 0x5A, // stale
            hold: AtomicBool::new(true),
            hook: None,
            started: AtomicU64::new(0),
        });
        let vopts = ViewOptions {
            mechanism: Some(mech),
            ..ViewOptions::new(pages as usize * PAGE_SIZE)
        };
        let view = Arc::new(View::new(vopts, fault_source.clone()).unwrap());
        let predictor =
            Predictor::start(hook.clone(), view.clone(), worker_source.clone()).unwrap();
        let base = view.addr();
        let read = |p: u64| -> u8 {
            // SAFETY: inside the live view; reading faults the page in.
            unsafe { std::ptr::read_volatile(base.add(p as usize * PAGE_SIZE)) }
        };
        let write = |p: u64, v: u8| {
            // SAFETY: inside the live, writable view.
            unsafe { std::ptr::write_volatile(base.add(p as usize * PAGE_SIZE), v) }
        };
        for p in 0..3 {
            assert_eq!(read(p), 0x11);
        }
        // Wait until the worker is inside its first fill (held), then write 3..35.
        let t0 = Instant::now();
        while worker_source.started.load(Ordering::SeqCst) < 1
            && t0.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            worker_source.started.load(Ordering::SeqCst) >= 1,
            "{mech}: the worker never began a fill"
        );
        for p in 3..35 {
            write(p, 0xC0 | p as u8);
        }
        // Let the worker finish that fill and try to install it. `finish` stops the workers
        // after the page in hand and waits for them to let go, so its counts include that
        // install.
        worker_source.hold.store(false, Ordering::SeqCst);
        let s = predictor.finish();
        for p in 3..35 {
            assert_eq!(read(p), 0xC0 | p as u8, "{mech}: page {p} was overwritten");
        }
        assert!(s.lost_race >= 1, "{mech}: the worker never raced ({s:?})");
        // Pages past the written ones may have been installed since; they hold the stale
        // source's bytes, which is what the worker produced.
        for p in 35..pages {
            let v = read(p);
            assert!(v == 0x5A || v == 0x11, "{mech}: page {p} holds {v:#x}");
        }
        drop(view);
    }
}

/// Predictor workers install into a bare view: pages ahead of a forward stream arrive without a
/// fault, and pages installed are exactly what the worker's source produced.
#[test]
fn workers_install_ahead_of_a_stream_on_a_bare_view() {
    let _serial = serial();
    for mech in Mechanism::available() {
        let pages = 256u64;
        let hook = PredictHook::new(PredictConfig::fixed(16), pages)
            .unwrap()
            .unwrap();
        let fault_source = Arc::new(TestSource {
            fill_byte: 0x22,
            hold: AtomicBool::new(false),
            hook: Some(hook.clone()),
            started: AtomicU64::new(0),
        });
        let worker_source = Arc::new(TestSource {
            fill_byte: 0x33,
            hold: AtomicBool::new(false),
            hook: None,
            started: AtomicU64::new(0),
        });
        let vopts = ViewOptions {
            mechanism: Some(mech),
            writable: false,
            ..ViewOptions::new(pages as usize * PAGE_SIZE)
        };
        let view = Arc::new(View::new(vopts, fault_source.clone()).unwrap());
        let predictor =
            Predictor::start(hook.clone(), view.clone(), worker_source.clone()).unwrap();
        let base = view.addr();
        let read = |p: u64| -> u8 {
            // SAFETY: inside the live view.
            unsafe { std::ptr::read_volatile(base.add(p as usize * PAGE_SIZE + 9)) }
        };
        for p in 0..3 {
            assert_eq!(read(p), 0x22);
        }
        let t0 = Instant::now();
        while !(3..19).all(|p| view.is_present(p)) && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let faults_before = view.stats().faults;
        for p in 3..19 {
            assert_eq!(read(p), 0x33, "{mech}: page {p} came from the worker");
        }
        assert_eq!(
            view.stats().faults,
            faults_before,
            "{mech}: predicted pages did not fault"
        );
        let s = predictor.finish();
        assert_eq!(s.installed, 16, "{s:?}");
        assert_eq!(
            s.unused, 16,
            "the open window counts as unused once finished: {s:?}"
        );
        assert_eq!(hook.stats(), s, "nothing changes after finish");
        let _ = read(40); // a fault after finish is not seen by the predictor
        assert_eq!(hook.stats(), s);
        drop(view);
    }
}

/// Prediction is off unless asked for, and never runs where every page is present at attach
/// (whole-PMO schemes, `populate`).
#[test]
fn prediction_only_where_it_can_help() {
    let _serial = serial();
    let tp = make_pool("where", "secure");
    if std::env::var_os("PMO_PREDICT").is_none() {
        let a = tp.pool.attach(NAME, Perm::Read, KEY).unwrap();
        assert!(a.predict_stats().is_none(), "off by default");
        a.detach().unwrap();
    }
    let populate = AttachOptions {
        populate: true,
        ..opts(PredictConfig::fixed(8), Mechanism::best())
    };
    let a = tp
        .pool
        .attach_with(NAME, Perm::Read, KEY, populate)
        .unwrap();
    assert!(a.predict_stats().is_none(), "populate: nothing to predict");
    a.detach().unwrap();
    let whole = make_pool("where-wedi", "wedi");
    let a = whole
        .pool
        .attach_with(
            NAME,
            Perm::Read,
            KEY,
            opts(PredictConfig::fixed(8), Mechanism::best()),
        )
        .unwrap();
    assert!(a.predict_stats().is_none(), "wedi: nothing to predict");
    check_page(&a, 5);
    a.detach().unwrap();
    let bad = AttachOptions {
        predict: Some(PredictConfig {
            queue_requests: 3,
            ..PredictConfig::fixed(8)
        }),
        ..Default::default()
    };
    assert!(tp.pool.attach_with(NAME, Perm::Read, KEY, bad).is_err());
    // The failed attach released the PMO.
    let a = tp.pool.attach(NAME, Perm::Write, KEY).unwrap();
    a.detach().unwrap();
}

/// A PMO of at most `min_windows` fault-around windows attaches without a predictor (issue 16,
/// fourth pass: fault-around fills it in a few faults, a predictor only adds its costs); one
/// page more gets one, and `min_windows: 0` predicts whatever the size. Contents stay exact.
#[test]
fn small_pmos_attach_without_a_predictor() {
    let _serial = serial();
    let tp = make_pool("small", "secure");
    let mech = Mechanism::best();
    let asked = std::env::var("PMO_FAULT_AROUND")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(pmo_store::attach::DEFAULT_FAULT_AROUND);
    let window = mech.fault_around_window(asked) as u64;
    let cfg = PredictConfig::fixed(8);
    let small = u64::from(cfg.min_windows) * window;
    assert!((2..PAGES).contains(&small), "threshold {small} pages");
    for (name, pages, min_windows, predicts) in [
        ("at-threshold", small, cfg.min_windows, false),
        ("above", small + 1, cfg.min_windows, true),
        ("forced", small, 0, true),
    ] {
        tp.pool
            .pcreate(name, pages * PAGE_SIZE as u64, KEY)
            .unwrap();
        let w = tp.pool.attach(name, Perm::Write, KEY).unwrap();
        for p in 0..pages {
            w.write_at(p as usize * PAGE_SIZE, &[p as u8 ^ 0x5a])
                .unwrap();
        }
        w.psync().unwrap();
        w.detach().unwrap();
        let a = tp
            .pool
            .attach_with(
                name,
                Perm::Read,
                KEY,
                opts(PredictConfig { min_windows, ..cfg }, mech),
            )
            .unwrap();
        assert_eq!(
            a.predict_stats().is_some(),
            predicts,
            "{name}: {pages} pages"
        );
        for p in 0..pages {
            let mut b = [0u8; 1];
            a.read_at(p as usize * PAGE_SIZE, &mut b).unwrap();
            assert_eq!(b[0], p as u8 ^ 0x5a, "{name}: page {p}");
        }
        if predicts {
            assert!(a.predict_stats().unwrap().faults_seen > 0, "{name}");
        }
        a.detach().unwrap();
    }
    // An invalid configuration is an error even where it would not engage.
    let bad = AttachOptions {
        predict: Some(PredictConfig {
            queue_requests: 3,
            ..cfg
        }),
        ..Default::default()
    };
    assert!(tp
        .pool
        .attach_with("at-threshold", Perm::Read, KEY, bad)
        .is_err());
}

fn predict_workers() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
                .filter(|c| c.trim_end().starts_with("pmo-predict-"))
                .count()
        })
        .unwrap_or(0)
}

/// The workers are one process-wide pool: two views predicted at once are both served, the
/// pool keeps no reference to a view once its predictor finished, and attaching again spawns
/// no new worker.
#[test]
fn one_pool_of_workers_serves_every_view() {
    let _serial = serial();
    let pages = 128u64;
    let make = |fill_byte: u8| {
        let hook = PredictHook::new(PredictConfig::fixed(8), pages)
            .unwrap()
            .unwrap();
        let fault_source = Arc::new(TestSource {
            fill_byte,
            hold: AtomicBool::new(false),
            hook: Some(hook.clone()),
            started: AtomicU64::new(0),
        });
        let worker_source = Arc::new(TestSource {
            fill_byte: fill_byte + 1,
            hold: AtomicBool::new(false),
            hook: None,
            started: AtomicU64::new(0),
        });
        let vopts = ViewOptions {
            writable: false,
            ..ViewOptions::new(pages as usize * PAGE_SIZE)
        };
        let view = Arc::new(View::new(vopts, fault_source).unwrap());
        let predictor = Predictor::start(hook, view.clone(), worker_source).unwrap();
        (view, predictor)
    };
    let (va, pa) = make(0x40);
    let workers = predict_workers();
    assert!(workers >= 1, "a worker serves the first predictor");
    let (vb, pb) = make(0x50);
    assert_eq!(
        predict_workers(),
        workers,
        "the second predictor spawned a worker"
    );
    for (view, byte) in [(&va, 0x40u8), (&vb, 0x50)] {
        for p in 0..3 {
            // SAFETY: inside the live view.
            let v = unsafe { std::ptr::read_volatile(view.addr().add(p * PAGE_SIZE)) };
            assert_eq!(v, byte);
        }
    }
    let t0 = Instant::now();
    while !(3..11).all(|p| va.is_present(p) && vb.is_present(p))
        && t0.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (sa, sb) = (pa.finish(), pb.finish());
    assert_eq!((sa.installed, sb.installed), (8, 8), "{sa:?} {sb:?}");
    assert_eq!(Arc::strong_count(&va), 1, "the pool still holds view a");
    assert_eq!(Arc::strong_count(&vb), 1, "the pool still holds view b");
    drop((va, vb));
    let (vc, pc) = make(0x60);
    assert_eq!(
        predict_workers(),
        workers,
        "a later predictor spawned a worker"
    );
    drop(pc);
    assert_eq!(Arc::strong_count(&vc), 1);
}
