//! Mapped attach: stable addresses, pointer-rich data across detach/attach, psync of dirty pages
//! only, reader/writer exclusion across threads, wrong keys, taken address ranges.
#![allow(unsafe_code)]

use std::path::PathBuf;
use std::time::Duration;

use pmo_os::view::Mechanism;
use pmo_store::{AttachOptions, DirtyTracking, KdfParams, Perm, Pool, PoolOptions, StoreError};

const KEY: &[u8] = b"attach-key";

fn pool(tag: &str) -> (Pool, PathBuf) {
    let path = std::env::temp_dir().join(format!("pmo-attach-{tag}-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ..Default::default()
    };
    (Pool::create(&path, 64 << 20, &opts).unwrap(), path)
}

fn mechanisms() -> Vec<Mechanism> {
    Mechanism::available()
}

/// A linked list node stored in a PMO with raw pointers.
#[repr(C)]
struct Node {
    value: u64,
    next: *mut Node,
}

#[test]
fn raw_pointer_list_survives_detach_attach() {
    for mech in mechanisms() {
        let (pool, path) = pool(&format!("list-{}", mech.name()));
        pool.pcreate("list", 1 << 20, KEY).unwrap();
        let opts = AttachOptions {
            mechanism: Some(mech),
            ..Default::default()
        };
        let a = pool.attach_with("list", Perm::Write, KEY, opts).unwrap();
        let base = a.addr();
        assert_eq!(
            base as u64,
            pool.info("list").unwrap().base_addr,
            "mapped at the stable address"
        );
        // Nodes spread over many pages, linked by raw pointers.
        let n = 200usize;
        unsafe {
            let nodes = base.cast::<Node>();
            for i in 0..n {
                let node = base.add(i * 4096 + 64).cast::<Node>();
                (*node).value = i as u64 * 7;
                (*node).next = if i + 1 < n {
                    base.add((i + 1) * 4096 + 64).cast()
                } else {
                    std::ptr::null_mut()
                };
            }
            (*nodes).next = base.add(64).cast(); // head pointer in page 0's first bytes
        }
        let stats = a.psync().unwrap();
        assert_eq!(
            stats.pages, n as u64,
            "exactly the written pages are committed"
        );
        assert_eq!(a.psync().unwrap().pages, 0, "nothing dirty after a psync");
        a.detach().unwrap();

        let pool = Pool::open(&path).unwrap();
        let a = pool.attach_with("list", Perm::Read, KEY, opts).unwrap();
        assert_eq!(a.addr(), base);
        let mut count = 0;
        unsafe {
            let mut p = (*a.addr().cast::<Node>()).next;
            while !p.is_null() {
                assert_eq!((*p).value, count * 7);
                count += 1;
                p = (*p).next;
            }
        }
        assert_eq!(count, n as u64);
        drop(a);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn unsynced_changes_are_discarded_at_detach() {
    let (pool, path) = pool("discard");
    pool.pcreate("x", 8192, KEY).unwrap();
    let a = pool.attach("x", Perm::Write, KEY).unwrap();
    a.write_at(0, b"kept").unwrap();
    a.psync().unwrap();
    a.write_at(0, b"lost").unwrap();
    a.write_at(5000, b"lost too").unwrap();
    a.detach().unwrap();
    let a = pool.attach("x", Perm::Read, KEY).unwrap();
    let mut b = [0u8; 4];
    a.read_at(0, &mut b).unwrap();
    assert_eq!(&b, b"kept");
    let mut c = [1u8; 8];
    a.read_at(5000, &mut c).unwrap();
    assert_eq!(c, [0u8; 8]);
    drop(a);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn readers_share_writers_exclude_and_waiting_works() {
    let (pool, path) = pool("excl");
    pool.pcreate("x", 4096, KEY).unwrap();
    let r1 = pool
        .attach_with(
            "x",
            Perm::Read,
            KEY,
            AttachOptions {
                relocate: true,
                ..Default::default()
            },
        )
        .unwrap();
    // A second reader of the same PMO in the same process needs another address range.
    let r2 = pool
        .attach_with(
            "x",
            Perm::Read,
            KEY,
            AttachOptions {
                relocate: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(r2.relocated());
    // Readers beside a writer (issue 27): a writer attaches beside them (here relocated: the
    // readers hold the stable address in this process).
    let w = pool
        .attach_with(
            "x",
            Perm::Write,
            KEY,
            AttachOptions {
                relocate: true,
                ..Default::default()
            },
        )
        .unwrap();
    drop(w);
    assert!(matches!(
        pool.pdestroy("x", KEY),
        Err(StoreError::Busy { .. })
    ));
    let info = pool.info("x").unwrap();
    assert_eq!(info.state, pmo_store::AttachState::Readers);
    assert_eq!(info.readers, 2);
    drop((r1, r2));
    assert_eq!(
        pool.info("x").unwrap().state,
        pmo_store::AttachState::AtRest
    );
    let w = pool.attach("x", Perm::Write, KEY).unwrap();
    let info = pool.info("x").unwrap();
    assert_eq!(
        (info.state, info.holder_pid),
        (pmo_store::AttachState::Writer, Some(std::process::id()))
    );
    // A reader beside this process's writer (relocated: the writer holds the address).
    let r = pool
        .attach_with(
            "x",
            Perm::Read,
            KEY,
            AttachOptions {
                relocate: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(pool.info("x").unwrap().readers, 1);
    drop(r);
    assert!(matches!(
        pool.attach("x", Perm::Write, KEY),
        Err(StoreError::Busy {
            how: pmo_store::BUSY_WRITER_HERE,
            ..
        })
    ));
    // Said as it is: this process holds it (it read "by another process").
    let e = pool.pdestroy("x", KEY).unwrap_err().to_string();
    assert_eq!(
        e,
        "PMO 'x' is attached read-write by this process (detach it first)"
    );
    let p2 = pool.clone();
    let waiter = std::thread::spawn(move || {
        p2.attach_with(
            "x",
            Perm::Write,
            KEY,
            AttachOptions {
                wait: Some(Duration::from_secs(10)),
                relocate: true,
                ..Default::default()
            },
        )
        .map(|_| ())
    });
    std::thread::sleep(Duration::from_millis(50));
    drop(w);
    waiter.join().unwrap().unwrap();
    let t0 = std::time::Instant::now();
    let _w = pool.attach("x", Perm::Write, KEY).unwrap();
    let r = pool.attach_with(
        "x",
        Perm::Write,
        KEY,
        AttachOptions {
            wait: Some(Duration::from_millis(100)),
            relocate: true,
            ..Default::default()
        },
    );
    assert!(matches!(r, Err(StoreError::Busy { .. })));
    assert!(t0.elapsed() >= Duration::from_millis(100));
    std::fs::remove_file(&path).unwrap();
}

/// Set in the child process that runs [`wrong_key_maps_nothing`]'s checks.
const WRONG_KEY_CHILD: &str = "PMO_ATTACH_WRONG_KEY_CHILD";

#[test]
fn wrong_key_maps_nothing() {
    // `live_views` counts the views of the whole process, which the other tests of this binary
    // create and drop while they run: the count is compared in a child running this test alone.
    if std::env::var_os(WRONG_KEY_CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "wrong_key_maps_nothing",
                "--test-threads=1",
                "--nocapture",
            ])
            .env(WRONG_KEY_CHILD, "1")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "child: {text}");
        assert!(text.contains("1 passed"), "the child ran the test: {text}");
        return;
    }
    let (pool, path) = pool("key");
    pool.pcreate("x", 4096, KEY).unwrap();
    let before = pmo_os::view::live_views();
    assert!(matches!(
        pool.attach("x", Perm::Write, b"nope"),
        Err(StoreError::WrongKey(_))
    ));
    assert!(matches!(
        pool.pdestroy("x", b"nope"),
        Err(StoreError::WrongKey(_))
    ));
    assert_eq!(pmo_os::view::live_views(), before);
    assert!(pool.exists("x").unwrap());
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn taken_address_is_an_error_unless_relocation_is_allowed() {
    let (pool, path) = pool("addr");
    let info = pool.pcreate("x", 3 * 4096, KEY).unwrap();
    // Occupy the PMO's stable range with an ordinary mapping.
    let blocker = unsafe {
        libc::mmap(
            info.base_addr as *mut libc::c_void,
            4096,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    assert_eq!(blocker as u64, info.base_addr);
    match pool.attach("x", Perm::Write, KEY) {
        Err(StoreError::AddressInUse { addr, .. }) => assert_eq!(addr, info.base_addr),
        other => panic!("expected AddressInUse, got {:?}", other.map(|a| a.addr())),
    }
    let a = pool
        .attach_with(
            "x",
            Perm::Write,
            KEY,
            AttachOptions {
                relocate: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(a.relocated());
    a.write_at(10, b"moved").unwrap();
    a.psync().unwrap();
    drop(a);
    unsafe { libc::munmap(blocker, 4096) };
    let a = pool.attach("x", Perm::Read, KEY).unwrap();
    let mut b = [0u8; 5];
    a.read_at(10, &mut b).unwrap();
    assert_eq!(&b, b"moved");
    drop(a);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn many_threads_fault_and_write_at_once() {
    let (pool, path) = pool("threads");
    let pages = 512usize;
    pool.pcreate("x", (pages * 4096) as u64, KEY).unwrap();
    {
        let h = pool.open_pmo("x", Perm::Write, KEY, None).unwrap();
        let data: Vec<u8> = (0..pages * 4096).map(|i| (i / 4096) as u8).collect();
        h.write_at(0, &data).unwrap();
    }
    let a = pool.attach("x", Perm::Write, KEY).unwrap();
    let base = a.addr() as usize;
    std::thread::scope(|s| {
        for t in 0..8usize {
            s.spawn(move || {
                for p in (0..pages).rev() {
                    let ptr = (base + p * 4096) as *mut u8;
                    // SAFETY: inside the attached mapping, which outlives the scope.
                    let v = unsafe { std::ptr::read_volatile(ptr.add(100)) };
                    assert_eq!(v, p as u8, "thread {t} page {p}");
                    if p % 8 == t {
                        unsafe { std::ptr::write_volatile(ptr.add(200 + t), 0xC0 | t as u8) };
                    }
                }
            });
        }
    });
    let stats = a.psync().unwrap();
    // Twin tracking commits the pages that changed: 16 writes stored the byte already there
    // (page p holds `p as u8`, thread p % 8 writes 0xC0 | p % 8) ...
    let changed = (0..pages)
        .filter(|&p| p as u8 != 0xC0 | (p % 8) as u8)
        .count();
    if a.dirty_tracking() == DirtyTracking::Twin {
        // ... unless the page was write-protected (a racing filler installed it): it faults.
        assert!((changed as u64..=pages as u64).contains(&stats.pages));
    } else {
        assert_eq!(stats.pages, pages as u64);
    }
    drop(a);
    let h = pool.open_pmo("x", Perm::Read, KEY, None).unwrap();
    let mut page = [0u8; 4096];
    for p in 0..pages {
        h.read_page(p as u64, &mut page).unwrap();
        assert_eq!(page[100], p as u8);
        assert_eq!(page[200 + p % 8], 0xC0 | (p % 8) as u8);
    }
    drop(h);
    std::fs::remove_file(&path).unwrap();
}

/// Every tracking commits exactly what it promises: scan, fault and twin find raw-pointer
/// writes by themselves; declared commits `write_at` and declared ranges and nothing else.
#[test]
fn each_dirty_tracking_commits_what_it_promises() {
    for tracking in [
        DirtyTracking::Scan,
        DirtyTracking::Fault,
        DirtyTracking::Declared,
        DirtyTracking::Twin,
    ] {
        if tracking != DirtyTracking::Fault && !tracking.is_available() {
            eprintln!("skip {tracking}: not supported by this kernel");
            continue;
        }
        let (pool, path) = pool(&format!("track-{tracking}"));
        pool.pcreate("t", 16 * 4096, KEY).unwrap();
        let opts = AttachOptions {
            mechanism: Some(Mechanism::Userfaultfd),
            tracking: Some(tracking),
            ..Default::default()
        };
        let Ok(a) = pool.attach_with("t", Perm::Write, KEY, opts) else {
            eprintln!("skip {tracking}: userfaultfd unavailable");
            continue;
        };
        assert_eq!(a.dirty_tracking(), tracking);
        // Page 1 by write_at, page 2 raw and declared, page 3 raw and not declared; each
        // written twice around a psync so the second write hits a page that is present.
        for round in 1..=2u8 {
            a.write_at(4096, &[round; 8]).unwrap();
            unsafe { a.addr().add(2 * 4096).write_bytes(round, 8) };
            a.declare(2 * 4096, 8).unwrap();
            unsafe { a.addr().add(3 * 4096).write_bytes(round, 8) };
            let st = a.psync().unwrap();
            let expected = if tracking == DirtyTracking::Declared {
                2
            } else {
                3
            };
            assert_eq!(st.pages, expected, "{tracking} round {round}");
        }
        a.detach().unwrap();
        let a = pool.attach("t", Perm::Read, KEY).unwrap();
        let mut b = [0u8; 1];
        for (page, want_declared) in [(1usize, 2u8), (2, 2), (3, 0)] {
            a.read_at(page * 4096, &mut b).unwrap();
            let want = if tracking == DirtyTracking::Declared {
                want_declared
            } else {
                2
            };
            assert_eq!(b[0], want, "{tracking}: page {page}");
        }
        assert!(matches!(a.declare(0, 1), Err(StoreError::ReadOnly(_))));
        drop(a);
        drop(pool);
        let _ = std::fs::remove_file(path);
    }
}

/// Session instrumentation: the Fig. 6 categories add up, the counts match what was done, and
/// a writer's session is recorded in the PMO for `pmo info`.
#[test]
fn session_stats_account_for_the_session() {
    let (pool, path) = pool("stats");
    pool.pcreate_with("s", 64 * 4096, KEY, Some(pmo_store::Scheme::SECURE))
        .unwrap();
    assert_eq!(pool.last_session("s").unwrap(), None);
    let a = pool.attach("s", Perm::Write, KEY).unwrap();
    for p in 0..10 {
        a.write_at(p * 4096, &[7u8; 100]).unwrap();
    }
    a.psync().unwrap();
    a.write_at(0, &[8u8; 1]).unwrap();
    a.psync().unwrap();
    let s = a.session_stats();
    assert_eq!(s.psyncs, 2);
    assert_eq!(s.pages_encrypted, 11);
    // Fault-around fills a sequential run in fewer faults than pages.
    assert!(s.faults >= 1 && s.faults <= s.pages_decrypted, "{s:?}");
    assert!(s.pages_decrypted >= 10, "{s:?}");
    assert!(s.attach_other_ns > 0 && s.psync_crypt_ns > 0 && s.psync_persist_ns > 0);
    let sum: u64 = s.categories().iter().map(|c| c.1).sum();
    assert_eq!(sum, s.wall_ns, "categories add up to the wall time: {s:?}");
    a.detach().unwrap();
    let rec = pool.last_session("s").unwrap().expect("recorded at detach");
    assert_eq!(rec.psyncs, 2);
    assert!(rec.detach_ns > 0 && rec.wall_ns >= s.wall_ns);
    // A reader's session is not recorded (readers do not write the PMO).
    drop(pool.attach("s", Perm::Read, KEY).unwrap());
    assert_eq!(pool.last_session("s").unwrap(), Some(rec));
    drop(pool);
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_bad_name_is_a_usage_error_not_corruption() {
    let (pool, path) = pool("badname");
    for name in ["", "a/b", "nul\0"] {
        let e = pool.pcreate(name, 4096, KEY).unwrap_err();
        assert!(matches!(e, StoreError::Invalid(_)), "{name:?}: {e}");
        assert!(!e.is_integrity());
    }
    drop(pool);
    let _ = std::fs::remove_file(path);
}

/// Readers attaching at the same moment (threads here; processes alike): each attach holds the
/// PMO alone for an instant (it recovers it, then shares), and a reader arriving then waits
/// for that instant instead of failing with `Busy` "read-write by another process", which was
/// untrue. A reader arriving while a writer holds the PMO still fails at once, saying so.
#[test]
fn readers_attaching_at_once_all_succeed() {
    let (pool, path) = pool("readers-at-once");
    pool.pcreate("r", 64 << 10, KEY).unwrap();
    let busy = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..150 {
                    // In one process each reader maps elsewhere (processes map at the
                    // stable address).
                    let opts = AttachOptions {
                        relocate: true,
                        ..Default::default()
                    };
                    match pool.attach_with("r", Perm::Read, KEY, opts) {
                        Ok(a) => a.detach().unwrap(),
                        Err(StoreError::Busy { how, .. }) => {
                            eprintln!("busy: {how}");
                            busy.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Err(e) => panic!("reader attach: {e}"),
                    }
                }
            });
        }
    });
    assert_eq!(busy.into_inner(), 0, "readers attaching at once got Busy");
    let w = pool.attach("r", Perm::Write, KEY).unwrap();
    let t = std::time::Instant::now();
    let opts = AttachOptions {
        relocate: true,
        ..Default::default()
    };
    // A reader beside the writer (issue 27) attaches at once: it takes no attach lock.
    pool.attach_with("r", Perm::Read, KEY, opts)
        .unwrap()
        .detach()
        .unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "a reader beside a writer waited"
    );
    drop(w);
    let _ = std::fs::remove_file(&path);
}

/// A PMO of a few pages gets a resident view (issue 29): filled at attach, no fault, and after
/// its detach the range it leaves mapped for the next attach holds nothing of the PMO: every
/// byte reads zero (read here, at the stable address, after the detach). The next attach of
/// the PMO takes the same range and shows the psynced contents again; what was written but
/// not psynced is gone.
#[test]
fn a_small_pmo_leaves_only_zeros_in_its_reused_range() {
    if std::env::var_os("PMO_FAULT").is_some() || std::env::var_os("PMO_DIRTY").is_some() {
        return; // the process chose how faults or writes are served: no resident views.
    }
    for scheme in [pmo_store::Scheme::NONE, pmo_store::Scheme::SECURE] {
        let (pool, path) = pool(&format!("resident-{scheme}"));
        pool.pcreate_with("small", 4 * 4096, KEY, Some(scheme))
            .unwrap();
        let secret = b"the plaintext of a small PMO";
        let a = pool.attach("small", Perm::Write, KEY).unwrap();
        let base = a.addr() as usize;
        let len = a.mapped_len();
        a.write_at(8192, secret).unwrap();
        a.psync().unwrap();
        assert_eq!(a.session_stats().faults, 0, "{scheme}: filled at attach");
        a.write_at(0, b"never psynced").unwrap();
        a.detach().unwrap();
        assert!(
            pmo_os::view::spare_kept_at(base),
            "{scheme}: the range is kept for the next attach"
        );
        // SAFETY: the range stays mapped (a spare of this process) and is only read here.
        let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, len) };
        assert!(
            bytes.iter().all(|&b| b == 0),
            "{scheme}: plaintext readable after detach"
        );
        let r = pool.attach("small", Perm::Read, KEY).unwrap();
        let mut got = vec![0u8; secret.len()];
        r.read_at(8192, &mut got).unwrap();
        assert_eq!(&got, secret, "{scheme}");
        r.read_at(0, &mut got[..13]).unwrap();
        assert_eq!(
            &got[..13],
            &[0u8; 13],
            "{scheme}: the unsynced write is gone"
        );
        drop(r);
        let w = pool.attach("small", Perm::Write, KEY).unwrap();
        assert_eq!(w.addr() as usize, base, "{scheme}: the same stable address");
        w.read_at(8192, &mut got).unwrap();
        assert_eq!(&got, secret, "{scheme}");
        drop(w);
        drop(pool);
        let _ = std::fs::remove_file(&path);
    }
}
