//! Splitting one critical-loop iteration over threads.
//!
//! Owns [`par_units`]: a slice made of equal units (matrix rows, or single columns of a row) is
//! cut into at most `threads` contiguous chunks of whole units, one per scoped thread
//! (`std::thread::scope`). Each element is written by exactly one thread and every per-element
//! computation is the same whatever the split, which is what makes the kernels' results
//! bit-identical for every thread count.
//!
//! Threads are spawned per iteration, so an iteration too small to pay for a spawn
//! (less than [`MIN_WORK_PER_THREAD`] multiply-adds per thread) runs on fewer threads, down to
//! the calling one. The calling thread always takes the last chunk itself.

/// Multiply-adds below which an extra thread is not worth its spawn (about 20 µs here).
pub const MIN_WORK_PER_THREAD: usize = 1 << 15;

/// Largest thread count a run accepts.
pub const MAX_THREADS: usize = 64;

/// Run `f(first_unit, chunk)` over `data`, a whole number of units of `unit_len` elements,
/// split into contiguous chunks for up to `threads` threads. `work` estimates the
/// multiply-adds of the whole call (it only decides how many threads are worth spawning).
/// `first_unit` is the index of the chunk's first unit within `data`.
pub fn par_units<F>(data: &mut [f64], unit_len: usize, threads: usize, work: usize, f: F)
where
    F: Fn(usize, &mut [f64]) + Sync,
{
    debug_assert!(unit_len > 0 && data.len().is_multiple_of(unit_len));
    let units = data.len() / unit_len.max(1);
    let useful = (work / MIN_WORK_PER_THREAD).max(1);
    let threads = threads.clamp(1, MAX_THREADS).min(units.max(1)).min(useful);
    if threads <= 1 {
        f(0, data);
        return;
    }
    let per = units.div_ceil(threads);
    let f = &f;
    std::thread::scope(|s| {
        let mut chunks = data.chunks_mut(per * unit_len).enumerate();
        let last = chunks.next_back();
        for (i, chunk) in chunks {
            s.spawn(move || f(i * per, chunk));
        }
        if let Some((i, chunk)) = last {
            f(i * per, chunk);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_is_visited_once_with_its_index() {
        for threads in [1, 2, 3, 4, 7, 64] {
            let mut data = vec![0.0f64; 10 * 3];
            par_units(&mut data, 3, threads, usize::MAX, |first, chunk| {
                for (u, row) in chunk.chunks_mut(3).enumerate() {
                    for x in row {
                        *x += (first + u) as f64;
                    }
                }
            });
            for (u, row) in data.chunks(3).enumerate() {
                assert!(row.iter().all(|&x| x == u as f64), "threads {threads}");
            }
        }
    }

    #[test]
    fn small_work_stays_on_the_calling_thread() {
        let me = std::thread::current().id();
        let mut data = vec![0.0f64; 64];
        par_units(&mut data, 1, 8, 10, |_, _| {
            assert_eq!(std::thread::current().id(), me);
        });
    }
}
