//! Filebench's random variables (`fb_random.c`): `set $v = randvar(...)` and, in older
//! workload files, `define randvar name=$v, ...`. Every use of such a variable (an `iosize`,
//! a fileset's `size`, an `indexed=` file index) draws a new value.
//!
//! Types, as Filebench computes them (`min` and `round` default to 0; `gamma` is given in
//! thousandths, default 1500, i.e. 1.5):
//! - `uniform`: `min + u * 2 (mean - min)`, `u` uniform in [0, 1) (mean defaults to 0);
//! - `gamma` (the default type): `min +` a gamma draw of shape `gamma` and scale
//!   `(mean - min) / gamma` (mean defaults to the shape itself);
//! - `tabular` (`randtable = {{P, A, B}, ...}`, the `P`s summing to 100): a row picked with
//!   probability `P`%, a value uniform in `[A, B)`, then scaled so the table's mean becomes
//!   `mean` (which defaults to the table's own mean) and its minimum `min`.
//!
//! A nonzero `round` rounds every draw to a multiple of it. `seed` and `randsrc` choose
//! Filebench's generator (rand48 with a seed, or urandom); here every draw comes from the
//! drawing thread's generator, seeded from the run's seed, so `seed` and `randsrc` are
//! accepted and recorded but do not change the stream.

use rand::Rng;
use rand_distr::Distribution;

/// The distribution of a random variable.
#[derive(Clone, Debug, PartialEq)]
pub enum RandKind {
    Uniform,
    Gamma,
    /// 100 slots (one per percent) of (base, range), normalised to minimum 0 and mean 1 as
    /// Filebench's `randdist_init` does.
    Table(Vec<(f64, f64)>),
}

/// A random variable.
#[derive(Clone, Debug, PartialEq)]
pub struct RandVar {
    pub kind: RandKind,
    pub min: f64,
    pub mean: f64,
    /// The gamma shape (the file's value / 1000).
    pub gamma: f64,
    pub round: f64,
    /// `seed=` as given (recorded; see the module comment).
    pub seed: Option<u64>,
    /// `randsrc=` as given (recorded).
    pub randsrc: Option<String>,
}

/// What is wrong with a random variable's parameters.
pub type RandError = String;

impl RandVar {
    /// Build from the evaluated parameters. `table` rows are (percent, min, max).
    pub fn new(
        kind: &str,
        min: f64,
        mean: Option<f64>,
        gamma_milli: f64,
        round: f64,
        table: Option<&[(f64, f64, f64)]>,
    ) -> Result<RandVar, RandError> {
        let gamma = gamma_milli / 1000.0;
        // The kind, and the mean a table gives when `mean` is not set.
        let (kind, table_mean) = match (kind, table) {
            ("tabular", Some(rows)) => {
                let mut slots = Vec::with_capacity(100);
                let mut table_mean = 0.0;
                let mut table_min = f64::INFINITY;
                for &(pct, lo, hi) in rows {
                    if pct.fract() != 0.0 {
                        return Err(format!("randtable percentage {pct} is not a whole number"));
                    }
                    if hi < lo {
                        return Err(format!(
                            "randtable row {{{pct}, {lo}, {hi}}}: max below min"
                        ));
                    }
                    // Checked before the slots are filled: a percentage of 10^15 is no
                    // loop of 10^15 pushes.
                    if pct > (100 - slots.len()) as f64 {
                        return Err(format!(
                            "randtable percentages total more than 100% (row {{{pct}, {lo}, {hi}}})"
                        ));
                    }
                    table_min = table_min.min(lo);
                    table_mean += (lo + hi) / 2.0 * pct;
                    for _ in 0..pct as u64 {
                        slots.push((lo, hi - lo));
                    }
                }
                if slots.len() != 100 {
                    return Err(format!(
                        "randtable percentages total {}%, not 100%",
                        slots.len()
                    ));
                }
                let spread = table_mean / 100.0 - table_min;
                let slots = if spread == 0.0 {
                    vec![(0.0, 0.0); 100]
                } else {
                    slots
                        .into_iter()
                        .map(|(b, r)| ((b - table_min) / spread, r / spread))
                        .collect()
                };
                (RandKind::Table(slots), Some(table_mean / 100.0))
            }
            ("tabular", None) => return Err("type=tabular needs a randtable".into()),
            (_, Some(_)) => return Err("a randtable needs type=tabular".into()),
            ("uniform", None) => (RandKind::Uniform, None),
            ("gamma", None) => (RandKind::Gamma, None),
            (other, None) => {
                return Err(format!(
                    "unknown randvar type '{other}' (known: uniform, gamma, tabular)"
                ))
            }
        };
        let mean = match (&kind, mean.or(table_mean)) {
            (_, Some(m)) => m,
            (RandKind::Gamma, None) => gamma,
            _ => 0.0,
        };
        if kind == RandKind::Gamma && (gamma <= 0.0 || mean <= min) {
            return Err(format!(
                "a gamma randvar needs gamma > 0 and mean > min (gamma {}, mean {mean}, min {min})",
                gamma * 1000.0
            ));
        }
        if kind == RandKind::Uniform && mean < min {
            return Err(format!(
                "a uniform randvar needs mean >= min (mean {mean}, min {min})"
            ));
        }
        Ok(RandVar {
            kind,
            min,
            mean,
            gamma,
            round,
            seed: None,
            randsrc: None,
        })
    }

    /// One draw (never negative).
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let v = match &self.kind {
            RandKind::Uniform => rng.gen::<f64>() * 2.0 * (self.mean - self.min) + self.min,
            RandKind::Gamma => {
                let scale = (self.mean - self.min) / self.gamma;
                match rand_distr::Gamma::new(self.gamma, scale) {
                    Ok(g) => g.sample(rng) + self.min,
                    // Checked in `new`: both positive.
                    Err(_) => self.mean,
                }
            }
            RandKind::Table(slots) => {
                let p = rng.gen::<f64>() * 100.0;
                let i = (p as usize).min(99);
                let (base, range) = slots[i];
                (base + range * (p - i as f64)) * (self.mean - self.min) + self.min
            }
        };
        let v = if self.round > 0.0 {
            (v / self.round).round() * self.round
        } else {
            v
        };
        v.round().max(0.0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn mean_of(r: &RandVar) -> f64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        (0..20_000).map(|_| r.sample(&mut rng) as f64).sum::<f64>() / 20_000.0
    }

    #[test]
    fn tabular_keeps_its_rows_and_mean() {
        let rows = [(80.0, 1024.0, 4096.0), (20.0, 4096.0, 16384.0)];
        let r = RandVar::new("tabular", 1024.0, None, 1500.0, 0.0, Some(&rows)).unwrap();
        let want = 0.8 * 2560.0 + 0.2 * 10240.0;
        assert!((r.mean - want).abs() < 1e-6);
        let m = mean_of(&r);
        assert!((m - want).abs() < want * 0.05, "{m} vs {want}");
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        for _ in 0..1000 {
            let v = r.sample(&mut rng);
            assert!((1024..=16384).contains(&v), "{v}");
        }
    }

    #[test]
    fn gamma_uniform_and_round() {
        let g = RandVar::new("gamma", 512.0, Some(16384.0), 1500.0, 512.0, None).unwrap();
        let m = mean_of(&g);
        assert!((m - 16384.0).abs() < 1500.0, "{m}");
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        assert!((0..200).all(|_| g.sample(&mut rng).is_multiple_of(512)));
        let u = RandVar::new("uniform", 100.0, Some(200.0), 1500.0, 0.0, None).unwrap();
        assert!((mean_of(&u) - 200.0).abs() < 5.0);
        // Filebench's default gamma mean is the shape: gamma=100 -> mean 0.1.
        let idx = RandVar::new("gamma", 0.0, None, 100.0, 0.0, None).unwrap();
        assert!((idx.mean - 0.1).abs() < 1e-12);
    }

    #[test]
    fn bad_parameters_are_refused() {
        let short = [(80.0, 1.0, 2.0)];
        assert!(
            RandVar::new("tabular", 0.0, None, 1500.0, 0.0, Some(&short))
                .unwrap_err()
                .contains("80%")
        );
        assert!(RandVar::new("tabular", 0.0, None, 1500.0, 0.0, None).is_err());
        assert!(RandVar::new("normal", 0.0, None, 1500.0, 0.0, None)
            .unwrap_err()
            .contains("unknown randvar type"));
        assert!(RandVar::new("gamma", 10.0, Some(5.0), 1500.0, 0.0, None).is_err());
        assert!(RandVar::new("gamma", 0.0, Some(5.0), 0.0, 0.0, None).is_err());
    }
}
