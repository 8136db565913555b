//! A small durable update (issue 30), part of `pmo bench store`: N declared ranges of 64 bytes
//! on N different pages written and psynced, N = 1, 4, 16, in a PMO with a sub-page commit log
//! attached with declared tracking (what `pmo-typed`'s containers do), beside its floor: one log
//! record of those bytes sealed with the scheme's AEAD (a CRC under `none`), written, flushed
//! and fenced (`floors::log_record_us`), timed alone.
//!
//! The median update is a logged psync: one record and one fence. Every 16 KiB of records the
//! next psync folds them into their pages (each touched page sealed and committed whole), so
//! the mean, printed beside it, carries the folds' share. Every page's two shadow slots are
//! written once before the timing (a store in use).

use std::time::Instant;

use pmo_store::{AttachOptions, DirtyTracking, Perm};

use crate::{median, BenchError, Records, TempPool};

const KEY: &[u8] = b"bench-key";
const MIB: u64 = 1 << 20;
const PAGE: usize = 4096;
/// Bytes of each declared range.
const RANGE: usize = 64;
/// The numbers of ranges an update declares.
pub const NS: [usize; 3] = [1, 4, 16];

/// The figures into `records` (bench `store`, metrics `ranges_update_us`,
/// `ranges_update_mean_us`, `ranges_floor_us`).
pub fn run(
    dir: &std::path::Path,
    repeats: usize,
    schemes: &[pmo_store::Scheme],
    records: &mut Records,
) -> Result<(), BenchError> {
    let rounds = 200 * repeats.max(3);
    for &scheme in schemes {
        let tp = TempPool::new(dir, "ranges", 64 * MIB, scheme)?;
        let size = 16 * MIB;
        let npages = size as usize / PAGE;
        tp.pool.pcreate_logged("r", size, KEY, None)?;
        let a = tp.pool.attach_with(
            "r",
            Perm::Write,
            KEY,
            AttachOptions {
                tracking: Some(DirtyTracking::Declared),
                ..Default::default()
            },
        )?;
        // Every page written and psynced twice first: both shadow slots of every page have
        // been written once, as in a store in use, so the folds time no first touch of a
        // pool-file page (on tmpfs an allocation, which persistent memory does not have), and
        // every page of the view is filled.
        let mut buf = vec![0u8; size as usize];
        for fill in [1u8, 2] {
            buf.fill(fill);
            a.write_at(0, &buf)?;
            a.psync()?;
        }
        let mut stamp = 0u64;
        for n in NS {
            let mut samples = Vec::with_capacity(rounds);
            for round in 0..rounds + 20 {
                stamp += 1;
                let bytes = [stamp as u8; RANGE];
                // N pages spread over the PMO, a different place in each every round.
                let ranges: Vec<(usize, usize)> = (0..n)
                    .map(|i| {
                        let page = (round * 7919 + i * (npages / n)) % npages;
                        let at = (round * RANGE + i * 2 * RANGE) % (PAGE - RANGE);
                        (page * PAGE + at / RANGE * RANGE, RANGE)
                    })
                    .collect();
                let t = Instant::now();
                // `write_at` declares the range it writes (a container declares, then stores).
                for &(off, len) in &ranges {
                    a.write_at(off, &bytes[..len])?;
                }
                a.psync()?;
                if round >= 20 {
                    samples.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            let body = n * (pmo_format::sublog::CHANGE_HEAD + RANGE);
            let floor = crate::floors::log_record_us(dir, body, scheme.is_protected())?;
            let params = [
                ("scheme", scheme.name()),
                ("ranges", n.to_string()),
                ("range_bytes", RANGE.to_string()),
            ];
            let mean = samples.iter().sum::<f64>() / samples.len() as f64;
            records.push(
                "store",
                &params,
                "ranges_update_us",
                median(&samples),
                "us",
                samples.len(),
            );
            records.push(
                "store",
                &params,
                "ranges_update_mean_us",
                mean,
                "us",
                samples.len(),
            );
            records.push("store", &params, "ranges_floor_us", floor, "us", 9);
        }
    }
    Ok(())
}

/// This part of `pmo bench store`'s table.
pub fn table(records: &Records, out: &mut String) {
    use std::fmt::Write as _;
    let schemes = records.param_values("ranges_update_us", "scheme");
    if schemes.is_empty() {
        return;
    }
    _ = writeln!(
        out,
        "update of N declared {RANGE}-byte ranges + psync, sub-page log (µs; floor: the record sealed, written, fenced):"
    );
    for s in schemes {
        _ = write!(out, "  {s:>8}:");
        for n in NS {
            let n = n.to_string();
            let f = |m: &str| {
                records
                    .find(m, &[("scheme", s.as_str()), ("ranges", n.as_str())])
                    .unwrap_or(f64::NAN)
            };
            let (med, mean, floor) = (
                f("ranges_update_us"),
                f("ranges_update_mean_us"),
                f("ranges_floor_us"),
            );
            _ = write!(
                out,
                " N={n}: median {med:.2} ({:.2}x floor {floor:.2}), mean {mean:.2};",
                med / floor
            );
        }
        _ = writeln!(out);
    }
}
