//! YCSB's number generators (site.ycsb.generator), same algorithms and constants.

use rand::Rng;

/// FNV-1a 64 of a number's 8 bytes, low byte first (YCSB `Utils.fnvhash64`).
pub fn fnv_hash64(mut val: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for _ in 0..8 {
        let octet = val & 0xff;
        val >>= 8;
        h ^= octet;
        h = h.wrapping_mul(1_099_511_628_211);
    }
    h
}

/// YCSB's key for record number `n` with `insertorder=hashed`: `user` + the hash in decimal.
pub fn key_name(n: u64, hashed: bool) -> String {
    // YCSB's `Utils.hash` is `Math.abs` of the hash as a Java long.
    let v = if hashed {
        (fnv_hash64(n) as i64).unsigned_abs()
    } else {
        n
    };
    format!("user{v}")
}

/// YCSB's zipfian constant.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

/// Zipfian over [base, base + items) by Gray et al.'s method (YCSB `ZipfianGenerator`), with
/// the item count allowed to grow (zeta extended incrementally).
#[derive(Clone, Debug)]
pub struct Zipfian {
    base: u64,
    items: u64,
    theta: f64,
    zeta2: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    count_for_zeta: u64,
}

fn zeta(from: u64, to: u64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in from..to {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

impl Zipfian {
    /// Over [min, max].
    pub fn new(min: u64, max: u64) -> Zipfian {
        let items = max - min + 1;
        Zipfian::with_zetan(
            min,
            items,
            ZIPFIAN_CONSTANT,
            zeta(0, items, ZIPFIAN_CONSTANT, 0.0),
        )
    }

    fn with_zetan(base: u64, items: u64, theta: f64, zetan: f64) -> Zipfian {
        let zeta2 = zeta(0, 2, theta, 0.0);
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipfian {
            base,
            items,
            theta,
            zeta2,
            alpha,
            zetan,
            eta,
            count_for_zeta: items,
        }
    }

    /// The next value, with `items` possibly grown since the last call.
    pub fn next_n(&mut self, rng: &mut impl Rng, items: u64) -> u64 {
        if items != self.count_for_zeta && items > self.count_for_zeta {
            self.zetan = zeta(self.count_for_zeta, items, self.theta, self.zetan);
            self.count_for_zeta = items;
            self.eta = (1.0 - (2.0 / items as f64).powf(1.0 - self.theta))
                / (1.0 - self.zeta2 / self.zetan);
        }
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        let v = (items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        self.base + v.min(items - 1)
    }

    /// The next value over the generator's own item count.
    pub fn next(&mut self, rng: &mut impl Rng) -> u64 {
        let n = self.items;
        self.next_n(rng, n)
    }
}

/// YCSB's `ScrambledZipfianGenerator`: zipfian over 10^10 items (precomputed zeta), hashed into
/// [min, max], so popular items are scattered over the key space.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    min: u64,
    count: u64,
    gen: Zipfian,
}

const ITEM_COUNT: u64 = 10_000_000_000;
const ZETAN: f64 = 26.469_028_201_783_02;

impl ScrambledZipfian {
    pub fn new(min: u64, max: u64) -> ScrambledZipfian {
        ScrambledZipfian {
            min,
            count: max - min + 1,
            gen: Zipfian::with_zetan(0, ITEM_COUNT, ZIPFIAN_CONSTANT, ZETAN),
        }
    }

    pub fn next(&mut self, rng: &mut impl Rng) -> u64 {
        self.min + fnv_hash64(self.gen.next(rng)) % self.count
    }
}

/// YCSB's `SkewedLatestGenerator`: the newest records most popular.
#[derive(Clone, Debug)]
pub struct Latest {
    zipf: Zipfian,
}

impl Latest {
    /// Over records [0, last].
    pub fn new(last: u64) -> Latest {
        Latest {
            zipf: Zipfian::new(0, last),
        }
    }

    /// A record in [0, last] (`last` the newest inserted, growing).
    pub fn next(&mut self, rng: &mut impl Rng, last: u64) -> u64 {
        last - self.zipf.next_n(rng, last + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn fnv_matches_ycsb() {
        // FNV-1a 64 of eight zero bytes, by the reference algorithm.
        assert_eq!(fnv_hash64(0), 0xa8c7_f832_281a_39c5);
        assert_ne!(fnv_hash64(1), fnv_hash64(2));
    }

    #[test]
    fn zipfian_is_skewed_and_in_range() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut z = Zipfian::new(0, 999);
        let mut hits = vec![0u32; 1000];
        for _ in 0..100_000 {
            let v = z.next(&mut rng);
            assert!(v < 1000);
            hits[v as usize] += 1;
        }
        // Item 0 takes ~1/zeta(1000) ~ 13% of draws at theta 0.99; item 999 almost none.
        assert!(
            hits[0] > 10_000 && hits[0] < 16_000,
            "item 0 drawn {} times",
            hits[0]
        );
        assert!(hits[0] > 50 * hits[999].max(1));
    }

    #[test]
    fn scrambled_and_latest_stay_in_range() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let mut s = ScrambledZipfian::new(0, 99);
        let mut l = Latest::new(99);
        let mut newest = 0;
        for i in 0..10_000u64 {
            assert!(s.next(&mut rng) < 100);
            let last = 99 + i / 100;
            let v = l.next(&mut rng, last);
            assert!(v <= last);
            if v == last {
                newest += 1;
            }
        }
        assert!(
            newest > 1000,
            "the newest record drawn {newest} times of 10000"
        );
    }
}
