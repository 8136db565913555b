//! The crash-simulation medium.
//!
//! Memory only. It keeps two byte arrays: `current`, what a reader sees, and `durable`, what
//! is certain to survive a power failure. A `write` changes `current` and marks its lines
//! *pending*; `flush` marks pending lines *flushed*; `fence` copies the flushed lines into
//! `durable`. A line written but not yet fenced (flushed or not: the cache may have evicted it)
//! may or may not survive.
//!
//! Every `fence` is a *persist point*, numbered from 0. With [`CrashMedium::crash_at`] set to N,
//! the medium loses power when fence N is called, before it takes effect: it keeps the pending
//! lines aside and fails every later call with [`MediumError::PowerLost`]. The test then asks for
//! the images a power failure could have left ([`CrashMedium::crash_images`]: none of the pending
//! lines, all of them, and seeded random subsets; [`CrashMedium::torn_image`] also tears lines at
//! 8-byte granularity) and reopens each with a fresh medium ([`CrashMedium::from_image`]).
//!
//! Model limit: a line written twice between fences keeps only its latest contents as a
//! candidate, not the intermediate one.

use std::collections::BTreeMap;
use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{check_range, Medium, MediumError, MediumKind, LINE};

struct State {
    current: Vec<u8>,
    durable: Vec<u8>,
    /// Lines written since they were last made durable: line index -> flushed.
    pending: BTreeMap<u64, bool>,
    fences: u64,
    crash_at: Option<u64>,
    /// After the crash: the lines that were pending, with their contents.
    lost: Option<Vec<(u64, [u8; LINE as usize])>>,
}

/// The crash-simulation medium (see the module documentation).
pub struct CrashMedium {
    state: Mutex<State>,
    len: u64,
}

impl CrashMedium {
    /// A zeroed medium of `len` bytes (rounded up to a whole line).
    pub fn new(len: u64) -> CrashMedium {
        Self::from_image(vec![0; len.div_ceil(LINE) as usize * LINE as usize])
    }

    /// A medium whose durable and current contents are `image` (a crash image, or a copy of a file).
    pub fn from_image(mut image: Vec<u8>) -> CrashMedium {
        image.resize(image.len().div_ceil(LINE as usize) * LINE as usize, 0);
        let len = image.len() as u64;
        CrashMedium {
            state: Mutex::new(State {
                current: image.clone(),
                durable: image,
                pending: BTreeMap::new(),
                fences: 0,
                crash_at: None,
                lost: None,
            }),
            len,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lose power when persist point `n` (the n-th fence from now on, counting from 0) is reached.
    pub fn crash_at(&self, n: Option<u64>) {
        let mut s = self.lock();
        s.crash_at = n.map(|n| s.fences + n);
    }

    /// Persist points passed so far.
    pub fn fences(&self) -> u64 {
        self.lock().fences
    }

    /// True once power was lost.
    pub fn crashed(&self) -> bool {
        self.lock().lost.is_some()
    }

    /// Lose power now (as if at the next persist point).
    pub fn crash_now(&self) {
        let mut s = self.lock();
        Self::lose_power(&mut s);
    }

    fn lose_power(s: &mut State) {
        if s.lost.is_some() {
            return;
        }
        let lost = s
            .pending
            .keys()
            .map(|&line| {
                let start = (line * LINE) as usize;
                let mut bytes = [0u8; LINE as usize];
                bytes.copy_from_slice(&s.current[start..start + LINE as usize]);
                (line, bytes)
            })
            .collect();
        s.lost = Some(lost);
    }

    /// The durable contents plus the pending lines chosen by `keep`.
    fn image_with(&self, mut keep: impl FnMut(usize, &mut [u8], &[u8; LINE as usize])) -> Vec<u8> {
        let s = self.lock();
        let mut image = s.durable.clone();
        let pending: Vec<(u64, [u8; LINE as usize])> = match &s.lost {
            Some(lost) => lost.clone(),
            None => s
                .pending
                .keys()
                .map(|&line| {
                    let start = (line * LINE) as usize;
                    let mut b = [0u8; LINE as usize];
                    b.copy_from_slice(&s.current[start..start + LINE as usize]);
                    (line, b)
                })
                .collect(),
        };
        for (i, (line, bytes)) in pending.iter().enumerate() {
            let start = (*line * LINE) as usize;
            keep(i, &mut image[start..start + LINE as usize], bytes);
        }
        image
    }

    /// Number of lines that were pending (written, not fenced) when power was lost, or now.
    pub fn pending_lines(&self) -> usize {
        let s = self.lock();
        s.lost.as_ref().map_or(s.pending.len(), |l| l.len())
    }

    /// Images a power failure could leave: none of the pending lines, all of them, then
    /// `random` seeded random subsets. Deterministic for a seed.
    pub fn crash_images(&self, random: usize, seed: u64) -> Vec<Vec<u8>> {
        let mut images = vec![
            self.image_with(|_, _, _| {}),
            self.image_with(|_, dst, src| dst.copy_from_slice(src)),
        ];
        if self.pending_lines() == 0 {
            images.truncate(1);
            return images;
        }
        let mut rng = StdRng::seed_from_u64(seed);
        for _ in 0..random {
            images.push(self.image_with(|_, dst, src| {
                if rng.gen_bool(0.5) {
                    dst.copy_from_slice(src)
                }
            }));
        }
        images
    }

    /// An image where each pending line survives whole, not at all, or torn at 8-byte granularity.
    pub fn torn_image(&self, seed: u64) -> Vec<u8> {
        let mut rng = StdRng::seed_from_u64(seed);
        self.image_with(|_, dst, src| match rng.gen_range(0..3) {
            0 => {}
            1 => dst.copy_from_slice(src),
            _ => {
                for w in 0..(LINE as usize / 8) {
                    if rng.gen_bool(0.5) {
                        dst[w * 8..w * 8 + 8].copy_from_slice(&src[w * 8..w * 8 + 8]);
                    }
                }
            }
        })
    }

    /// What a reader sees now (durable plus unfenced writes), e.g. to compare with an image.
    pub fn current_image(&self) -> Vec<u8> {
        self.lock().current.clone()
    }

    /// The contents certain to survive.
    pub fn durable_image(&self) -> Vec<u8> {
        self.lock().durable.clone()
    }

    fn alive(s: &State) -> Result<(), MediumError> {
        if s.lost.is_some() {
            Err(MediumError::PowerLost)
        } else {
            Ok(())
        }
    }
}

impl Medium for CrashMedium {
    fn len(&self) -> u64 {
        self.len
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediumError> {
        check_range(offset, buf.len() as u64, self.len)?;
        let s = self.lock();
        Self::alive(&s)?;
        buf.copy_from_slice(&s.current[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), MediumError> {
        check_range(offset, data.len() as u64, self.len)?;
        let mut s = self.lock();
        Self::alive(&s)?;
        s.current[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        if !data.is_empty() {
            for line in offset / LINE..=(offset + data.len() as u64 - 1) / LINE {
                s.pending.insert(line, false);
            }
        }
        Ok(())
    }
    fn flush(&self, offset: u64, len: u64) -> Result<(), MediumError> {
        check_range(offset, len, self.len)?;
        let mut s = self.lock();
        Self::alive(&s)?;
        if len == 0 {
            return Ok(());
        }
        let (first, last) = (offset / LINE, (offset + len - 1) / LINE);
        for (_, flushed) in s.pending.range_mut(first..=last) {
            *flushed = true;
        }
        Ok(())
    }
    fn fence(&self) -> Result<(), MediumError> {
        let mut s = self.lock();
        Self::alive(&s)?;
        if s.crash_at == Some(s.fences) {
            Self::lose_power(&mut s);
            return Err(MediumError::PowerLost);
        }
        s.fences += 1;
        let flushed: Vec<u64> = s
            .pending
            .iter()
            .filter(|(_, &f)| f)
            .map(|(&l, _)| l)
            .collect();
        for line in flushed {
            let r = (line * LINE) as usize..((line + 1) * LINE) as usize;
            let state = &mut *s;
            state.durable[r.clone()].copy_from_slice(&state.current[r]);
            state.pending.remove(&line);
        }
        Ok(())
    }
    fn kind(&self) -> MediumKind {
        MediumKind::CrashSim
    }
    fn path(&self) -> Option<&std::path::Path> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_writes_survive_unfenced_may_not() {
        let m = CrashMedium::new(4096);
        m.write(0, &[1; 64]).unwrap();
        m.persist(0, 64).unwrap();
        m.write(64, &[2; 64]).unwrap(); // never flushed
        m.write(128, &[3; 64]).unwrap();
        m.flush(128, 64).unwrap(); // flushed, not fenced
        m.crash_at(Some(0));
        assert!(matches!(m.fence(), Err(MediumError::PowerLost)));
        assert!(matches!(m.write(0, &[9]), Err(MediumError::PowerLost)));
        let images = m.crash_images(8, 1);
        assert!(images.len() >= 2);
        for img in &images {
            assert_eq!(&img[0..64], &[1; 64]);
            assert!(img[64..128].iter().all(|&b| b == 0) || img[64..128].iter().all(|&b| b == 2));
            assert!(img[128..192].iter().all(|&b| b == 0) || img[128..192].iter().all(|&b| b == 3));
        }
        assert!(
            images[0][64..192].iter().all(|&b| b == 0),
            "first image drops all pending lines"
        );
        assert!(
            images[1][64..128].iter().all(|&b| b == 2),
            "second image keeps them all"
        );
    }

    #[test]
    fn fence_without_flush_keeps_line_pending() {
        let m = CrashMedium::new(128);
        m.write(0, &[5; 8]).unwrap();
        m.fence().unwrap();
        assert_eq!(m.pending_lines(), 1);
        assert_eq!(m.durable_image()[0], 0);
        m.persist(0, 8).unwrap();
        assert_eq!(m.pending_lines(), 0);
        assert_eq!(m.durable_image()[0], 5);
        assert_eq!(m.fences(), 2);
    }

    #[test]
    fn torn_images_mix_words_of_one_line() {
        let m = CrashMedium::new(64);
        m.write(0, &[7; 64]).unwrap();
        m.crash_now();
        let mut saw_torn = false;
        for seed in 0..64 {
            let img = m.torn_image(seed);
            for w in img.chunks(8) {
                assert!(
                    w.iter().all(|&b| b == 0) || w.iter().all(|&b| b == 7),
                    "8-byte words are atomic"
                );
            }
            let sevens = img.iter().filter(|&&b| b == 7).count();
            saw_torn |= sevens > 0 && sevens < 64;
        }
        assert!(saw_torn);
    }

    #[test]
    fn out_of_range_is_an_error() {
        let m = CrashMedium::new(64);
        assert!(matches!(
            m.write(60, &[0; 8]),
            Err(MediumError::OutOfRange { .. })
        ));
        assert!(matches!(
            m.read(u64::MAX - 1, &mut [0; 4]),
            Err(MediumError::OutOfRange { .. })
        ));
    }
}

/// One explored crash: power was lost at persist point `point` of the operation (or after it
/// completed, when `completed`), leaving `image`.
#[derive(Debug)]
pub struct CrashPoint {
    pub point: u64,
    /// The operation had finished (power lost after its last persist point).
    pub completed: bool,
    /// Which of the images of this point this is (0: no pending line survived, 1: all did,
    /// 2..: random subsets, then one torn image).
    pub variant: usize,
    pub image: Vec<u8>,
}

/// Cut power at every persist point of `op`, and once after it completes.
///
/// `op` runs against a fresh [`CrashMedium`] holding `base`; for each persist point the images a
/// power failure could leave there (none, all and `random` random subsets of the unfenced lines,
/// plus one torn image) are handed to `check`. Deterministic for a `seed`. Returns the number of
/// persist points of an uninterrupted run.
pub fn explore<T>(
    base: &[u8],
    random: usize,
    seed: u64,
    op: impl Fn(&std::sync::Arc<CrashMedium>) -> T,
    mut check: impl FnMut(&CrashPoint),
) -> u64 {
    let probe = std::sync::Arc::new(CrashMedium::from_image(base.to_vec()));
    let _ = op(&probe);
    let points = probe.fences();
    for point in 0..=points {
        let m = std::sync::Arc::new(CrashMedium::from_image(base.to_vec()));
        m.crash_at(Some(point));
        let _ = op(&m);
        let completed = !m.crashed();
        if completed {
            m.crash_now();
        }
        let point_seed = seed ^ (point.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut images = m.crash_images(random, point_seed);
        if m.pending_lines() > 0 {
            images.push(m.torn_image(point_seed));
        }
        for (variant, image) in images.into_iter().enumerate() {
            check(&CrashPoint {
                point,
                completed,
                variant,
                image,
            });
        }
    }
    points
}
