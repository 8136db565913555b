//! The five kernels, written once over a plain `&mut [f64]` so that the same code computes on
//! PMO memory (the run) and on a `Vec` in DRAM (the reference).
//!
//! Owns [`Workload`], [`Dims`], [`Size`] and each kernel's memory layout, input generator,
//! critical-loop iteration ("step") and work model.
//!
//! | workload | memory (f64, row-major) | step `s` of the critical loop | steps |
//! |---|---|---|---|
//! | `2dconv` | grid 0, grid 1 (`n x n` each) | one 3x3 stencil sweep from grid `s % 2` into the other | `m` |
//! | `gauss` | augmented `[A b]` (`n x (n+1)`), then `x` (`n`) | eliminate column `s` below the diagonal; the last step back-substitutes `x` | `n` |
//! | `lu` | `A` (`n x n`), overwritten by `L\U` | Doolittle: row `s` of `U`, then column `s` of `L` | `n` |
//! | `tmm` | `A`, `B`, `C` (`n x n` each) | `C[band] += A[band] x B` for one band of `tile` rows, tile by tile | `n / tile` (rounded up) |
//! | `cholesky` | `A` (`n x n`, SPD), lower triangle overwritten by `L` | column `s` of `L` | `n` |
//!
//! Invariants:
//! - Every element is computed by one thread with the same operations in the same order
//!   whatever the thread count, so results are bit-identical across thread splits and between
//!   PMO and DRAM runs (no tolerance is needed; verification compares bits).
//! - Inputs are deterministic functions of the dimensions (a fixed-seed SplitMix64): no pivoting
//!   is needed (`gauss`, `lu`: strictly diagonally dominant; `cholesky`: symmetric strictly
//!   diagonally dominant with a positive diagonal, hence SPD), and values stay in ranges that
//!   never reach subnormals (the stencil's weights sum to 1).

use std::fmt;

use crate::error::{invalid, Result};
use crate::par::par_units;

/// The benchmark kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Workload {
    /// 3x3 stencil sweeps, ping-pong between two grids.
    Conv2d,
    /// Gaussian elimination of a diagonally dominant system, then back substitution.
    Gauss,
    /// Doolittle LU decomposition in place.
    Lu,
    /// Tiled matrix multiply `C = A x B`.
    Tmm,
    /// Cholesky factorisation of a generated SPD matrix.
    Cholesky,
}

impl Workload {
    /// Every workload, in report order.
    pub const ALL: [Workload; 5] = [
        Workload::Conv2d,
        Workload::Gauss,
        Workload::Lu,
        Workload::Tmm,
        Workload::Cholesky,
    ];

    /// The name used on command lines and in records.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Conv2d => "2dconv",
            Workload::Gauss => "gauss",
            Workload::Lu => "lu",
            Workload::Tmm => "tmm",
            Workload::Cholesky => "cholesky",
        }
    }

    /// Parse a name (case-insensitive; `conv2d` is accepted for `2dconv`).
    pub fn from_name(name: &str) -> Result<Workload> {
        let n = name.trim().to_ascii_lowercase();
        if n == "conv2d" {
            return Ok(Workload::Conv2d);
        }
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == n)
            .ok_or_else(|| {
                let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
                invalid(
                    "workload",
                    format!("'{name}' (one of {})", names.join(", ")),
                )
            })
    }

    /// The dimensions of a size preset.
    pub fn dims(self, size: Size) -> Dims {
        let (n, m, tile) = match (self, size) {
            (Workload::Conv2d, Size::Tiny) => (40, 5, 0),
            (Workload::Conv2d, Size::Default) => (1536, 64, 0),
            // LOaPP Table IV: N=6144, M=104 (M read as the number of sweeps).
            (Workload::Conv2d, Size::Paper) => (6144, 104, 0),
            (Workload::Gauss, Size::Tiny) => (37, 0, 0),
            (Workload::Gauss, Size::Default) => (1536, 0, 0),
            (Workload::Gauss, Size::Paper) => (8192, 0, 0),
            (Workload::Lu, Size::Tiny) => (33, 0, 0),
            (Workload::Lu, Size::Default) => (1280, 0, 0),
            (Workload::Lu, Size::Paper) => (7168, 0, 0),
            (Workload::Tmm, Size::Tiny) => (36, 0, 8),
            (Workload::Tmm, Size::Default) => (1024, 0, 16),
            (Workload::Tmm, Size::Paper) => (4096, 0, 16),
            (Workload::Cholesky, Size::Tiny) => (35, 0, 0),
            (Workload::Cholesky, Size::Default) => (1536, 0, 0),
            // Not in Table IV: the size of the paper's Gauss.
            (Workload::Cholesky, Size::Paper) => (8192, 0, 0),
        };
        Dims { n, m, tile }
    }

    /// Check that `dims` make sense for this workload.
    pub fn validate(self, dims: Dims) -> Result<()> {
        if dims.n < 3 || dims.n > MAX_N {
            return Err(invalid("n", format!("{} (3..={MAX_N})", dims.n)));
        }
        match self {
            Workload::Conv2d if dims.m == 0 || dims.m > MAX_SWEEPS => Err(invalid(
                "m",
                format!("{} sweeps (1..={MAX_SWEEPS})", dims.m),
            )),
            Workload::Tmm if dims.tile == 0 || dims.tile > dims.n => {
                Err(invalid("tile", format!("{} (1..=n={})", dims.tile, dims.n)))
            }
            _ => Ok(()),
        }
    }

    /// Number of `f64`s the workload's memory holds.
    pub fn len_f64(self, dims: Dims) -> usize {
        let n = dims.n;
        match self {
            Workload::Conv2d => 2 * n * n,
            Workload::Gauss => n * (n + 1) + n,
            Workload::Lu | Workload::Cholesky => n * n,
            Workload::Tmm => 3 * n * n,
        }
    }

    /// Bytes of PMO the workload needs.
    pub fn len_bytes(self, dims: Dims) -> usize {
        self.len_f64(dims) * std::mem::size_of::<f64>()
    }

    /// Iterations of the critical loop.
    pub fn steps(self, dims: Dims) -> usize {
        match self {
            Workload::Conv2d => dims.m,
            Workload::Gauss | Workload::Lu | Workload::Cholesky => dims.n,
            Workload::Tmm => dims.n.div_ceil(dims.tile),
        }
    }

    /// Multiply-adds of step `step` (the work model: decides threads per step).
    pub fn step_work(self, dims: Dims, step: usize) -> usize {
        let n = dims.n;
        match self {
            Workload::Conv2d => 9 * n * n,
            Workload::Gauss => (n - step) * (n + 1 - step),
            Workload::Lu => 2 * step * (n - step) + n,
            Workload::Tmm => dims.tile.min(n - step * dims.tile) * n * n,
            Workload::Cholesky => step * (n - step) + n,
        }
    }

    /// Write the input into `mem` (`len_f64` elements).
    pub fn init(self, dims: Dims, mem: &mut [f64]) {
        debug_assert_eq!(mem.len(), self.len_f64(dims));
        let n = dims.n;
        let mut rng = SplitMix64(0x5eed_0000 ^ (n as u64) << 8 ^ self as u64);
        match self {
            Workload::Conv2d => {
                let (g0, g1) = mem.split_at_mut(n * n);
                g0.iter_mut().for_each(|x| *x = rng.unit());
                g1.fill(0.0);
            }
            Workload::Gauss => {
                let w = n + 1;
                let (aug, x) = mem.split_at_mut(n * w);
                for i in 0..n {
                    for j in 0..w {
                        aug[i * w + j] = rng.unit();
                    }
                    aug[i * w + i] += n as f64;
                }
                x.fill(0.0);
            }
            Workload::Lu => {
                for i in 0..n {
                    for j in 0..n {
                        mem[i * n + j] = rng.unit();
                    }
                    mem[i * n + i] += n as f64;
                }
            }
            Workload::Tmm => {
                let (ab, c) = mem.split_at_mut(2 * n * n);
                ab.iter_mut().for_each(|x| *x = rng.unit());
                c.fill(0.0);
            }
            Workload::Cholesky => {
                for i in 0..n {
                    for j in 0..i {
                        let v = rng.unit();
                        mem[i * n + j] = v;
                        mem[j * n + i] = v;
                    }
                    mem[i * n + i] = n as f64 + rng.unit();
                }
            }
        }
    }

    /// Run step `step` of the critical loop on `mem` with up to `threads` threads.
    pub fn step(self, dims: Dims, mem: &mut [f64], step: usize, threads: usize) {
        debug_assert_eq!(mem.len(), self.len_f64(dims));
        debug_assert!(step < self.steps(dims));
        let work = self.step_work(dims, step);
        match self {
            Workload::Conv2d => conv2d_sweep(dims.n, mem, step, threads, work),
            Workload::Gauss => gauss_step(dims.n, mem, step, threads, work),
            Workload::Lu => lu_step(dims.n, mem, step, threads, work),
            Workload::Tmm => tmm_band(dims.n, dims.tile, mem, step, threads, work),
            Workload::Cholesky => cholesky_step(dims.n, mem, step, threads, work),
        }
    }

    /// Run the whole kernel on `mem` (already initialised).
    pub fn run_all(self, dims: Dims, mem: &mut [f64], threads: usize) {
        for s in 0..self.steps(dims) {
            self.step(dims, mem, s, threads);
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Largest matrix edge accepted (a 65536^2 f64 matrix is 32 GiB).
pub const MAX_N: usize = 65536;
/// Largest number of stencil sweeps accepted.
pub const MAX_SWEEPS: usize = 1 << 20;

/// Problem dimensions: `n` the matrix edge, `m` the stencil sweeps (`2dconv` only), `tile` the
/// tile edge (`tmm` only). Unused fields are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dims {
    pub n: usize,
    pub m: usize,
    pub tile: usize,
}

impl fmt::Display for Dims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n={}", self.n)?;
        if self.m > 0 {
            write!(f, " m={}", self.m)?;
        }
        if self.tile > 0 {
            write!(f, " tile={}", self.tile)?;
        }
        Ok(())
    }
}

/// Size presets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Size {
    /// Tests: milliseconds per run.
    Tiny,
    /// The default suite: the five kernels under four schemes in about a minute here.
    Default,
    /// The LOaPP paper's Table IV sizes (f64 instead of the paper's 4-byte elements).
    Paper,
}

impl Size {
    /// Parse `tiny`, `default` or `paper`.
    pub fn from_name(name: &str) -> Result<Size> {
        match name.trim().to_ascii_lowercase().as_str() {
            "tiny" => Ok(Size::Tiny),
            "default" => Ok(Size::Default),
            "paper" => Ok(Size::Paper),
            other => Err(invalid(
                "size",
                format!("'{other}' (tiny, default or paper)"),
            )),
        }
    }
    /// The preset's name.
    pub fn name(self) -> &'static str {
        match self {
            Size::Tiny => "tiny",
            Size::Default => "default",
            Size::Paper => "paper",
        }
    }
}

/// SplitMix64: a fixed, tiny generator so inputs are the same on every run and platform.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1), 53 bits.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Stencil weights (row-major 3x3); they sum to 1 so values stay in [0, 1).
const CONV_WEIGHTS: [f64; 9] = [0.05, 0.1, 0.05, 0.1, 0.4, 0.1, 0.05, 0.1, 0.05];

/// One sweep: `dst = stencil(src)` on interior cells, boundary cells copied.
fn conv2d_sweep(n: usize, mem: &mut [f64], sweep: usize, threads: usize, work: usize) {
    let (g0, g1) = mem.split_at_mut(n * n);
    let (src, dst): (&[f64], &mut [f64]) = if sweep.is_multiple_of(2) {
        (g0, g1)
    } else {
        (g1, g0)
    };
    let w = CONV_WEIGHTS;
    par_units(dst, n, threads, work, |first_row, rows| {
        for (r, out) in rows.chunks_mut(n).enumerate() {
            let i = first_row + r;
            if i == 0 || i == n - 1 {
                out.copy_from_slice(&src[i * n..(i + 1) * n]);
                continue;
            }
            let up = &src[(i - 1) * n..i * n];
            let mid = &src[i * n..(i + 1) * n];
            let dn = &src[(i + 1) * n..(i + 2) * n];
            out[0] = mid[0];
            out[n - 1] = mid[n - 1];
            for j in 1..n - 1 {
                out[j] = w[0] * up[j - 1]
                    + w[1] * up[j]
                    + w[2] * up[j + 1]
                    + w[3] * mid[j - 1]
                    + w[4] * mid[j]
                    + w[5] * mid[j + 1]
                    + w[6] * dn[j - 1]
                    + w[7] * dn[j]
                    + w[8] * dn[j + 1];
            }
        }
    });
}

/// Step `k < n-1`: eliminate column `k` below the pivot; step `n-1`: back substitution.
fn gauss_step(n: usize, mem: &mut [f64], k: usize, threads: usize, work: usize) {
    let w = n + 1;
    let (aug, x) = mem.split_at_mut(n * w);
    if k == n - 1 {
        for i in (0..n).rev() {
            let row = &aug[i * w..(i + 1) * w];
            let mut s = row[n];
            for j in i + 1..n {
                s -= row[j] * x[j];
            }
            x[i] = s / row[i];
        }
        return;
    }
    let (top, below) = aug.split_at_mut((k + 1) * w);
    let pivot = &top[k * w..];
    par_units(below, w, threads, work, |_, rows| {
        for row in rows.chunks_mut(w) {
            let f = row[k] / pivot[k];
            row[k] = 0.0;
            for (a, p) in row[k + 1..].iter_mut().zip(&pivot[k + 1..]) {
                *a -= f * p;
            }
        }
    });
}

/// Doolittle step `i`: `U[i][j] = A[i][j] - sum_{k<i} L[i][k] U[k][j]` for `j >= i`, then
/// `L[j][i] = (A[j][i] - sum_{k<i} L[j][k] U[k][i]) / U[i][i]` for `j > i` (unit diagonal of
/// `L` implicit). Sums run in ascending `k`.
fn lu_step(n: usize, mem: &mut [f64], i: usize, threads: usize, work: usize) {
    {
        let (above, rest) = mem.split_at_mut(i * n);
        let (left, right) = rest[..n].split_at_mut(i);
        let left: &[f64] = left;
        let above: &[f64] = above;
        par_units(right, 1, threads, work / 2, |c0, cols| {
            for (k, &lik) in left.iter().enumerate() {
                let u = &above[k * n + i + c0..k * n + i + c0 + cols.len()];
                for (a, &ukj) in cols.iter_mut().zip(u) {
                    *a -= lik * ukj;
                }
            }
        });
    }
    let (top, below) = mem.split_at_mut((i + 1) * n);
    let top: &[f64] = top;
    let uii = top[i * n + i];
    par_units(below, n, threads, work / 2, |_, rows| {
        for row in rows.chunks_mut(n) {
            let mut s = row[i];
            for k in 0..i {
                s -= row[k] * top[k * n + i];
            }
            row[i] = s / uii;
        }
    });
}

/// Band `b`: rows `b*tile ..` of `C` get `A[rows] x B`, in `tile x tile` blocks (k blocks
/// outermost, then j blocks), so each `C[i][j]` sums in ascending `k`.
fn tmm_band(n: usize, tile: usize, mem: &mut [f64], band: usize, threads: usize, work: usize) {
    let (ab, c) = mem.split_at_mut(2 * n * n);
    let (a, b) = ab.split_at(n * n);
    let r0 = band * tile;
    let r1 = (r0 + tile).min(n);
    par_units(&mut c[r0 * n..r1 * n], n, threads, work, |first, rows| {
        for kk in (0..n).step_by(tile) {
            let k1 = (kk + tile).min(n);
            for jj in (0..n).step_by(tile) {
                let j1 = (jj + tile).min(n);
                for (r, crow) in rows.chunks_mut(n).enumerate() {
                    let i = r0 + first + r;
                    let arow = &a[i * n..(i + 1) * n];
                    let cblk = &mut crow[jj..j1];
                    for k in kk..k1 {
                        let aik = arow[k];
                        for (cij, bkj) in cblk.iter_mut().zip(&b[k * n + jj..k * n + j1]) {
                            *cij += aik * bkj;
                        }
                    }
                }
            }
        }
    });
}

/// Cholesky-Crout step `j`: `L[j][j] = sqrt(A[j][j] - sum_k L[j][k]^2)`, then
/// `L[i][j] = (A[i][j] - sum_k L[i][k] L[j][k]) / L[j][j]` for `i > j`; `k < j` ascending.
/// The strict upper triangle keeps the input.
fn cholesky_step(n: usize, mem: &mut [f64], j: usize, threads: usize, work: usize) {
    let (top, below) = mem.split_at_mut((j + 1) * n);
    {
        let row = &mut top[j * n..];
        let mut s = row[j];
        for &ljk in &row[..j] {
            s -= ljk * ljk;
        }
        row[j] = s.sqrt();
    }
    let top: &[f64] = top;
    let lj = &top[j * n..j * n + j + 1];
    par_units(below, n, threads, work, |_, rows| {
        for row in rows.chunks_mut(n) {
            let mut s = row[j];
            for k in 0..j {
                s -= row[k] * lj[k];
            }
            row[j] = s / lj[j];
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(w: Workload, dims: Dims, threads: usize) -> (Vec<f64>, Vec<f64>) {
        let mut mem = vec![0.0; w.len_f64(dims)];
        w.init(dims, &mut mem);
        let input = mem.clone();
        w.run_all(dims, &mut mem, threads);
        (input, mem)
    }

    fn tiny(w: Workload) -> Dims {
        w.dims(Size::Tiny)
    }

    /// Max |x - y| relative to the largest |y|.
    fn close(x: &[f64], y: &[f64], rel: f64) {
        let scale = y.iter().fold(1e-300f64, |m, v| m.max(v.abs()));
        for (i, (a, b)) in x.iter().zip(y).enumerate() {
            assert!((a - b).abs() <= rel * scale, "element {i}: {a} vs {b}");
        }
    }

    #[test]
    fn results_are_bit_identical_for_every_thread_count() {
        for w in Workload::ALL {
            let dims = tiny(w);
            let (_, one) = run(w, dims, 1);
            for threads in [2, 3, 4] {
                let mut mem = vec![0.0; w.len_f64(dims)];
                w.init(dims, &mut mem);
                w.run_all(dims, &mut mem, threads);
                let same = one
                    .iter()
                    .zip(&mem)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{w} with {threads} threads");
            }
        }
    }

    #[test]
    fn split_steps_match_unsplit_ones() {
        // Drive each kernel's threaded path on small inputs by calling the step functions
        // with a work estimate above the spawn threshold.
        for w in Workload::ALL {
            let dims = tiny(w);
            let mut a = vec![0.0; w.len_f64(dims)];
            w.init(dims, &mut a);
            let mut b = a.clone();
            for s in 0..w.steps(dims) {
                w.step(dims, &mut a, s, 1);
                let big = usize::MAX / 2;
                match w {
                    Workload::Conv2d => conv2d_sweep(dims.n, &mut b, s, 3, big),
                    Workload::Gauss => gauss_step(dims.n, &mut b, s, 3, big),
                    Workload::Tmm => tmm_band(dims.n, dims.tile, &mut b, s, 3, big),
                    Workload::Cholesky => cholesky_step(dims.n, &mut b, s, 3, big),
                    Workload::Lu => lu_step(dims.n, &mut b, s, 3, big),
                }
            }
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{w}"
            );
        }
    }

    #[test]
    fn conv2d_matches_a_direct_stencil() {
        let dims = Dims {
            n: 12,
            m: 3,
            tile: 0,
        };
        let (input, out) = run(Workload::Conv2d, dims, 1);
        let n = dims.n;
        let mut g = input[..n * n].to_vec();
        for _ in 0..dims.m {
            let mut h = g.clone();
            for i in 1..n - 1 {
                for j in 1..n - 1 {
                    let mut s = 0.0;
                    for di in 0..3 {
                        for dj in 0..3 {
                            s += CONV_WEIGHTS[di * 3 + dj] * g[(i + di - 1) * n + j + dj - 1];
                        }
                    }
                    h[i * n + j] = s;
                }
            }
            g = h;
        }
        let last = if dims.m % 2 == 1 {
            &out[n * n..]
        } else {
            &out[..n * n]
        };
        close(last, &g, 1e-14);
    }

    #[test]
    fn gauss_solves_the_system() {
        let dims = tiny(Workload::Gauss);
        let n = dims.n;
        let (input, out) = run(Workload::Gauss, dims, 1);
        let w = n + 1;
        let x = &out[n * w..];
        for i in 0..n {
            let ax: f64 = (0..n).map(|j| input[i * w + j] * x[j]).sum();
            assert!((ax - input[i * w + n]).abs() < 1e-12, "row {i}");
        }
    }

    #[test]
    fn lu_factors_multiply_back() {
        let dims = tiny(Workload::Lu);
        let n = dims.n;
        let (a, lu) = run(Workload::Lu, dims, 1);
        let mut prod = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                let mut s = 0.0;
                for k in 0..=i.min(j) {
                    let l = if k == i { 1.0 } else { lu[i * n + k] };
                    s += l * lu[k * n + j];
                }
                prod[i * n + j] = s;
            }
        }
        close(&prod, &a, 1e-14);
    }

    #[test]
    fn tmm_matches_a_naive_product() {
        let dims = tiny(Workload::Tmm);
        let n = dims.n;
        let (input, out) = run(Workload::Tmm, dims, 1);
        let (a, b) = (&input[..n * n], &input[n * n..2 * n * n]);
        let mut c = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                c[i * n + j] = (0..n).map(|k| a[i * n + k] * b[k * n + j]).sum();
            }
        }
        close(&out[2 * n * n..], &c, 1e-14);
    }

    #[test]
    fn cholesky_factor_multiplies_back() {
        let dims = tiny(Workload::Cholesky);
        let n = dims.n;
        let (a, l) = run(Workload::Cholesky, dims, 1);
        for i in 0..n {
            for j in 0..=i {
                let s: f64 = (0..=j).map(|k| l[i * n + k] * l[j * n + k]).sum();
                assert!((s - a[i * n + j]).abs() < 1e-12 * n as f64, "({i},{j})");
            }
        }
    }

    #[test]
    fn names_and_dims() {
        for w in Workload::ALL {
            assert_eq!(Workload::from_name(w.name()).unwrap(), w);
            for s in [Size::Tiny, Size::Default, Size::Paper] {
                w.validate(w.dims(s)).unwrap();
                assert_eq!(Size::from_name(s.name()).unwrap(), s);
            }
        }
        assert!(Workload::from_name("fft").is_err());
        assert!(Workload::Tmm
            .validate(Dims {
                n: 8,
                m: 0,
                tile: 0
            })
            .is_err());
        assert!(Workload::Conv2d
            .validate(Dims {
                n: 8,
                m: 0,
                tile: 0
            })
            .is_err());
        assert!(Workload::Lu
            .validate(Dims {
                n: 2,
                m: 0,
                tile: 0
            })
            .is_err());
    }
}
