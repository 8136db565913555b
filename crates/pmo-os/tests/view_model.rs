//! Seeded random operation sequences against a model, for every mechanism: reads, writes,
//! install, discard, populate_all and collect_dirty must agree with a plain in-memory model of
//! page contents, presence and dirtiness. A failure prints the seed and the operation log.
//! `PMO_VIEW_MODEL_SEEDS=N` runs more seeds (default 40).

#[path = "view_common.rs"]
mod view_common;

use std::collections::BTreeSet;

use pmo_os::view::PAGE_SIZE;
use view_common::*;

const PAGES: u64 = 96;
const OPS: usize = 300;

/// xorshift64*: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What word 0 and word 1 of a page hold in the model.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Content {
    /// As the source fills it.
    Source,
    /// Installed data (every byte = `fill`), then maybe word 0 overwritten.
    Installed { fill: u8, word0: Option<u64> },
    /// Filled from the source, then word 0 overwritten.
    Written(u64),
}

struct Model {
    content: Vec<Content>,
    present: Vec<bool>,
    dirty: BTreeSet<u64>,
}

impl Model {
    fn expect(&self, p: u64) -> (u64, u64) {
        match self.content[p as usize] {
            Content::Source => (word(p, 0), word(p, 1)),
            Content::Written(v) => (v, word(p, 1)),
            Content::Installed { fill, word0 } => {
                let w = u64::from_ne_bytes([fill; 8]);
                (word0.unwrap_or(w), w)
            }
        }
    }
}

fn run(m: Config, seed: u64) {
    let v = view(m, PAGES as usize, true, Pattern::new("model"));
    let mut model = Model {
        content: vec![Content::Source; PAGES as usize],
        present: vec![false; PAGES as usize],
        dirty: BTreeSet::new(),
    };
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut log = Vec::new();
    for _ in 0..OPS {
        let p = rng.below(PAGES);
        let op = rng.below(100);
        let ctx = |log: &Vec<String>| format!("{m} seed {seed}: ops {log:?}");
        match op {
            0..=34 => {
                log.push(format!("read {p}"));
                let got = (read(&v, p, 0), read(&v, p, 1));
                assert_eq!(got, model.expect(p), "{}", ctx(&log));
                model.present[p as usize] = true;
            }
            35..=64 => {
                let value = rng.next();
                log.push(format!("write {p}"));
                write(&v, p, 0, value);
                model.present[p as usize] = true;
                model.content[p as usize] = match model.content[p as usize] {
                    Content::Installed { fill, .. } => Content::Installed {
                        fill,
                        word0: Some(value),
                    },
                    _ => Content::Written(value),
                };
                model.dirty.insert(p);
            }
            65..=74 => {
                let fill = (rng.below(250) + 1) as u8;
                log.push(format!("install {p}"));
                let installed = v.install(p, &[fill; PAGE_SIZE]).unwrap();
                assert_eq!(installed, !model.present[p as usize], "{}", ctx(&log));
                if installed {
                    model.present[p as usize] = true;
                    model.content[p as usize] = Content::Installed { fill, word0: None };
                }
            }
            75..=84 => {
                log.push(format!("discard {p}"));
                v.discard(p).unwrap();
                model.present[p as usize] = false;
                model.content[p as usize] = Content::Source;
                model.dirty.remove(&p);
            }
            85..=89 => {
                log.push(format!("mark_dirty {p}"));
                v.mark_dirty(p).unwrap();
                if model.present[p as usize] {
                    model.dirty.insert(p);
                }
            }
            90..=91 => {
                log.push("populate_all".to_string());
                v.populate_all().unwrap();
                model.present.iter_mut().for_each(|x| *x = true);
            }
            _ => {
                log.push("collect".to_string());
                let got = dirty(&v);
                let want: Vec<u64> = std::mem::take(&mut model.dirty).into_iter().collect();
                assert_eq!(got, want, "{}", ctx(&log));
            }
        }
        if log.len() % 16 == 0 {
            for q in 0..PAGES {
                assert_eq!(
                    v.is_present(q),
                    model.present[q as usize],
                    "page {q}: {}",
                    ctx(&log)
                );
            }
        }
    }
    let want: Vec<u64> = model.dirty.into_iter().collect();
    assert_eq!(dirty(&v), want, "{m} seed {seed}: final collect");
}

#[test]
fn random_operations_match_the_model() {
    let seeds: u64 = std::env::var("PMO_VIEW_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    for m in mechanisms() {
        for seed in 0..seeds {
            run(m, seed);
        }
    }
}
