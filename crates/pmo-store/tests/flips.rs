//! Flip tests (issue 18): one flipped byte (or one in each copy of a redundant record) in a
//! pool image, then the pool is opened in process and the PMO read. The outcome must be the
//! exact data, or a clean integrity error (`Corrupt` / `Integrity`, CLI exit 2); never wrong
//! data under a scheme with integrity, never "not found" for a PMO that exists, and a pcreate
//! afterwards never overlaps an existing PMO's extent.
//!
//! Data pages are swept twice: through page-level reads (`pmo read`'s path) and through loads
//! from an attach's mapping in a child process (a damaged page ends it with SIGBUS and a
//! one-line report).
//!
//! CI runs a seeded sample of positions per region; `PMO_FLIP_ALL=1` flips every byte of every
//! region; `PMO_FLIP_SEED=N` replays a sample. The seed is printed on failure.

use std::sync::Arc;

use pmo_format::layout::{PageLoc, PageMapEntry};
use pmo_format::{Entry, PmoLayout, ENTRY_SIZE};
use pmo_medium::CrashMedium;
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, Scheme, StoreError};

const KEY: &[u8] = b"flip-key";
const PAGES: u64 = 16;
/// Positions sampled per region in CI (the floor).
const SAMPLE: usize = 2000;

/// The seeded generator of the sample.
struct Rng(rand::rngs::StdRng);
impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(rand::SeedableRng::seed_from_u64(seed))
    }
    fn next(&mut self) -> u64 {
        rand::RngCore::next_u64(&mut self.0)
    }
}

fn seed() -> u64 {
    match std::env::var("PMO_FLIP_SEED") {
        Ok(s) => s.parse().expect("PMO_FLIP_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    }
}

fn flip_all() -> bool {
    std::env::var("PMO_FLIP_ALL").is_ok_and(|v| v == "1")
}

/// Every bit of `start..end` under `PMO_FLIP_ALL=1` or when there are at most `n`, else `n`
/// seeded (position, bit) pairs.
fn positions(start: u64, end: u64, n: usize, rng: &mut Rng) -> Vec<(u64, u8)> {
    if flip_all() || (end - start) as usize * 8 <= n {
        return (start..end)
            .flat_map(|p| (0..8).map(move |b| (p, 1u8 << b)))
            .collect();
    }
    (0..n)
        .map(|_| (start + rng.next() % (end - start), 1u8 << (rng.next() % 8)))
        .collect()
}

/// A pool image holding PMO `d` (data written in two psyncs, so both data slots hold live
/// pages) and PMO `e`; the expected contents of `d`.
struct Sample {
    image: Vec<u8>,
    expected: Vec<u8>,
    d: Entry,
    e: Entry,
    config: pmo_format::PoolConfig,
}

fn sample(scheme: Scheme) -> Sample {
    let m = Arc::new(CrashMedium::new(4 << 20));
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ns_capacity: Some(16),
        base_addr: Some(0x2000_0000_0000),
        scheme,
        ..Default::default()
    };
    let pool = Pool::create_on(m.clone(), &opts).expect("pool");
    pool.pcreate("d", PAGES * 4096, KEY).expect("pcreate d");
    pool.pcreate("e", 4 * 4096, KEY).expect("pcreate e");
    let mut expected = vec![0u8; (PAGES * 4096) as usize];
    let mut rng = Rng::new(7);
    for (off, len) in [(8192usize, 7 * 4096 + 100), (3 * 4096 + 17, 2 * 4096)] {
        let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        expected[off..off + len].copy_from_slice(&data);
        let h = pool.open_pmo("d", Perm::Write, KEY, None).expect("open d");
        h.write_at(off as u64, &data).expect("write d");
    }
    let ns = pool.superblock().ns_offset;
    let entry = |name: &str| {
        let image = m.current_image();
        (0..pool.superblock().ns_capacity as usize)
            .filter_map(|i| {
                let at = ns as usize + i * ENTRY_SIZE;
                Entry::decode(&image[at..at + ENTRY_SIZE]).ok().flatten()
            })
            .find(|e| e.name == name)
            .expect("entry")
    };
    let (d, e) = (entry("d"), entry("e"));
    let config = pool.config().expect("config");
    drop(pool);
    Sample {
        image: m.current_image(),
        expected,
        d,
        e,
        config,
    }
}

/// What one flipped image gave.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Exact,
    Caught,
    Wrong,
}

/// Open the image, read `d` whole; then (when the pool opens) pcreate a PMO and check it
/// overlaps no existing extent. `Err`: a broken promise, described.
fn judge(s: &Sample, image: Vec<u8>) -> Result<Outcome, String> {
    judge_reported(s, image).map(|(o, _)| o)
}

/// [`judge`], with the repair lines the open and the read reported.
fn judge_reported(s: &Sample, image: Vec<u8>) -> Result<(Outcome, Vec<String>), String> {
    let medium = Arc::new(CrashMedium::from_image(image));
    let pool = match Pool::open_on(medium) {
        Ok(p) => p,
        Err(e) if e.is_integrity() => return Ok((Outcome::Caught, Vec::new())),
        Err(e) => return Err(format!("pool open: not an integrity error: {e}")),
    };
    let read = (|| -> Result<Vec<u8>, StoreError> {
        let h = pool.open_pmo("d", Perm::Read, KEY, None)?;
        let mut buf = vec![0u8; s.expected.len()];
        h.read_at(0, &mut buf)?;
        Ok(buf)
    })();
    let config_caught = match pool.config() {
        Ok(c) if c != s.config => return Err(format!("configuration reads as {c:?}")),
        Err(e) if !e.is_integrity() => return Err(format!("configuration: {e}")),
        Err(_) => true,
        Ok(_) => false,
    };
    let outcome = match read {
        Ok(b) if b == s.expected && config_caught => Outcome::Caught,
        Ok(b) if b == s.expected => Outcome::Exact,
        Ok(_) => Outcome::Wrong,
        Err(e) if e.is_integrity() => Outcome::Caught,
        Err(e) => return Err(format!("read of 'd': not an integrity error: {e}")),
    };
    let repairs = pool.repairs();
    // No allocation over an existing extent.
    if let Ok(info) = pool.pcreate("new", 4096, KEY) {
        for x in [&s.d, &s.e] {
            let (a, b) = (info.extent_off, info.extent_off + info.extent_len);
            if a < x.extent_off + x.extent_len && x.extent_off < b {
                return Err(format!(
                    "pcreate placed 'new' at {a:#x}..{b:#x}, over '{}' ({:#x}+{:#x})",
                    x.name, x.extent_off, x.extent_len
                ));
            }
        }
    }
    Ok((outcome, repairs))
}

/// The data-page sweep: every scheme and placement. A scheme with integrity returns the exact
/// data or an integrity error; one without (`none`, `wed`, `bp`, `sp`) may return wrong data,
/// as documented (`pmo scheme show`).
#[test]
fn data_page_flips_per_scheme() {
    let seed = seed();
    let mut failures = Vec::new();
    for scheme in Scheme::all_placements() {
        let s = sample(scheme);
        let layout = PmoLayout::with_plain(
            PAGES,
            scheme.tag_bytes() as u64,
            scheme.shadow == pmo_store::Shadow::Medium,
        )
        .expect("layout");
        let data = s.d.extent_off + layout.data_off;
        let end = data + 2 * PAGES * 4096;
        let mut rng = Rng::new(seed ^ u64::from(scheme.code()));
        let n = SAMPLE / 4;
        let (mut exact, mut caught, mut wrong) = (0, 0, 0);
        for (pos, bit) in positions(data, end, n, &mut rng) {
            let mut img = s.image.clone();
            img[pos as usize] ^= bit;
            match judge(&s, img) {
                Ok(Outcome::Exact) => exact += 1,
                Ok(Outcome::Caught) => caught += 1,
                Ok(Outcome::Wrong) => {
                    wrong += 1;
                    if scheme.integrity_at() != pmo_store::scheme::IntegrityAt::Never {
                        failures.push(format!("{scheme}: flip {bit:#x} at {pos:#x}: wrong data"));
                    }
                }
                Err(why) => failures.push(format!("{scheme}: flip {bit:#x} at {pos:#x}: {why}")),
            }
        }
        println!(
            "{:<14} exact {exact:>5} caught {caught:>5} wrong {wrong:>5}",
            scheme.to_string()
        );
        if scheme.integrity_at() == pmo_store::scheme::IntegrityAt::Never {
            // Not a promise, a description: flips in live pages read as wrong data.
            assert!(
                wrong > 0,
                "{scheme}: no flip read as wrong data (seed {seed})"
            );
        } else {
            assert!(caught > 0, "{scheme}: nothing caught (seed {seed})");
        }
    }
    assert!(
        failures.is_empty(),
        "seed {seed}: {} broken promises, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
}

/// The metadata regions of the sample: (name, start, end) on the medium.
fn metadata_regions(s: &Sample, scheme: Scheme) -> Vec<(&'static str, u64, u64)> {
    let sb = {
        let pool = Pool::open_on(Arc::new(CrashMedium::from_image(s.image.clone()))).unwrap();
        pool.superblock().clone()
    };
    let slot = (0..sb.ns_capacity as usize)
        .find(|&i| {
            let at = sb.ns_offset as usize + i * ENTRY_SIZE;
            Entry::decode(&s.image[at..at + ENTRY_SIZE])
                .ok()
                .flatten()
                .is_some_and(|e| e.name == "d")
        })
        .expect("slot of d") as u64;
    let layout = PmoLayout::with_plain(
        PAGES,
        scheme.tag_bytes() as u64,
        scheme.shadow == pmo_store::Shadow::Medium,
    )
    .expect("layout");
    let x = s.d.extent_off;
    let journal = PAGES * 16 + if scheme.is_protected() { 64 } else { 0 };
    vec![
        ("superblock A", 0, 256),
        ("superblock B", 4096, 4096 + 256),
        ("configuration", sb.config_offset, sb.config_offset + 136),
        (
            "namespace A",
            sb.ns_offset + slot * 512,
            sb.ns_offset + slot * 512 + 512,
        ),
        (
            "namespace B",
            sb.ns_mirror + slot * 512,
            sb.ns_mirror + slot * 512 + 512,
        ),
        ("header page", x, x + 4096),
        (
            "page map",
            x + layout.map_off,
            x + layout.map_off + PAGES * 8,
        ),
        (
            "journal 0",
            x + layout.journal_off[0],
            x + layout.journal_off[0] + journal,
        ),
        (
            "journal 1",
            x + layout.journal_off[1],
            x + layout.journal_off[1] + journal,
        ),
        ("config slot 0", sb.config_offset, sb.config_offset + 64),
        (
            "config slot 1",
            sb.config_offset + 64,
            sb.config_offset + 128,
        ),
        // Every slot (free ones and `e`'s too), sampled more thinly.
        (
            "namespace A *",
            sb.ns_offset,
            sb.ns_offset + sb.ns_capacity * 512,
        ),
        (
            "namespace B *",
            sb.ns_mirror,
            sb.ns_mirror + sb.ns_capacity * 512,
        ),
    ]
}

/// One flipped bit anywhere in the metadata: the exact data or a clean integrity error, and
/// a pcreate afterwards never over an existing extent. Regions: both superblocks, the
/// configuration page's records and generation word (and each record slot), `d`'s namespace
/// slot in both copies and every slot of both copies, `d`'s header page (commit records,
/// words, entry copy), page map and both journals (entries and trailer).
#[test]
fn metadata_flips() {
    let seed = seed();
    let mut failures = Vec::new();
    // CI: the scheme without any integrity (only the format's own checks stand) and the
    // default; every scheme under PMO_FLIP_ALL=1.
    let schemes: Vec<Scheme> = if flip_all() {
        Scheme::all().chain([Scheme::SECURE_GCM]).collect()
    } else {
        vec![Scheme::NONE, Scheme::SECURE_GCM, Scheme::SECURE]
    };
    for scheme in schemes {
        let s = sample(scheme);
        let mut rng = Rng::new(seed ^ u64::from(scheme.code()));
        for (region, start, end) in metadata_regions(&s, scheme) {
            let (mut exact, mut caught) = (0, 0);
            let n = if region.ends_with('*') {
                SAMPLE / 2
            } else {
                SAMPLE
            };
            for (pos, bit) in positions(start, end, n, &mut rng) {
                let mut img = s.image.clone();
                img[pos as usize] ^= bit;
                // A commit record (header page bytes 0..128) that no longer decodes is
                // reported, never passed over in silence.
                let record = region == "header page" && pos - start < 128;
                match judge_reported(&s, img) {
                    Ok((Outcome::Exact, notes))
                        if record && !notes.iter().any(|n| n.contains("commit record slot")) =>
                    {
                        failures.push(format!(
                            "{scheme} {region}: flip {bit:#x} at {pos:#x}: a damaged commit record passed without a report"
                        ))
                    }
                    Ok((Outcome::Exact, _)) => exact += 1,
                    Ok((Outcome::Caught, _)) => caught += 1,
                    Ok((Outcome::Wrong, _)) => failures.push(format!(
                        "{scheme} {region}: flip {bit:#x} at {pos:#x}: wrong data"
                    )),
                    Err(why) => failures.push(format!(
                        "{scheme} {region}: flip {bit:#x} at {pos:#x}: {why}"
                    )),
                }
            }
            println!(
                "{:<8} {region:<14} exact {exact:>5} caught {caught:>5}",
                scheme.to_string()
            );
        }
    }
    assert!(
        failures.is_empty(),
        "seed {seed}: {} broken promises, first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(12)]
    );
}

/// Runs of up to 16 flipped bits (both ends flipped, any bits between) inside one page-map
/// entry of `d`: the entry's wide check catches every one (format version 4), so the outcome
/// is the exact data (a replayed journal rewrites the entry, or the run left the page's slot
/// as it was) or a clean integrity error; never wrong data. The 4-bit check of version 3
/// missed runs of 5 or more.
#[test]
fn page_map_bursts() {
    let seed = seed();
    let mut failures = Vec::new();
    let schemes: Vec<Scheme> = if flip_all() {
        Scheme::all().chain([Scheme::SECURE_GCM]).collect()
    } else {
        vec![Scheme::NONE, Scheme::SECURE_GCM, Scheme::SECURE]
    };
    for scheme in schemes {
        let s = sample(scheme);
        let (_, map, _) = metadata_regions(&s, scheme)
            .into_iter()
            .find(|r| r.0 == "page map")
            .expect("page map region");
        let mut rng = Rng::new(seed ^ u64::from(scheme.code()) ^ 0xb0);
        let (mut exact, mut caught) = (0, 0);
        for _ in 0..SAMPLE {
            let at = (map + (rng.next() % PAGES) * 8) as usize;
            let len = 1 + rng.next() % 16;
            let start = rng.next() % (65 - len);
            let inner = if len > 2 {
                rng.next() & ((1 << (len - 2)) - 1)
            } else {
                0
            };
            let run = (1 | inner << 1 | 1 << (len - 1)) << start;
            let mut img = s.image.clone();
            let e = u64::from_le_bytes(img[at..at + 8].try_into().unwrap()) ^ run;
            img[at..at + 8].copy_from_slice(&e.to_le_bytes());
            match judge(&s, img) {
                Ok(Outcome::Exact) => exact += 1,
                Ok(Outcome::Caught) => caught += 1,
                Ok(Outcome::Wrong) => failures.push(format!(
                    "{scheme}: run {run:#018x} in the entry at {at:#x}: wrong data"
                )),
                Err(why) => failures.push(format!(
                    "{scheme}: run {run:#018x} in the entry at {at:#x}: {why}"
                )),
            }
        }
        println!(
            "{:<8} page-map runs of 1-16 bits: exact {exact:>5} caught {caught:>5}",
            scheme.to_string()
        );
        assert!(caught > 0, "{scheme}: nothing caught (seed {seed})");
    }
    assert!(
        failures.is_empty(),
        "seed {seed}: {} broken promises, first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(12)]
    );
}

/// The same bit flipped in both copies of a redundant record (superblock, namespace slot,
/// configuration record):
/// nothing to repair from, so the answer is a clean integrity error, never wrong data or
/// "not found".
#[test]
fn two_copy_flips() {
    let seed = seed();
    let mut failures = Vec::new();
    let scheme = Scheme::SECURE;
    let s = sample(scheme);
    let regions = metadata_regions(&s, scheme);
    // Superblock A + B, namespace A + B, configuration slot 0 + 1.
    let pairs = [(0, 1), (3, 4), (9, 10)];
    let mut rng = Rng::new(seed);
    for (a, b) in pairs {
        let (ra, sa, ea) = regions[a];
        let (rb, sb, _) = regions[b];
        let (mut exact, mut caught) = (0, 0);
        for (pos, bit) in positions(sa, ea, SAMPLE, &mut rng) {
            let mut img = s.image.clone();
            img[pos as usize] ^= bit;
            img[(pos - sa + sb) as usize] ^= bit;
            match judge(&s, img) {
                Ok(Outcome::Exact) => exact += 1,
                Ok(Outcome::Caught) => caught += 1,
                Ok(Outcome::Wrong) => {
                    failures.push(format!("{ra}+{rb}: flip {bit:#x} at {pos:#x}: wrong data"))
                }
                Err(why) => failures.push(format!("{ra}+{rb}: flip {bit:#x} at {pos:#x}: {why}")),
            }
        }
        println!("{ra} + {rb}: exact {exact} caught {caught}");
        assert!(caught > 0, "{ra}+{rb}: nothing caught (seed {seed})");
    }
    assert!(
        failures.is_empty(),
        "seed {seed}: {} broken promises, first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(12)]
    );
}

const MAPPED_CHILD_ENV: &str = "PMO_FLIP_MAPPED_CHILD";

/// Child half of [`data_page_flips_through_mapped_loads`]: for each flip of `flips.txt` from
/// index `PMO_FLIP_START` on, write the base image with that flip to a pool file, attach `d`
/// and load every byte through the mapping. Prints `flip i start`, then `flip i exact`,
/// `flip i wrong` or `flip i caught: <error>`; a load of a damaged page ends the process
/// with SIGBUS (the parent restarts it after that flip).
#[test]
fn mapped_child_main() {
    let Ok(dir) = std::env::var(MAPPED_CHILD_ENV) else {
        return; // only runs as the child
    };
    use std::io::Write;
    let dir = std::path::Path::new(&dir);
    let base = std::fs::read(dir.join("base.img")).unwrap();
    let expected = std::fs::read(dir.join("expected.bin")).unwrap();
    let flips: Vec<(usize, u8)> = std::fs::read_to_string(dir.join("flips.txt"))
        .unwrap()
        .lines()
        .map(|l| {
            let (p, b) = l.split_once(' ').unwrap();
            (p.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    let start: usize = std::env::var("PMO_FLIP_START").unwrap().parse().unwrap();
    let path = dir.join("flipped.pool");
    let mut out = std::io::stdout().lock();
    for (i, &(pos, bit)) in flips.iter().enumerate().skip(start) {
        let mut img = base.clone();
        img[pos] ^= bit;
        std::fs::write(&path, &img).unwrap();
        writeln!(out, "flip {i} start").unwrap();
        out.flush().unwrap();
        let r = Pool::open(&path).and_then(|pool| {
            let a = pool.attach("d", Perm::Read, KEY)?;
            let mut got = vec![0u8; expected.len()];
            // SAFETY: inside the read-only mapping of `d` (its size is `expected.len()`); a
            // page that fails its check ends the process with SIGBUS, the outcome under test.
            unsafe { std::ptr::copy_nonoverlapping(a.addr(), got.as_mut_ptr(), got.len()) };
            Ok(got)
        });
        match r {
            Ok(got) if got == expected => writeln!(out, "flip {i} exact").unwrap(),
            Ok(_) => writeln!(out, "flip {i} wrong").unwrap(),
            Err(e) if e.is_integrity() => writeln!(out, "flip {i} caught: {e}").unwrap(),
            Err(e) => writeln!(out, "flip {i} error: {e}").unwrap(),
        }
        out.flush().unwrap();
    }
    writeln!(out, "child done").unwrap();
}

/// The data-page sweep through mapped loads: for every scheme with integrity and every
/// placement, one flipped bit in a page of `d` that the page map names (data or zeros), then `d` is attached read-only and every
/// byte loaded through the mapping (in a child process). The outcome is the exact data, an
/// integrity error from attach, or SIGBUS with the one-line report naming the PMO and page;
/// never wrong data. Schemes without integrity are listed and skipped (their loads return
/// whatever the flipped slot decrypts to, as documented). CI: 12 seeded flips per scheme;
/// `PMO_FLIP_ALL=1`: one flip in every byte of every live page.
#[test]
fn data_page_flips_through_mapped_loads() {
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    let seed = seed();
    let dir = std::env::temp_dir().join(format!("pmo-flips-mapped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut failures = Vec::new();
    let mut without = Vec::new();
    for scheme in Scheme::all_placements() {
        if scheme.integrity_at() == pmo_store::scheme::IntegrityAt::Never {
            without.push(scheme.to_string());
            continue;
        }
        let s = sample(scheme);
        let layout = PmoLayout::with_plain(
            PAGES,
            scheme.tag_bytes() as u64,
            scheme.shadow == pmo_store::Shadow::Medium,
        )
        .expect("layout");
        // The slots the page map names (a flip elsewhere changes nothing anyone reads).
        let live: Vec<u64> = (0..PAGES)
            .filter_map(|p| {
                let at = (s.d.extent_off + layout.map_entry(p)) as usize;
                let e = PageMapEntry(u64::from_le_bytes(s.image[at..at + 8].try_into().unwrap()));
                match e.loc() {
                    Some(PageLoc::Slot(slot)) => Some(s.d.extent_off + layout.page(slot, p)),
                    _ => None,
                }
            })
            .collect();
        let mut rng = Rng::new(seed ^ u64::from(scheme.code()) ^ 0x3a9);
        let flips: Vec<(u64, u8)> = if flip_all() {
            live.iter()
                .flat_map(|&at| (at..at + 4096).map(|p| (p, 1u8 << (p % 8))))
                .collect()
        } else {
            (0..12)
                .map(|_| {
                    let at = live[(rng.next() % live.len() as u64) as usize];
                    (at + rng.next() % 4096, 1u8 << (rng.next() % 8))
                })
                .collect()
        };
        std::fs::write(dir.join("base.img"), &s.image).unwrap();
        std::fs::write(dir.join("expected.bin"), &s.expected).unwrap();
        let list: String = flips.iter().map(|(p, b)| format!("{p} {b}\n")).collect();
        std::fs::write(dir.join("flips.txt"), list).unwrap();
        let (mut exact, mut caught, mut sigbus) = (0, 0, 0);
        let mut next = 0;
        while next < flips.len() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "mapped_child_main",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(MAPPED_CHILD_ENV, &dir)
                .env("PMO_FLIP_START", next.to_string())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let mut started = None;
            for line in out.stdout.lines().map_while(Result::ok) {
                // (The harness's "test mapped_child_main ... " may precede the first line.)
                let Some(rest) = line.find("flip ").map(|at| &line[at + 5..]) else {
                    continue;
                };
                let (i, what) = rest.split_once(' ').unwrap();
                let i: usize = i.parse().unwrap();
                let (pos, bit) = flips[i];
                match what {
                    "start" => started = Some(i),
                    "exact" => exact += 1,
                    w if w.starts_with("caught") => caught += 1,
                    w => failures.push(format!("{scheme}: flip {bit:#x} at {pos:#x}: {w}")),
                }
            }
            if out.status.success() {
                break;
            }
            let Some(i) = started else {
                panic!(
                    "{scheme}: the child failed before any flip: {stderr}\n{}",
                    String::from_utf8_lossy(&out.stdout)
                );
            };
            let (pos, bit) = flips[i];
            // The load that died must have died of SIGBUS with its one-line report.
            if out.status.signal() == Some(libc::SIGBUS)
                && stderr.contains("integrity error in PMO 'd' page ")
                && stderr.lines().filter(|l| l.starts_with("pmo: ")).count() == 1
            {
                sigbus += 1;
            } else {
                failures.push(format!(
                    "{scheme}: flip {bit:#x} at {pos:#x}: the child ended with {:?}, stderr: {stderr}",
                    out.status
                ));
            }
            next = i + 1;
        }
        println!(
            "{:<14} exact {exact:>4} caught at attach {caught:>4} SIGBUS {sigbus:>4}",
            scheme.to_string()
        );
        // Every flip lands in a page the map names: none may read as the exact data.
        assert_eq!(
            exact, 0,
            "{scheme}: a flip in a live page read as the exact data (seed {seed})"
        );
    }
    println!("without integrity (not swept): {}", without.join(", "));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "seed {seed}: {} broken promises, first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
}

/// A page-map entry whose 16-bit check field was zeroed still reads under its 4-bit check (the
/// form of an entry from before format version 4), and `pmo check` reports it as damage.
#[test]
fn a_zeroed_wide_check_is_reported_by_check() {
    let s = sample(Scheme::NONE);
    let layout = PmoLayout::new(PAGES, 0).expect("layout");
    // Page 8: written by the first psync only (the open's replay of the newest journal does
    // not rewrite it).
    let at = (s.d.extent_off + layout.map_entry(8)) as usize;
    let mut img = s.image.clone();
    let e = u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
    assert!(PageMapEntry(e).has_wide_check());
    img[at..at + 8].copy_from_slice(&(e & !PageMapEntry::WIDE_BITS).to_le_bytes());
    assert_eq!(judge(&s, img.clone()), Ok(Outcome::Exact));
    let pool = Pool::open_on(Arc::new(CrashMedium::from_image(img))).unwrap();
    let problems = pool.check().unwrap().problems;
    assert!(
        problems
            .iter()
            .any(|p| p.contains("1 page-map entries lack their 16-bit check")),
        "{problems:?}"
    );
}
