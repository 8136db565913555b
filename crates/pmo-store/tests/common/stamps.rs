//! The stamped generations the readers and live-snapshot tests check a view against (`mod
//! common;` then `common::stamps::Stamps`): psync `k` writes stamp `k` into pages `0..w` and
//! into the rolling page `w + k % r`, so psync `K`'s state has stamp `K` on pages `0..w` and,
//! on each rolling page, the last `k <= K` that wrote it (zero if none did). A view that mixes
//! two psyncs, or shows a page newer than its own, fails the check.

use pmo_store::PmoHandle;

/// The stamp psync `k` writes into page `p`.
pub fn stamp(k: u64, p: u64) -> Box<[u8; 4096]> {
    let mut b = Box::new([(k as u8) ^ (p as u8); 4096]);
    b[..8].copy_from_slice(&k.to_le_bytes());
    b[8..16].copy_from_slice(&p.to_le_bytes());
    b
}

/// `w` pages every psync writes, `r` pages it writes in turn.
#[derive(Clone, Copy)]
pub struct Stamps {
    pub w: u64,
    pub r: u64,
}

impl Stamps {
    /// The PMO's pages.
    pub const fn pages(&self) -> u64 {
        self.w + self.r
    }

    /// Psync `k` of the writer: its pages committed at once.
    pub fn psync(&self, h: &PmoHandle, k: u64) -> pmo_store::Result<()> {
        let mut pages: Vec<u64> = (0..self.w).collect();
        pages.push(self.w + k % self.r);
        let bufs: Vec<Box<[u8; 4096]>> = pages.iter().map(|&p| stamp(k, p)).collect();
        let list: Vec<(u64, &[u8; 4096])> = pages
            .iter()
            .copied()
            .zip(bufs.iter().map(|b| &**b))
            .collect();
        h.commit_pages(&list).map(|_| ())
    }

    /// The psync every page `h` shows is exactly as of (panics, naming `ctx`, on a mix).
    pub fn one_psync(&self, h: &PmoHandle, ctx: &str) -> u64 {
        let mut b = [0u8; 4096];
        h.read_page(0, &mut b)
            .unwrap_or_else(|e| panic!("{ctx}: page 0: {e}"));
        let big_k = u64::from_le_bytes(b[..8].try_into().unwrap());
        for p in 0..self.pages() {
            h.read_page(p, &mut b)
                .unwrap_or_else(|e| panic!("{ctx}: page {p}: {e} ({})", snapshot_of(h, p)));
            let want = if p < self.w {
                Some(big_k)
            } else {
                let r = p - self.w;
                (r..=big_k).rev().find(|k| k % self.r == r && *k >= 1)
            };
            match want {
                Some(k) if big_k > 0 => assert!(
                    b == *stamp(k, p),
                    "{ctx}: page {p} is not psync {k}'s (K = {big_k}, it holds {}; {})",
                    u64::from_le_bytes(b[..8].try_into().unwrap()),
                    snapshot_of(h, p)
                ),
                _ => assert!(b.iter().all(|&x| x == 0), "{ctx}: page {p} should be zero"),
            }
        }
        big_k
    }
}

/// What a reader's snapshot says of page `p` (for a failure's message): its psync, and the
/// slot and version its entry names.
fn snapshot_of(h: &PmoHandle, p: u64) -> String {
    match h.reader() {
        Some(r) => {
            let snap = r.snapshot();
            let e = snap.entry(p);
            format!(
                "snapshot of psync {}, entry {:?} version {}, frames in use {}",
                snap.seq,
                e.loc(),
                e.version(),
                r.table().frames_used()
            )
        }
        None => "not a snapshot reader".into(),
    }
}

/// Commit stamp `k` into `pages` at once and note it in `model` (page -> stamp).
pub fn commit_stamps(h: &PmoHandle, k: u64, pages: &[u64], model: &mut [u64]) {
    let bufs: Vec<_> = pages.iter().map(|&p| stamp(k, p)).collect();
    let list: Vec<(u64, &[u8; 4096])> = pages
        .iter()
        .copied()
        .zip(bufs.iter().map(|b| &**b))
        .collect();
    h.commit_pages(&list).unwrap();
    for &p in pages {
        model[p as usize] = k;
    }
}

/// Every page `h` shows holds the stamp `model` names for it (panics, naming `ctx`).
pub fn check_stamps(h: &PmoHandle, model: &[u64], ctx: &str) {
    let mut b = [0u8; 4096];
    for (p, &k) in model.iter().enumerate() {
        h.read_page(p as u64, &mut b)
            .unwrap_or_else(|e| panic!("{ctx}: page {p}: {e}"));
        assert!(
            b == *stamp(k, p as u64),
            "{ctx}: page {p} is not stamp {k}'s"
        );
    }
}
