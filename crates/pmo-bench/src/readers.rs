//! Readers beside a writer (issue 27, `docs/readers.md`), part of `pmo bench store`:
//! - the writer's psync of 4 scattered pages with 0, 1 and 8 readers attached, readers that
//!   hold their snapshot (`held`: after the first psyncs nothing more to keep) and readers
//!   that refresh every second psync (`refreshing`: the psyncs timed each keep 4 versions);
//! - a reader's refresh after k changed pages (k = 0, 1, 16, 256), with the refill of those
//!   pages on their next touch, per changed page;
//! - reading the whole PMO through a reader's view and through the writer's own view, pages
//!   decrypted in both.
//!
//! All in one process on one pool (readers are page-level handles for the psync figures and a
//! relocated mapping for the others): the same scheme as the rest of `pmo bench store`
//! (`PMO_SCHEME`, default `none`), and `secure` beside it.

use std::time::Instant;

use pmo_store::{AttachOptions, Perm};

use crate::{median, BenchError, Records, TempPool};

const KEY: &[u8] = b"bench-key";
const PAGE: usize = 4096;
const MIB: u64 = 1 << 20;

/// The readers figures into `records` (bench `store`, metric names `readers_*`).
pub fn run(
    dir: &std::path::Path,
    repeats: usize,
    schemes: &[pmo_store::Scheme],
    records: &mut Records,
) -> Result<(), BenchError> {
    for &scheme in schemes {
        let tp = TempPool::new(dir, "readers", 64 * MIB, scheme)?;
        let size = 16 * MIB;
        let npages = (size / PAGE as u64) as usize;
        tp.pool.pcreate("r", size, KEY)?;
        let w = tp.pool.attach("r", Perm::Write, KEY)?;
        let mut stamp = 0u64;
        // Every page written once, so that every version a reader pins is in a slot.
        w.write_at(0, &vec![1u8; size as usize])?;
        w.psync()?;
        let scheme_name = scheme.name();
        // Psync of 4 scattered pages beside 0, 1, 8 readers; last, beside none but with the
        // readers' pin table kept by the pool handle for its next reader (`pmo_pins::at`):
        // the writer tracks into it although nothing is pinned.
        let modes = [
            (0, "held"),
            (1, "held"),
            (8, "held"),
            (1, "refreshing"),
            (8, "refreshing"),
            (0, "kept"),
        ];
        for (n, mode) in modes {
            let refreshing = mode == "refreshing";
            if mode == "kept" && tp.pool.kept.is_empty() {
                return Err(BenchError::Other(
                    "no pin table kept after the readers".into(),
                ));
            }
            let readers: Vec<_> = (0..n)
                .map(|_| tp.pool.open_pmo("r", Perm::Read, KEY, None))
                .collect::<Result<_, _>>()?;
            let mut samples = Vec::with_capacity(repeats);
            for r in 0..=2 * repeats + 3 {
                stamp += 1;
                for i in 0..4 {
                    w.write_at(i * (npages / 4) * PAGE + 64, &stamp.to_le_bytes())?;
                }
                // A psync overwrites the slot a pin reads only as the second psync of the page
                // after the pin: readers that refresh every second psync make every psync
                // they do not refresh before keep 4 versions.
                let keeps = refreshing && r % 2 == 1;
                if refreshing && !keeps {
                    for h in &readers {
                        h.refresh()?;
                        h.refreshed();
                    }
                }
                let t = Instant::now();
                w.psync()?;
                // Held readers: the first psyncs after they attached keep versions once.
                if r > 2 && (keeps || !refreshing) {
                    samples.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            let params = [
                ("scheme", scheme_name.clone()),
                ("readers", n.to_string()),
                ("readers_mode", mode.to_string()),
            ];
            records.push(
                "store",
                &params,
                "readers_psync4_us",
                median(&samples),
                "us",
                samples.len(),
            );
        }
        // A mapped reader: refresh after k changed pages, and the refill of those pages.
        let reader = tp.pool.attach_with(
            "r",
            Perm::Read,
            KEY,
            AttachOptions {
                relocate: true,
                ..Default::default()
            },
        )?;
        let mut buf = vec![0u8; size as usize];
        reader.read_at(0, &mut buf)?;
        for k in [0usize, 1, 16, 256] {
            let (mut refresh, mut refill) = (Vec::new(), Vec::new());
            for r in 0..=repeats {
                stamp += 1;
                for i in 0..k {
                    w.write_at(i * (npages / k.max(1)) * PAGE + 128, &stamp.to_le_bytes())?;
                }
                if k > 0 {
                    w.psync()?;
                }
                let t = Instant::now();
                reader.refresh()?;
                let t1 = Instant::now();
                let mut b = [0u8; 8];
                for i in 0..k {
                    reader.read_at(i * (npages / k.max(1)) * PAGE + 128, &mut b)?;
                    if u64::from_le_bytes(b) != stamp {
                        return Err(BenchError::Other(format!(
                            "a refreshed reader read {} instead of {stamp}",
                            u64::from_le_bytes(b)
                        )));
                    }
                }
                let t2 = Instant::now();
                if r > 0 {
                    refresh.push((t1 - t).as_secs_f64() * 1e6);
                    refill.push((t2 - t1).as_secs_f64() * 1e6);
                }
            }
            let params = [
                ("scheme", scheme_name.clone()),
                ("changed_pages", k.to_string()),
                ("pmo_size", "16MiB".to_string()),
            ];
            let total: Vec<f64> = refresh.iter().zip(&refill).map(|(a, b)| a + b).collect();
            records.push(
                "store",
                &params,
                "readers_refresh_us",
                median(&refresh),
                "us",
                refresh.len(),
            );
            records.push(
                "store",
                &params,
                "readers_refresh_refill_us",
                median(&total),
                "us",
                total.len(),
            );
        }
        // Reads through the reader's view and through the writer's, pages decrypted in both.
        reader.read_at(0, &mut buf)?;
        w.read_at(0, &mut buf)?;
        for (who, a) in [("reader", &reader), ("writer", &w)] {
            let mut samples = Vec::new();
            for _ in 0..=repeats {
                let t = Instant::now();
                a.read_at(0, &mut buf)?;
                samples.push(size as f64 / t.elapsed().as_secs_f64() / 1e9);
            }
            let params = [("scheme", scheme_name.clone()), ("view", who.to_string())];
            records.push(
                "store",
                &params,
                "readers_read_gb_s",
                median(&samples),
                "GB/s",
                samples.len(),
            );
        }
        drop(reader);
        drop(w);
    }
    Ok(())
}

/// The readers part of `pmo bench store`'s table.
pub fn table(records: &Records, out: &mut String) {
    use std::fmt::Write as _;
    let schemes = records.param_values("readers_psync4_us", "scheme");
    for s in schemes {
        let f = |m: &str, p: &[(&str, &str)]| {
            let mut key = vec![("scheme", s.as_str())];
            key.extend_from_slice(p);
            records.find(m, &key).unwrap_or(f64::NAN)
        };
        let none = f(
            "readers_psync4_us",
            &[("readers", "0"), ("readers_mode", "held")],
        );
        _ = writeln!(
            out,
            "readers beside a writer, {s} (medians, µs; ratio to no reader):"
        );
        _ = write!(out, "  psync of 4 pages: 0 readers {none:.2}");
        for (n, mode) in [
            ("1", "held"),
            ("8", "held"),
            ("1", "refreshing"),
            ("8", "refreshing"),
            ("0", "kept"),
        ] {
            let v = f(
                "readers_psync4_us",
                &[("readers", n), ("readers_mode", mode)],
            );
            _ = write!(out, "; {n} {mode} {v:.2} ({:.2}x)", v / none);
        }
        _ = writeln!(out);
        _ = write!(out, "  refresh + refill after k changed pages of 16 MiB:");
        for k in ["0", "1", "16", "256"] {
            let r = f("readers_refresh_us", &[("changed_pages", k)]);
            let t = f("readers_refresh_refill_us", &[("changed_pages", k)]);
            let n = k.parse::<f64>().unwrap_or(1.0);
            if k == "0" {
                _ = write!(out, " k=0: {r:.2} + refill = {t:.2};");
            } else {
                _ = write!(
                    out,
                    " k={k}: {r:.2} ({:.2}/page) + refill = {t:.2} ({:.2}/page);",
                    r / n,
                    t / n
                );
            }
        }
        _ = writeln!(out);
        let (rd, wr) = (
            f("readers_read_gb_s", &[("view", "reader")]),
            f("readers_read_gb_s", &[("view", "writer")]),
        );
        _ = writeln!(
            out,
            "  reading 16 MiB decrypted: reader's view {rd:.2} GB/s, writer's {wr:.2} GB/s ({:.2}x)",
            wr / rd
        );
    }
}
