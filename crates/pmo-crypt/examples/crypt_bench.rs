//! Micro-benchmark of the per-page crypto: prints medians (ns/page and GB/s) over repeated passes.
//!
//! Run: `cargo run --release -p pmo-crypt --example crypt_bench [-- --repeats N --stream-mib M]`
//!
//! Two working sets, as in shared/measured.md: "hot" = 256 KiB (64 pages) looped, cache
//! resident; "stream" = one pass over `--stream-mib` MiB (default 64). Every figure is a median
//! over `--repeats` passes (default 15) of ns per page. Ratios taken in one run are what to quote:
//! the machine is shared.

#![allow(clippy::needless_range_loop)] // the loops index several parallel arrays

use pmo_crypt::faithful::{page_checksum, verify_page_checksum};
use pmo_crypt::pool::{OpenJob, SealJob, XtsJob};
use pmo_crypt::{
    open_page, seal_page, CryptoPool, FaithfulKeys, MasterKey, Page, PageChecksum, PageCtx,
    PmoKeys, Tag, VersionTableMac, PAGE_SIZE,
};
use std::hint::black_box;
use std::time::Instant;

const POOL: [u8; 16] = [1; 16];
const PMO: [u8; 16] = [2; 16];

fn ctx(i: usize) -> PageCtx {
    PageCtx {
        pool_uuid: POOL,
        pmo_uuid: PMO,
        page_index: i as u64,
        version: 1 + i as u64,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median ns per page of `pass`, which processes `pages` pages per call.
fn measure(repeats: usize, pages: usize, mut pass: impl FnMut()) -> f64 {
    pass(); // warm-up
    let samples = (0..repeats)
        .map(|_| {
            let t = Instant::now();
            pass();
            t.elapsed().as_nanos() as f64 / pages as f64
        })
        .collect();
    median(samples)
}

fn report(name: &str, ns_per_page: f64) {
    let gbps = PAGE_SIZE as f64 / ns_per_page;
    println!("{name:<44} {ns_per_page:>9.1} ns/page {gbps:>7.2} GB/s");
}

struct Args {
    repeats: usize,
    stream_mib: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        repeats: 15,
        stream_mib: 64,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{name} needs a number"))
        };
        match a.as_str() {
            "--repeats" => args.repeats = value("--repeats")?.max(1),
            "--stream-mib" => args.stream_mib = value("--stream-mib")?.max(1),
            other => {
                return Err(format!(
                    "unknown argument {other}; use --repeats N --stream-mib M"
                ))
            }
        }
    }
    Ok(args)
}

fn bench_set(
    label: &str,
    pages: usize,
    repeats: usize,
    keys: &PmoKeys,
    faithful: &FaithfulKeys,
    pool: &CryptoPool,
) {
    println!(
        "-- {label}: {pages} pages ({} KiB), median of {repeats}",
        pages * PAGE_SIZE / 1024
    );
    let plain: Vec<Page> = (0..pages)
        .map(|i| core::array::from_fn(|j| (i * 7 + j) as u8))
        .collect();
    let mut sealed: Vec<Page> = vec![[0u8; PAGE_SIZE]; pages];
    let mut out: Vec<Page> = vec![[0u8; PAGE_SIZE]; pages];
    let mut tags: Vec<Tag> = vec![Tag::default(); pages];
    let mut sums: Vec<PageChecksum> = vec![PageChecksum::default(); pages];

    let memcpy = measure(repeats, pages, || {
        for i in 0..pages {
            out[i].copy_from_slice(black_box(&plain[i]));
        }
        black_box(&out);
    });
    report("memcpy 4 KiB", memcpy);

    let seal = measure(repeats, pages, || {
        for i in 0..pages {
            tags[i] = seal_page(keys, &ctx(i), &plain[i], &mut sealed[i]).expect("seal");
        }
    });
    report("secure seal (AES-256-GCM, out of place)", seal);

    let open = measure(repeats, pages, || {
        for i in 0..pages {
            open_page(keys, &ctx(i), &sealed[i], &tags[i], &mut out[i]).expect("open");
        }
    });
    report("secure open (AES-256-GCM verify+decrypt)", open);
    assert_eq!(out[pages - 1], plain[pages - 1]);

    // The same pages under AEGIS-256X4 (the other page AEAD), side by side with GCM.
    let aegis = PmoKeys::derive_with(
        &MasterKey::from_bytes([7; 32]),
        POOL,
        PMO,
        pmo_crypt::AeadCipher::Aegis256X4,
    )
    .expect("derive");
    let aegis_seal = measure(repeats, pages, || {
        for i in 0..pages {
            tags[i] = seal_page(&aegis, &ctx(i), &plain[i], &mut sealed[i]).expect("seal");
        }
    });
    report("secure seal (AEGIS-256X4, out of place)", aegis_seal);
    let aegis_open = measure(repeats, pages, || {
        for i in 0..pages {
            open_page(&aegis, &ctx(i), &sealed[i], &tags[i], &mut out[i]).expect("open");
        }
    });
    report("secure open (AEGIS-256X4 verify+decrypt)", aegis_open);
    assert_eq!(out[pages - 1], plain[pages - 1]);
    println!(
        "   ratios: AEGIS/GCM seal {:.2}  open {:.2}",
        aegis_seal / seal,
        aegis_open / open
    );
    // Back to GCM pages for the rows below.
    for i in 0..pages {
        tags[i] = seal_page(keys, &ctx(i), &plain[i], &mut sealed[i]).expect("seal");
    }

    let xts_enc = measure(repeats, pages, || {
        for i in 0..pages {
            faithful
                .encrypt_page(i as u64, &plain[i], &mut sealed[i])
                .expect("xts");
        }
    });
    report("faithful XTS encrypt only", xts_enc);

    let sha = measure(repeats, pages, || {
        for i in 0..pages {
            sums[i] = page_checksum(&plain[i]);
        }
    });
    report("faithful SHA-256 only", sha);

    let xts_seal = measure(repeats, pages, || {
        for i in 0..pages {
            sums[i] = page_checksum(&plain[i]);
            faithful
                .encrypt_page(i as u64, &plain[i], &mut sealed[i])
                .expect("xts");
        }
    });
    report("faithful XTS encrypt + SHA-256 (psync)", xts_seal);

    let xts_open = measure(repeats, pages, || {
        for i in 0..pages {
            faithful
                .decrypt_page(i as u64, &sealed[i], &mut out[i])
                .expect("xts");
            verify_page_checksum(&out[i], &sums[i]).expect("verify");
        }
    });
    report("faithful XTS decrypt + SHA-256 verify (fault)", xts_open);
    assert_eq!(out[0], plain[0]);

    println!(
        "   ratios: seal/memcpy {:.2}  (XTS+SHA)/seal {:.2}  (XTS+SHA verify)/open {:.2}",
        seal / memcpy,
        xts_seal / seal,
        xts_open / open
    );

    // Parallel: the same seal/open through the pool, whole region as one batch.
    let par_seal = measure(repeats, pages, || {
        let mut jobs: Vec<SealJob> = plain
            .iter()
            .zip(sealed.iter_mut())
            .enumerate()
            .map(|(i, (p, o))| SealJob::new(ctx(i), p, o))
            .collect();
        pool.seal_batch(keys, &mut jobs).expect("seal");
        for (i, j) in jobs.iter().enumerate() {
            tags[i] = j.tag.unwrap_or_default();
        }
    });
    let par_open = measure(repeats, pages, || {
        let mut jobs: Vec<OpenJob> = sealed
            .iter()
            .zip(out.iter_mut())
            .enumerate()
            .map(|(i, (s, o))| OpenJob {
                ctx: ctx(i),
                sealed: s,
                tag: tags[i],
                out: o,
            })
            .collect();
        pool.open_batch(keys, &mut jobs).expect("open");
    });
    let par_xts = measure(repeats, pages, || {
        let mut jobs: Vec<XtsJob> = plain
            .iter()
            .zip(sealed.iter_mut())
            .enumerate()
            .map(|(i, (p, o))| XtsJob {
                page_index: i as u64,
                input: p,
                out: o,
                checksum: None,
            })
            .collect();
        pool.xts_encrypt_batch(faithful, &mut jobs, true)
            .expect("xts");
    });
    // Reference: the same seal split over two plain scoped threads (no pool), to tell pool
    // overhead from the machine's contention for its second vCPU.
    let scoped_seal = measure(repeats, pages, || {
        let half = pages / 2;
        let (s1, s2) = sealed.split_at_mut(half);
        let (p1, p2) = plain.split_at(half);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                for (i, (p, o)) in p2.iter().zip(s2.iter_mut()).enumerate() {
                    seal_page(keys, &ctx(half + i), p, o).expect("seal");
                }
            });
            for (i, (p, o)) in p1.iter().zip(s1.iter_mut()).enumerate() {
                seal_page(keys, &ctx(i), p, o).expect("seal");
            }
        });
    });
    report("scoped threads seal, 2 threads (reference)", scoped_seal);
    report(&format!("pool seal, {} threads", pool.threads()), par_seal);
    report(&format!("pool open, {} threads", pool.threads()), par_open);
    report(
        &format!("pool XTS+SHA-256, {} threads", pool.threads()),
        par_xts,
    );
    println!(
        "   parallel speedup vs 1 thread: seal {:.2}x (scoped threads {:.2}x)  open {:.2}x  XTS+SHA {:.2}x",
        seal / par_seal,
        seal / scoped_seal,
        open / par_open,
        xts_seal / par_xts
    );
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("crypt_bench: {e}");
            std::process::exit(2);
        }
    };
    let master = MasterKey::from_bytes([0x5A; 32]);
    let repeats = args.repeats;

    // Per-attach costs.
    let derive_ns = {
        let samples: Vec<f64> = (0..repeats)
            .map(|_| {
                let t = Instant::now();
                black_box(PmoKeys::derive(&master, POOL, PMO).expect("derive"));
                t.elapsed().as_nanos() as f64
            })
            .collect();
        median(samples)
    };
    let derive_faithful_ns = {
        let samples: Vec<f64> = (0..repeats)
            .map(|_| {
                let t = Instant::now();
                black_box(FaithfulKeys::derive(&master, POOL, PMO).expect("derive"));
                t.elapsed().as_nanos() as f64
            })
            .collect();
        median(samples)
    };
    println!("PmoKeys::derive (4 HKDF expands + key setup): {derive_ns:.0} ns");
    println!("FaithfulKeys::derive (HKDF + 16x2 XTS contexts): {derive_faithful_ns:.0} ns");

    let keys = PmoKeys::derive(&master, POOL, PMO).expect("derive");
    let faithful = FaithfulKeys::derive(&master, POOL, PMO).expect("derive");
    let pool = CryptoPool::with_limits(2, 1, 4).expect("pool");

    // Version table: incremental update per dirty page vs full verification per entry.
    let entries = 4096usize; // a 16 MiB PMO
    let versions: Vec<u64> = (1..=entries as u64).collect();
    let full_ns = measure(repeats, entries, || {
        black_box(VersionTableMac::from_table(&keys, &versions).tag(&keys, 7));
    });
    let mut mac = VersionTableMac::from_table(&keys, &versions);
    let upd_ns = measure(repeats, entries, || {
        for i in 0..entries {
            let v = versions[i];
            mac.update(&keys, i as u64, v, v + 1).expect("update");
            mac.update(&keys, i as u64, v + 1, v).expect("update");
        }
    }) / 2.0;
    println!("version table: full MAC {full_ns:.1} ns/entry ({:.1} us for {entries} entries), incremental update {upd_ns:.1} ns/dirty page", full_ns * entries as f64 / 1000.0);

    bench_set("hot", 64, repeats, &keys, &faithful, &pool);
    bench_set(
        "stream",
        args.stream_mib * 1024 * 1024 / PAGE_SIZE,
        repeats.min(7),
        &keys,
        &faithful,
        &pool,
    );

    // Small batches: is the pool worth waking for a psync of a few pages?
    println!(
        "-- small batches (seal, hot), median of {repeats}: inline vs pool of {}",
        pool.threads()
    );
    let inline = CryptoPool::with_limits(1, u64::MAX, 1).expect("pool");
    for batch in [4usize, 16, 64, 256] {
        let plain: Vec<Page> = vec![[3u8; PAGE_SIZE]; batch];
        let mut sealed: Vec<Page> = vec![[0u8; PAGE_SIZE]; batch];
        let mut run = |p: &CryptoPool| {
            measure(repeats * 4, batch, || {
                let mut jobs: Vec<SealJob> = plain
                    .iter()
                    .zip(sealed.iter_mut())
                    .enumerate()
                    .map(|(i, (p, o))| SealJob::new(ctx(i), p, o))
                    .collect();
                p.seal_batch(&keys, &mut jobs).expect("seal");
            })
        };
        let a = run(&inline);
        let b = run(&pool);
        println!(
            "batch {batch:>4} pages: inline {a:>8.1} ns/page  pool {b:>8.1} ns/page  ({:.2}x)",
            a / b
        );
    }
}
