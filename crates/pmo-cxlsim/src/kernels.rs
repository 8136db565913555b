//! Workload generators: seven parallel kernels written here, analogues of the paper's Splash-4
//! set (they are NOT Splash-4), each made crash consistent by loop checkpointing.
//!
//! Owns the kernels and [`generate`]. Each kernel computes for real on a [`Recorder`] region (so
//! its access pattern is the one the algorithm makes) and follows the loop-checkpoint recipe of
//! Elnawawy et al. (paper ref. \[26\]): at the end of each outer-loop iteration a thread flushes
//! every line it wrote in that iteration plus its loop-index line, then fences. Threads are
//! logical: the generator interleaves them deterministically, and the traces carry no barriers
//! (each thread's trace is its own program order; see docs/cxlsim.md).
//!
//! Invariant: every generated trace is deterministic for (name, threads, size).

use crate::error::{CxlsimError, Result};
use crate::trace::{Recorder, Trace};

/// Base address of every kernel's persistent region.
pub const REGION_BASE: u64 = 0x1000_0000;

/// Names accepted by [`generate`], in study order.
pub const WORKLOADS: [&str; 7] = [
    "fft",
    "lu-cont",
    "lu-noncont",
    "cholesky",
    "radix",
    "ocean",
    "raytrace",
];

/// Problem sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// Seconds-long tests (a few thousand persists).
    Small,
    /// The `--quick` study.
    Quick,
    /// The default study (inputs near the paper's Table II where it gives them).
    Full,
}

impl Size {
    fn pick<T>(self, small: T, quick: T, full: T) -> T {
        match self {
            Size::Small => small,
            Size::Quick => quick,
            Size::Full => full,
        }
    }
}

/// Upper bound on logged operations per trace (bounds memory: 16 B per op).
pub const OP_LIMIT: usize = 8_000_000;

/// Generate a workload trace.
pub fn generate(name: &str, threads: usize, size: Size) -> Result<Trace> {
    if threads == 0 || threads > 64 {
        return Err(CxlsimError::param(
            "threads",
            "kernels run with 1..=64 threads",
        ));
    }
    let trace = match name {
        "fft" => fft(threads, size.pick(8, 11, 12)),
        "lu-cont" => lu(threads, size.pick(32, 64, 128), true),
        "lu-noncont" => lu(threads, size.pick(32, 64, 128), false),
        "cholesky" => cholesky(threads, size.pick(32, 96, 160)),
        "radix" => radix(threads, size.pick(2048, 16384, 65536)),
        "ocean" => ocean(threads, size.pick(34, 98, 130), size.pick(3, 6, 10)),
        "raytrace" => raytrace(threads, size.pick(16, 48, 96)),
        other => return Err(CxlsimError::UnknownWorkload(other.to_string())),
    }?;
    Ok(trace)
}

/// A recorder plus what each thread wrote since its last checkpoint.
struct Kernel {
    rec: Recorder,
    written: Vec<Vec<usize>>,
    index_word: usize,
}

impl Kernel {
    /// `data_words` of data followed by one loop-index line per thread.
    fn new(name: &str, threads: usize, data_words: usize) -> Result<Kernel> {
        let index_word = data_words.div_ceil(8) * 8;
        let rec = Recorder::new(
            name,
            REGION_BASE,
            index_word + 8 * threads,
            threads,
            OP_LIMIT,
        )?;
        Ok(Kernel {
            rec,
            written: vec![Vec::new(); threads],
            index_word,
        })
    }
    fn rd(&mut self, t: usize, w: usize) -> u64 {
        self.rec.read(t, w)
    }
    fn rdf(&mut self, t: usize, w: usize) -> f64 {
        self.rec.read_f64(t, w)
    }
    fn wr(&mut self, t: usize, w: usize, v: u64) {
        self.rec.write(t, w, v);
        self.written[t].push(w);
    }
    fn wrf(&mut self, t: usize, w: usize, v: f64) {
        self.wr(t, w, v.to_bits());
    }
    fn work(&mut self, t: usize, cycles: u64) {
        self.rec.compute(t, cycles);
    }
    /// Loop checkpoint: persist the lines written this iteration and the loop index, then fence.
    fn checkpoint(&mut self, t: usize, iteration: u64) {
        let idx = self.index_word + 8 * t;
        self.rec.write(t, idx, iteration);
        let mut lines: Vec<usize> = self.written[t].drain(..).map(|w| w / 8).collect();
        lines.push(idx / 8);
        lines.sort_unstable();
        lines.dedup();
        for line in lines {
            self.rec.flush(t, line * 8);
        }
        self.rec.fence(t);
    }
    /// Initialise data words without logging (the input is in PM before the region of interest).
    fn init(&mut self, w: usize, v: u64) {
        self.rec.write_unlogged(w, v);
    }
    /// The trace, or an error if the op limit cut it short (a partial kernel would measure
    /// something else).
    fn finish(self) -> Result<Trace> {
        if self.rec.truncated() {
            return Err(CxlsimError::Overflow {
                name: "kernel trace operations",
                capacity: OP_LIMIT,
            });
        }
        Ok(self.rec.finish())
    }
}

fn chunk(total: usize, threads: usize, t: usize) -> std::ops::Range<usize> {
    let per = total.div_ceil(threads);
    (t * per).min(total)..((t + 1) * per).min(total)
}

/// Deterministic pseudo-random numbers (SplitMix64).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Radix-2 in-place FFT of 2^m complex points (re, im interleaved); butterflies of each stage
/// split across threads; checkpoint per thread per stage.
fn fft(threads: usize, m: u32) -> Result<Trace> {
    let n = 1usize << m;
    let mut k = Kernel::new("fft", threads, 2 * n)?;
    for i in 0..n {
        k.init(2 * i, ((i % 7) as f64).to_bits());
        k.init(2 * i + 1, 0f64.to_bits());
    }
    // Bit reversal permutation, split by index.
    for t in 0..threads {
        for i in chunk(n, threads, t) {
            let j = i.reverse_bits() >> (usize::BITS - m);
            if i < j {
                for part in 0..2 {
                    let a = k.rd(t, 2 * i + part);
                    let b = k.rd(t, 2 * j + part);
                    k.wr(t, 2 * i + part, b);
                    k.wr(t, 2 * j + part, a);
                }
            }
        }
        k.checkpoint(t, 0);
    }
    let mut len = 2;
    let mut stage = 1;
    while len <= n {
        let half = len / 2;
        let angle = -2.0 * std::f64::consts::PI / len as f64;
        for t in 0..threads {
            for b in chunk(n / 2, threads, t) {
                let group = b / half;
                let j = b % half;
                let i0 = group * len + j;
                let i1 = i0 + half;
                let (wr, wi) = ((angle * j as f64).cos(), (angle * j as f64).sin());
                let (ar, ai) = (k.rdf(t, 2 * i0), k.rdf(t, 2 * i0 + 1));
                let (br, bi) = (k.rdf(t, 2 * i1), k.rdf(t, 2 * i1 + 1));
                let (tr, ti) = (br * wr - bi * wi, br * wi + bi * wr);
                k.work(t, 10);
                k.wrf(t, 2 * i0, ar + tr);
                k.wrf(t, 2 * i0 + 1, ai + ti);
                k.wrf(t, 2 * i1, ar - tr);
                k.wrf(t, 2 * i1 + 1, ai - ti);
            }
            k.checkpoint(t, stage);
        }
        len *= 2;
        stage += 1;
    }
    k.finish()
}

/// Blocked right-looking LU without pivoting (diagonally dominant input), 8x8 blocks, block
/// (I, J) owned by thread (I + J * nb) % threads. `contiguous`: blocks stored block-major (each
/// block 8 lines), else row-major (a block spans 8 rows of the matrix).
fn lu(threads: usize, n: usize, contiguous: bool) -> Result<Trace> {
    const B: usize = 8;
    let n = n.div_ceil(B) * B;
    let nb = n / B;
    let at = |i: usize, j: usize| -> usize {
        if contiguous {
            ((i / B) * nb + j / B) * B * B + (i % B) * B + j % B
        } else {
            i * n + j
        }
    };
    let name = if contiguous { "lu-cont" } else { "lu-noncont" };
    let mut k = Kernel::new(name, threads, n * n)?;
    for i in 0..n {
        for j in 0..n {
            let v = if i == j {
                n as f64 * 2.0
            } else {
                ((mix((i * n + j) as u64) % 100) as f64) / 100.0
            };
            k.init(at(i, j), v.to_bits());
        }
    }
    let owner = |bi: usize, bj: usize| (bi + bj * nb) % threads;
    for kb in 0..nb {
        // Factor the diagonal block, then the column panel below it.
        let t = owner(kb, kb);
        for kk in kb * B..(kb + 1) * B {
            let pivot = k.rdf(t, at(kk, kk));
            for i in kk + 1..n {
                let tt = owner(i / B, kb);
                let l = k.rdf(tt, at(i, kk)) / pivot;
                k.work(tt, 4);
                k.wrf(tt, at(i, kk), l);
                for j in kk + 1..(kb + 1) * B {
                    let v = k.rdf(tt, at(i, j)) - l * k.rdf(tt, at(kk, j));
                    k.wrf(tt, at(i, j), v);
                }
            }
        }
        // Row panel to the right of the diagonal block.
        for jb in kb + 1..nb {
            let tt = owner(kb, jb);
            for kk in kb * B..(kb + 1) * B {
                for i in kk + 1..(kb + 1) * B {
                    let l = k.rdf(tt, at(i, kk));
                    for j in jb * B..(jb + 1) * B {
                        let v = k.rdf(tt, at(i, j)) - l * k.rdf(tt, at(kk, j));
                        k.work(tt, 2);
                        k.wrf(tt, at(i, j), v);
                    }
                }
            }
        }
        // Trailing update, block by block.
        for ib in kb + 1..nb {
            for jb in kb + 1..nb {
                let tt = owner(ib, jb);
                for i in ib * B..(ib + 1) * B {
                    for j in jb * B..(jb + 1) * B {
                        let mut acc = k.rdf(tt, at(i, j));
                        for kk in kb * B..(kb + 1) * B {
                            acc -= k.rdf(tt, at(i, kk)) * k.rdf(tt, at(kk, j));
                        }
                        k.work(tt, 2 * B as u64);
                        k.wrf(tt, at(i, j), acc);
                    }
                }
            }
        }
        for t in 0..threads {
            k.checkpoint(t, kb as u64 + 1);
        }
    }
    k.finish()
}

/// Left-looking column Cholesky of a dense SPD matrix (lower triangle, column-major): column j
/// reads every earlier column, so the kernel is read-heavy and writes one column per step.
/// Columns are owned round-robin; checkpoint after each column.
fn cholesky(threads: usize, n: usize) -> Result<Trace> {
    let at = |i: usize, j: usize| j * n + i;
    let mut k = Kernel::new("cholesky", threads, n * n)?;
    for j in 0..n {
        for i in j..n {
            let v = if i == j {
                n as f64 * 4.0
            } else {
                ((mix((i * n + j) as u64) % 100) as f64) / 100.0
            };
            k.init(at(i, j), v.to_bits());
        }
    }
    for j in 0..n {
        let t = j % threads;
        // Only columns within a window are read (a banded/sparse analogue), which keeps the
        // kernel read-dominated without n^3 reads.
        let window = 24.min(j);
        for i in j..n {
            let mut acc = k.rdf(t, at(i, j));
            for c in j - window..j {
                acc -= k.rdf(t, at(i, c)) * k.rdf(t, at(j, c));
            }
            k.work(t, 2 * window as u64 + 4);
            if i == j {
                k.wrf(t, at(j, j), acc.max(1e-9).sqrt());
            } else {
                let d = k.rdf(t, at(j, j));
                k.wrf(t, at(i, j), acc / d);
            }
        }
        k.checkpoint(t, j as u64 + 1);
    }
    k.finish()
}

/// LSD radix sort of 64-bit keys, 8-bit digits, two passes: per-thread histograms, then a
/// scatter into the other buffer. Checkpoint per thread after each phase.
fn radix(threads: usize, keys: usize) -> Result<Trace> {
    const RADIX: usize = 256;
    let src0 = 0;
    let dst0 = keys;
    let hist0 = 2 * keys;
    let mut k = Kernel::new("radix", threads, 2 * keys + threads * RADIX)?;
    for i in 0..keys {
        k.init(src0 + i, mix(i as u64) & 0xFFFF);
    }
    let (mut src, mut dst) = (src0, dst0);
    for pass in 0..2u64 {
        let shift = 8 * pass;
        for t in 0..threads {
            for d in 0..RADIX {
                k.wr(t, hist0 + t * RADIX + d, 0);
            }
            for i in chunk(keys, threads, t) {
                let d = ((k.rd(t, src + i) >> shift) as usize) & (RADIX - 1);
                let h = hist0 + t * RADIX + d;
                let c = k.rd(t, h);
                k.work(t, 3);
                k.wr(t, h, c + 1);
            }
            k.checkpoint(t, 2 * pass + 1);
        }
        // Global prefix (each thread reads every histogram) and scatter.
        for t in 0..threads {
            let mut offset = vec![0u64; RADIX];
            let mut running = 0;
            for (d, slot) in offset.iter_mut().enumerate() {
                for u in 0..threads {
                    let c = k.rd(t, hist0 + u * RADIX + d);
                    if u == t {
                        *slot = running;
                    }
                    running += c;
                }
            }
            for i in chunk(keys, threads, t) {
                let key = k.rd(t, src + i);
                let d = ((key >> shift) as usize) & (RADIX - 1);
                let pos = offset[d] as usize;
                offset[d] += 1;
                k.work(t, 4);
                k.wr(t, dst + pos.min(keys - 1), key);
            }
            k.checkpoint(t, 2 * pass + 2);
        }
        std::mem::swap(&mut src, &mut dst);
    }
    k.finish()
}

/// Ocean analogue: Jacobi 5-point relaxation on a g x g grid with two buffers, rows split
/// across threads; checkpoint per thread per sweep.
fn ocean(threads: usize, g: usize, sweeps: u64) -> Result<Trace> {
    let a0 = 0;
    let b0 = g * g;
    let mut k = Kernel::new("ocean", threads, 2 * g * g)?;
    for i in 0..g {
        for j in 0..g {
            let v = if i == 0 || j == 0 || i == g - 1 || j == g - 1 {
                1.0
            } else {
                0.0
            };
            k.init(a0 + i * g + j, f64::to_bits(v));
            k.init(b0 + i * g + j, f64::to_bits(v));
        }
    }
    let (mut src, mut dst) = (a0, b0);
    for sweep in 1..=sweeps {
        for t in 0..threads {
            for i in chunk(g - 2, threads, t) {
                let i = i + 1;
                for j in 1..g - 1 {
                    let s = k.rdf(t, src + (i - 1) * g + j)
                        + k.rdf(t, src + (i + 1) * g + j)
                        + k.rdf(t, src + i * g + j - 1)
                        + k.rdf(t, src + i * g + j + 1);
                    k.work(t, 6);
                    k.wrf(t, dst + i * g + j, 0.25 * s);
                }
            }
            k.checkpoint(t, sweep);
        }
        std::mem::swap(&mut src, &mut dst);
    }
    k.finish()
}

/// Ray-tracing analogue: a read-only scene of 2048 nodes (4 words each) walked along a
/// pseudo-random path per pixel (16 nodes), one pixel word written per pixel; pixels split by
/// rows; checkpoint per row.
fn raytrace(threads: usize, side: usize) -> Result<Trace> {
    const NODES: usize = 2048;
    const NODE_WORDS: usize = 4;
    const DEPTH: u64 = 16;
    let fb0 = NODES * NODE_WORDS;
    let mut k = Kernel::new("raytrace", threads, fb0 + side * side)?;
    for w in 0..NODES * NODE_WORDS {
        k.init(w, mix(w as u64));
    }
    for t in 0..threads {
        for row in chunk(side, threads, t) {
            for col in 0..side {
                let mut node = 0usize;
                let mut colour = 0u64;
                for depth in 0..DEPTH {
                    let key = k.rd(t, node * NODE_WORDS);
                    let child = k.rd(t, node * NODE_WORDS + 1 + (depth as usize % 3));
                    k.work(t, 12);
                    colour = colour.wrapping_add(key);
                    // Rays from neighbouring pixels share the top of the tree.
                    let spread = (1usize << depth.min(11)) as u64;
                    node = ((child ^ mix((row * side + col) as u64 / 4)) % spread) as usize % NODES;
                }
                k.wr(t, fb0 + row * side + col, colour);
            }
            k.checkpoint(t, row as u64 + 1);
        }
    }
    k.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::OpKind;

    #[test]
    fn every_workload_generates_with_checkpoints() {
        for name in WORKLOADS {
            let trace = generate(name, 4, Size::Small).unwrap();
            assert_eq!(trace.threads.len(), 4, "{name}");
            assert!(trace.count(OpKind::Flush) > 0, "{name} persists nothing");
            assert!(trace.count(OpKind::Fence) > 0, "{name} never fences");
            assert!(
                trace.count(OpKind::Load) > trace.count(OpKind::Flush),
                "{name}"
            );
            assert_eq!(
                trace,
                generate(name, 4, Size::Small).unwrap(),
                "{name} is not deterministic"
            );
        }
        assert!(generate("bogus", 4, Size::Small).is_err());
    }

    #[test]
    fn every_fence_follows_its_flushes() {
        // Loop checkpointing: the op before each fence is a flush (the index line).
        let trace = generate("ocean", 2, Size::Small).unwrap();
        for ops in &trace.threads {
            for w in ops.windows(2) {
                if w[1].kind == OpKind::Fence {
                    assert_eq!(w[0].kind, OpKind::Flush);
                }
            }
        }
    }
}
