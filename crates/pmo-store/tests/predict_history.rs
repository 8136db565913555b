//! A predictor's history across attaches (`PredictConfig::history`): an attach of a PMO whose
//! earlier attach read it as a stream asks for its window at the first fault; without history
//! (or for a PMO never read as a stream) the first fault asks for nothing. Contents stay exact.

use pmo_os::view::PAGE_SIZE;
use pmo_store::predict::PredictConfig;
use pmo_store::{AttachOptions, Attachment, KdfParams, Perm, Pool, PoolOptions, Scheme};

const KEY: &[u8] = b"history-key";
const PAGES: u64 = 64;

fn byte(p: u64) -> u8 {
    (p as u8).wrapping_mul(7).wrapping_add(3)
}

fn read(a: &Attachment, p: u64) {
    let mut buf = vec![0u8; PAGE_SIZE];
    a.read_at(p as usize * PAGE_SIZE, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == byte(p)), "page {p}");
}

fn attach(pool: &Pool, name: &str, cfg: PredictConfig) -> Attachment {
    let opts = AttachOptions {
        // 64 pages is four fault-around windows: predict it all the same (`min_windows`).
        predict: Some(PredictConfig {
            min_windows: 0,
            ..cfg
        }),
        ..Default::default()
    };
    pool.attach_with(name, Perm::Read, KEY, opts).unwrap()
}

/// Requests the predictor made so far.
fn requests(a: &Attachment) -> u64 {
    a.predict_stats().expect("predicting").requests
}

#[test]
fn a_second_attach_starts_from_the_first_ones_streams() {
    let path = std::env::temp_dir().join(format!("pmo-phist-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        scheme: Scheme::from_name("secure").unwrap(),
        ..Default::default()
    };
    let pool = Pool::create(&path, 16 << 20, &opts).unwrap();
    for name in ["seq", "rand"] {
        pool.pcreate(name, PAGES * PAGE_SIZE as u64, KEY).unwrap();
        let a = pool.attach(name, Perm::Write, KEY).unwrap();
        for p in 0..PAGES {
            a.write_at(p as usize * PAGE_SIZE, &vec![byte(p); PAGE_SIZE])
                .unwrap();
        }
        a.psync().unwrap();
        a.detach().unwrap();
    }
    let hist = PredictConfig::parse("8+history").unwrap();
    assert!(hist.history && hist.label() == "8+history");
    let plain = PredictConfig::fixed(8);

    // A cold attach: the first fault asks for nothing.
    let a = attach(&pool, "seq", hist);
    read(&a, 0);
    assert_eq!(requests(&a), 0, "cold: no stream yet");
    // Read on as a stream: confirmed at the third fault.
    for p in 1..PAGES {
        read(&a, p);
    }
    assert!(requests(&a) > 0);
    a.detach().unwrap();

    // Without history, the next attach starts cold again.
    let a = attach(&pool, "seq", plain);
    read(&a, 0);
    assert_eq!(requests(&a), 0, "history off");
    a.detach().unwrap();

    // With history, its first fault starts a confirmed stream and asks for its window.
    let a = attach(&pool, "seq", hist);
    read(&a, 0);
    assert_eq!(requests(&a), 1, "history on: the first fault asks");
    // The worker installs the window (given time: it may be parked).
    let t = std::time::Instant::now();
    while a.predict_stats().unwrap().installed == 0 && t.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let s = a.predict_stats().unwrap();
    assert!(s.installed > 0, "{s:?}");
    for p in 1..PAGES {
        read(&a, p);
    }
    a.detach().unwrap();

    // A PMO read at random (no stream confirmed) has nothing to resume.
    let a = attach(&pool, "rand", hist);
    for p in [40, 3, 61, 17, 29, 8, 52] {
        read(&a, p);
    }
    a.detach().unwrap();
    let a = attach(&pool, "rand", hist);
    read(&a, 0);
    assert_eq!(requests(&a), 0, "no stream learnt");
    a.detach().unwrap();

    assert!(PredictConfig::parse("off+history").is_err());
    drop(pool);
    let _ = std::fs::remove_file(&path);
}
