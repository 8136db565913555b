//! Traces: what each host thread does, in order, and the text format they are stored in.
//!
//! Owns [`Op`], [`Trace`], the text reader/writer and the [`Recorder`], an instrumented
//! persistent region that logs every access made through it.
//!
//! Format (`docs/cxlsim.md` has the full description), one operation per line:
//!
//! ```text
//! # pmo-cxlsim trace v1          <- required first non-empty line
//! <thread> <op> <address> <gap>  <- op: L load, S store, F flush (clflushopt), X fence (sfence)
//! 0 S 0x10040 12                 <- thread 0 stores to 0x10040 after 12 cycles of compute
//! 0 X 0 0                        <- fences carry address 0
//! ```
//!
//! Lines of different threads may interleave; each thread's lines are kept in file order.
//! `#` starts a comment. Addresses are hex (`0x` prefix) or decimal bytes; gap is core cycles
//! of computation before the operation. Invariants: a parsed trace has at most
//! [`MAX_THREADS`] threads and every fence has address 0.

use std::io::{BufRead, Write};
use std::path::Path;

use crate::error::{CxlsimError, Result};

/// Maximum threads in one trace.
pub const MAX_THREADS: usize = 256;
/// Maximum operations in one trace file (16 B each in memory: 1 GiB).
pub const MAX_TRACE_OPS: usize = 64 << 20;
/// First line of a trace file.
pub const HEADER: &str = "# pmo-cxlsim trace v1";

/// Kind of a traced operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Load of the line holding the address.
    Load,
    /// Store to the line holding the address.
    Store,
    /// Write the line back to the persistent domain and invalidate it (clflushopt).
    Flush,
    /// Wait until every earlier flush of this thread is acknowledged (sfence/mfence).
    Fence,
}

impl OpKind {
    fn letter(self) -> char {
        match self {
            OpKind::Load => 'L',
            OpKind::Store => 'S',
            OpKind::Flush => 'F',
            OpKind::Fence => 'X',
        }
    }
}

/// One traced operation: 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// Byte address (0 for fences).
    pub addr: u64,
    /// Core cycles of computation before the operation.
    pub gap_cycles: u32,
    /// What the operation does.
    pub kind: OpKind,
}

/// A multi-threaded trace: one operation list per thread.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    /// Workload name (for reports).
    pub name: String,
    /// Per-thread operations in program order.
    pub threads: Vec<Vec<Op>>,
}

impl Trace {
    /// The same trace with a fence after every flush that is not already followed by one, so
    /// each persist completes before its thread goes on (the strict flush + fence per persist
    /// of paper Fig. 2a) instead of one fence per checkpoint. The fences cost no gap cycles.
    pub fn with_fence_after_each_flush(&self) -> Trace {
        let fence = Op {
            addr: 0,
            gap_cycles: 0,
            kind: OpKind::Fence,
        };
        let threads = self
            .threads
            .iter()
            .map(|ops| {
                let mut out = Vec::with_capacity(ops.len() + ops.len() / 4);
                for (i, op) in ops.iter().enumerate() {
                    out.push(*op);
                    let next_is_fence = ops.get(i + 1).is_some_and(|n| n.kind == OpKind::Fence);
                    if op.kind == OpKind::Flush && !next_is_fence {
                        out.push(fence);
                    }
                }
                out
            })
            .collect();
        Trace {
            name: self.name.clone(),
            threads,
        }
    }

    /// Total operations over all threads.
    pub fn op_count(&self) -> usize {
        self.threads.iter().map(Vec::len).sum()
    }

    /// Count of operations of one kind.
    pub fn count(&self, kind: OpKind) -> usize {
        self.threads
            .iter()
            .flatten()
            .filter(|op| op.kind == kind)
            .count()
    }

    /// Parse the text format from a reader.
    pub fn read_from(name: &str, reader: impl BufRead) -> Result<Trace> {
        let mut threads: Vec<Vec<Op>> = Vec::new();
        let mut saw_header = false;
        let mut ops_read = 0usize;
        for (index, line) in reader.lines().enumerate() {
            let line_no = index + 1;
            let line = line.map_err(|e| CxlsimError::TraceParse {
                line: line_no,
                reason: e.to_string(),
            })?;
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            if !saw_header {
                if text != HEADER {
                    return Err(CxlsimError::TraceParse {
                        line: line_no,
                        reason: format!("expected header {HEADER:?}"),
                    });
                }
                saw_header = true;
                continue;
            }
            let text = match text.find('#') {
                Some(at) => text[..at].trim(),
                None => text,
            };
            if text.is_empty() {
                continue;
            }
            let bad = |reason: String| CxlsimError::TraceParse {
                line: line_no,
                reason,
            };
            let fields: Vec<&str> = text.split_whitespace().collect();
            if fields.len() != 4 {
                return Err(bad(format!(
                    "expected 4 fields `<thread> <L|S|F|X> <address> <gap>`, got {}",
                    fields.len()
                )));
            }
            let thread: usize = fields[0]
                .parse()
                .map_err(|_| bad(format!("thread {:?} is not a number", fields[0])))?;
            if thread >= MAX_THREADS {
                return Err(bad(format!("thread {thread} >= {MAX_THREADS}")));
            }
            let kind = match fields[1] {
                "L" | "l" => OpKind::Load,
                "S" | "s" => OpKind::Store,
                "F" | "f" => OpKind::Flush,
                "X" | "x" => OpKind::Fence,
                other => return Err(bad(format!("op {other:?} is not one of L, S, F, X"))),
            };
            let addr = parse_u64(fields[2]).ok_or_else(|| {
                bad(format!(
                    "address {:?} is not hex (0x..) or decimal",
                    fields[2]
                ))
            })?;
            if kind == OpKind::Fence && addr != 0 {
                return Err(bad("a fence carries address 0".into()));
            }
            let gap_cycles: u32 = fields[3]
                .parse()
                .map_err(|_| bad(format!("gap {:?} is not a number < 2^32", fields[3])))?;
            if ops_read >= MAX_TRACE_OPS {
                return Err(bad(format!("more than {MAX_TRACE_OPS} operations")));
            }
            ops_read += 1;
            if threads.len() <= thread {
                threads.resize_with(thread + 1, Vec::new);
            }
            threads[thread].push(Op {
                addr,
                gap_cycles,
                kind,
            });
        }
        if !saw_header {
            return Err(CxlsimError::TraceParse {
                line: 0,
                reason: "empty trace (no header)".into(),
            });
        }
        Ok(Trace {
            name: name.to_string(),
            threads,
        })
    }

    /// Read a trace file.
    pub fn read_file(path: &Path) -> Result<Trace> {
        let file = std::fs::File::open(path).map_err(|e| CxlsimError::io(path, e))?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Trace::read_from(&name, std::io::BufReader::new(file))
    }

    /// Write the text format (threads one after the other).
    pub fn write_to(&self, mut out: impl Write) -> std::io::Result<()> {
        writeln!(out, "{HEADER}")?;
        writeln!(
            out,
            "# workload {} threads {} ops {}",
            self.name,
            self.threads.len(),
            self.op_count()
        )?;
        for (thread, ops) in self.threads.iter().enumerate() {
            for op in ops {
                writeln!(
                    out,
                    "{thread} {} {:#x} {}",
                    op.kind.letter(),
                    op.addr,
                    op.gap_cycles
                )?;
            }
        }
        Ok(())
    }

    /// Write a trace file.
    pub fn write_file(&self, path: &Path) -> Result<()> {
        let file = std::fs::File::create(path).map_err(|e| CxlsimError::io(path, e))?;
        let mut out = std::io::BufWriter::new(file);
        self.write_to(&mut out)
            .and_then(|()| out.flush())
            .map_err(|e| CxlsimError::io(path, e))
    }
}

fn parse_u64(text: &str) -> Option<u64> {
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else {
        text.parse().ok()
    }
}

/// An instrumented persistent region: a word-addressed array of `u64` that computes for real
/// and logs every access as a trace operation of the calling thread.
///
/// Use it from any code that wants to know what its persistence pattern costs behind a CXL
/// switch: call [`Recorder::read`], [`Recorder::write`], [`Recorder::flush`],
/// [`Recorder::fence`] and [`Recorder::compute`] (cycles of work between accesses), then
/// [`Recorder::finish`]. Threads are logical: the caller interleaves them deterministically.
/// Invariant: logged addresses are `base_addr + 8 * word`, inside the region.
#[derive(Debug, Clone)]
pub struct Recorder {
    name: String,
    base_addr: u64,
    words: Vec<u64>,
    threads: Vec<Vec<Op>>,
    pending_gap: Vec<u64>,
    op_limit: usize,
}

impl Recorder {
    /// A zeroed region of `words` 64-bit words at `base_addr` (line-aligned), for `threads`
    /// threads, logging at most `op_limit` operations in total (further accesses still compute
    /// but are not logged; [`Recorder::truncated`] tells).
    pub fn new(
        name: &str,
        base_addr: u64,
        words: usize,
        threads: usize,
        op_limit: usize,
    ) -> Result<Recorder> {
        if threads == 0 || threads > MAX_THREADS {
            return Err(CxlsimError::param(
                "threads",
                format!("must be 1..={MAX_THREADS}"),
            ));
        }
        if base_addr % crate::config::LINE_BYTES != 0 {
            return Err(CxlsimError::param("base_addr", "must be 64-byte aligned"));
        }
        Ok(Recorder {
            name: name.to_string(),
            base_addr,
            words: vec![0; words],
            threads: vec![Vec::new(); threads],
            pending_gap: vec![0; threads],
            op_limit,
        })
    }

    /// Words in the region.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Whether the op limit cut the log short.
    pub fn truncated(&self) -> bool {
        self.logged() >= self.op_limit
    }

    /// Operations logged so far.
    pub fn logged(&self) -> usize {
        self.threads.iter().map(Vec::len).sum()
    }

    /// Byte address of a word.
    pub fn addr_of(&self, word: usize) -> u64 {
        self.base_addr + 8 * word as u64
    }

    fn log(&mut self, thread: usize, kind: OpKind, addr: u64) {
        let t = thread % self.threads.len();
        if self.logged() >= self.op_limit {
            return;
        }
        let gap_cycles = self.pending_gap[t].min(u64::from(u32::MAX)) as u32;
        self.pending_gap[t] = 0;
        self.threads[t].push(Op {
            addr,
            gap_cycles,
            kind,
        });
    }

    /// Account `cycles` of computation by `thread` before its next access.
    pub fn compute(&mut self, thread: usize, cycles: u64) {
        let t = thread % self.threads.len();
        self.pending_gap[t] = self.pending_gap[t].saturating_add(cycles);
    }

    /// Load a word (out-of-range words read as 0 and are logged at the region's end).
    pub fn read(&mut self, thread: usize, word: usize) -> u64 {
        let word = word.min(self.words.len().saturating_sub(1));
        self.log(thread, OpKind::Load, self.addr_of(word));
        self.words.get(word).copied().unwrap_or(0)
    }

    /// Store a word.
    pub fn write(&mut self, thread: usize, word: usize, value: u64) {
        let word = word.min(self.words.len().saturating_sub(1));
        self.log(thread, OpKind::Store, self.addr_of(word));
        if let Some(slot) = self.words.get_mut(word) {
            *slot = value;
        }
    }

    /// Load a word as f64.
    pub fn read_f64(&mut self, thread: usize, word: usize) -> f64 {
        f64::from_bits(self.read(thread, word))
    }

    /// Store a word as f64.
    pub fn write_f64(&mut self, thread: usize, word: usize, value: f64) {
        self.write(thread, word, value.to_bits());
    }

    /// Flush the line holding a word.
    pub fn flush(&mut self, thread: usize, word: usize) {
        let word = word.min(self.words.len().saturating_sub(1));
        let line_addr = self.addr_of(word) & !(crate::config::LINE_BYTES - 1);
        self.log(thread, OpKind::Flush, line_addr);
    }

    /// Fence: wait for this thread's flushes.
    pub fn fence(&mut self, thread: usize) {
        self.log(thread, OpKind::Fence, 0);
    }

    /// Store a word without logging it (input data already in PM before the region of interest).
    pub fn write_unlogged(&mut self, word: usize, value: u64) {
        if let Some(slot) = self.words.get_mut(word) {
            *slot = value;
        }
    }

    /// Current value of a word without logging (for checking results).
    pub fn peek(&self, word: usize) -> u64 {
        self.words.get(word).copied().unwrap_or(0)
    }

    /// The recorded trace.
    pub fn finish(self) -> Trace {
        Trace {
            name: self.name,
            threads: self.threads,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_after_each_flush_keeps_order_and_adds_no_double_fence() {
        let op = |kind, addr| Op {
            addr,
            gap_cycles: 3,
            kind,
        };
        let trace = Trace {
            name: "t".into(),
            threads: vec![vec![
                op(OpKind::Store, 64),
                op(OpKind::Flush, 64),
                op(OpKind::Flush, 128),
                op(OpKind::Fence, 0),
                op(OpKind::Load, 64),
            ]],
        };
        let strict = trace.with_fence_after_each_flush();
        let kinds: Vec<OpKind> = strict.threads[0].iter().map(|o| o.kind).collect();
        assert_eq!(
            kinds,
            [
                OpKind::Store,
                OpKind::Flush,
                OpKind::Fence,
                OpKind::Flush,
                OpKind::Fence,
                OpKind::Load
            ]
        );
        assert_eq!(strict.count(OpKind::Flush), 2);
        assert_eq!(strict.name, "t");
    }

    #[test]
    fn round_trip_text() {
        let mut rec = Recorder::new("t", 0x1000, 64, 2, 1000).unwrap();
        rec.compute(0, 5);
        rec.write(0, 3, 7);
        rec.flush(0, 3);
        rec.fence(0);
        assert_eq!(rec.read(1, 3), 7);
        let trace = rec.finish();
        let mut text = Vec::new();
        trace.write_to(&mut text).unwrap();
        let back = Trace::read_from("t", &text[..]).unwrap();
        assert_eq!(back.threads, trace.threads);
        assert_eq!(
            back.threads[0][0],
            Op {
                addr: 0x1018,
                gap_cycles: 5,
                kind: OpKind::Store
            }
        );
        assert_eq!(back.threads[0][1].addr, 0x1000);
    }

    #[test]
    fn parse_errors_name_the_line() {
        let text = format!("{HEADER}\n0 L 0x40 1\n0 Q 0x40 1\n");
        match Trace::read_from("t", text.as_bytes()) {
            Err(CxlsimError::TraceParse { line: 3, .. }) => {}
            other => panic!("expected a parse error on line 3, got {other:?}"),
        }
        assert!(Trace::read_from("t", "0 L 0x40 1\n".as_bytes()).is_err());
        let fence_with_addr = format!("{HEADER}\n0 X 0x40 1\n");
        assert!(Trace::read_from("t", fence_with_addr.as_bytes()).is_err());
        let comment = format!("{HEADER}\n# hi\n\n3 S 128 0 # store\n");
        let trace = Trace::read_from("t", comment.as_bytes()).unwrap();
        assert_eq!(trace.threads.len(), 4);
        assert_eq!(trace.threads[3][0].addr, 128);
    }

    #[test]
    fn op_limit_truncates() {
        let mut rec = Recorder::new("t", 0, 8, 1, 3).unwrap();
        for w in 0..8 {
            rec.write(0, w, w as u64);
        }
        assert!(rec.truncated());
        assert_eq!(rec.peek(7), 7);
        assert_eq!(rec.finish().op_count(), 3);
    }
}
