//! The discrete-event simulator: host cores and caches, a chain of CXL switches, the persist
//! buffer controller (PBC) and its selector (PBCS) in the first switch, and the PM device.
//!
//! Owns simulated time (picoseconds, `u64`), the event queue, every component's state and the
//! statistics. Determinism: events are ordered by (time, insertion sequence); nothing reads a
//! clock or an unseeded random source, so a (trace, params) pair always gives the same run.
//!
//! Topology: position 0 is the host, positions 1..=hops the switches, hops+1 the PM device.
//! Every link direction is a FIFO port: a packet departs at max(ready, port free) and holds the
//! port for its serialisation time, so packets sent earlier on a port arrive earlier.
//!
//! Switch: `switch_stages` pipeline stages. The selector runs in parallel with routing and
//! decides before switch allocation, so a packet sent to the PBC spends the stages before
//! allocation (`switch_stages - 2`) before the PI buffer, and a packet leaving through the PO
//! buffer spends the last 2 (allocation, traversal) after it: unrelated traffic never waits for
//! the PB (paper §V-C).
//!
//! PM: a write-pending queue in the ADR domain (a write is persistent and acknowledged on
//! acceptance) in front of line-interleaved banks; banks serve reads first and write when the
//! queue passes gem5's high mark, or its low mark with no read waiting (`pm_reads_first`; off,
//! each bank serves in arrival order). Accesses take effect and are checked on arrival at the
//! controller; a bank only times the response. Bank queues hold at most the write queue's
//! entries and the reads in flight.
//!
//! PBC (paper §V-B, §V-D): one packet at a time; acknowledgements first (deadlock rule, §V-D2),
//! then drain-packet creation, then requests in PI order. A write that finds no Empty entry
//! starts draining the LRU Dirty entry and stalls the PI queue until an acknowledgement frees
//! an entry. Bounds: PI queues hold at most cores x (outstanding + 2) + entries packets;
//! per-core in-flight lists at most outstanding + 2 (an eviction write-back can ride along the
//! fill that caused it). Overflows are reported as errors, never grown silently.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

use crate::cache::CacheArray;
use crate::config::{ns_to_ps, Fault, Params, Scheme, LINE_BYTES};
use crate::error::{CxlsimError, Result};
use crate::model::{crash_points, LineMap, LineSet, Model, Violation};
use crate::pb::{PbHeader, PbState, PersistBuffer};
use crate::trace::{OpKind, Trace};

/// Marker: a read carries no expected version yet.
const NO_EXPECTATION: u64 = u64::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PktKind {
    ReadReq,
    WriteReq,
    ReadResp,
    WriteAck,
}

/// A CXL.mem packet (one or two flits).
#[derive(Debug, Clone, Copy)]
struct Packet {
    kind: PktKind,
    line: u64,
    value: u64,
    pd_seq: u64,
    id: u64,
    issue_ps: u64,
    expected: u64,
    core: u16,
    /// The PB is the source of the write (a drain) and the destination of its acknowledgement.
    pb_owned: bool,
    /// The write is a flush (a fence waits for it), not an eviction write-back.
    flush: bool,
}

impl Packet {
    fn flits(&self) -> u64 {
        match self.kind {
            PktKind::WriteReq | PktKind::ReadResp => 2,
            PktKind::ReadReq | PktKind::WriteAck => 1,
        }
    }
}

/// An event. Packets live in the simulator's packet slab and events carry their slot, which
/// keeps an event at 32 bytes (the heap moves events on every push and pop).
#[derive(Debug, Clone, Copy)]
enum Ev {
    CoreStep(u32),
    Arrive {
        pos: u32,
        down: bool,
        pkt: u32,
    },
    PiArrive(u32),
    PbcStep,
    PmDone(u32),
    PmRespond(u32),
    /// A PM bank finished its current access (write-pending-queue mode).
    BankDone(u32),
}

/// What a PM bank is doing (write-pending-queue mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BankOp {
    Idle,
    /// Reading for the response parked in this packet slot.
    Read(u32),
    /// Writing this line from the write-pending queue.
    Write(u64),
}

struct Event {
    time_ps: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.time_ps == other.time_ps && self.seq == other.seq
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.time_ps, self.seq).cmp(&(other.time_ps, other.seq))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CoreState {
    Ready,
    WaitRead,
    WaitFence,
    WaitSlot,
    WaitEnd,
    Done,
}

#[derive(Debug, Clone, Copy)]
struct Inflight {
    id: u64,
    line: u64,
    value: u64,
    is_write: bool,
    /// A read miss fetched for a store: the store is applied when the line arrives.
    store: bool,
}

struct Core {
    pc: usize,
    local_ps: u64,
    gap_paid: bool,
    state: CoreState,
    inflight: Vec<Inflight>,
    flushes_pending: u32,
    /// Read misses in flight (at most `miss_window`).
    pending_reads: usize,
    /// When the current wait (WaitRead / WaitSlot / WaitFence) began.
    wait_since_ps: u64,
    finish_ps: u64,
}

/// Statistics of one run. Latencies are sums; use the methods for means and rates.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Workload name.
    pub workload: String,
    /// Scheme.
    pub scheme: Option<Scheme>,
    /// Switch hops.
    pub hops: usize,
    /// PB entries.
    pub pb_entries: usize,
    /// Simulated time until the last core finished.
    pub sim_time_ps: u64,
    /// Events processed.
    pub events: u64,
    /// Trace operations executed.
    pub ops: u64,
    /// Flushes acknowledged (persists).
    pub persists: u64,
    /// Sum of flush-to-acknowledgement latencies.
    pub persist_latency_ps_sum: u64,
    /// Reads that left the L2 (fabric reads).
    pub fabric_reads: u64,
    /// Sum of their latencies (L2 miss to data back).
    pub read_latency_ps_sum: u64,
    /// Dirty lines written back on L2 eviction.
    pub writebacks: u64,
    /// Reads seen by the first switch's selector.
    pub pb_reads_seen: u64,
    /// Reads served from the PB.
    pub pb_read_hits: u64,
    /// Reads the selector sent through the PI buffer.
    pub pb_reads_rerouted: u64,
    /// Writes processed by the PBC.
    pub pb_writes_seen: u64,
    /// Writes coalesced into a Dirty entry.
    pub pb_coalesced: u64,
    /// Drain packets sent to PM.
    pub pb_drains: u64,
    /// Times the PBC stalled for want of an Empty entry.
    pub pb_stalls: u64,
    /// Core time spent waiting at fences for flush acknowledgements, summed over cores.
    pub fence_stall_ps_sum: u64,
    /// Core time spent waiting for read data (full miss window or a line with a miss in
    /// flight), summed over cores.
    pub read_stall_ps_sum: u64,
    /// Core time spent waiting for a free outstanding-request slot, summed over cores.
    pub slot_stall_ps_sum: u64,
    /// PM reads served.
    pub pm_reads: u64,
    /// PM writes performed.
    pub pm_writes: u64,
    /// Reads compared with the model.
    pub reads_checked: u64,
    /// Crash points evaluated.
    pub crash_points_checked: u64,
    /// Correctness violations found.
    pub violation_count: u64,
    /// The first violations.
    pub violations: Vec<Violation>,
}

impl Stats {
    /// Add another run of the same configuration (repeats): sums times, counts and latency
    /// sums, so the means and rates become the means over the repeats.
    pub fn accumulate(&mut self, other: &Stats) {
        self.sim_time_ps += other.sim_time_ps;
        self.events += other.events;
        self.ops += other.ops;
        self.persists += other.persists;
        self.persist_latency_ps_sum += other.persist_latency_ps_sum;
        self.fabric_reads += other.fabric_reads;
        self.read_latency_ps_sum += other.read_latency_ps_sum;
        self.writebacks += other.writebacks;
        self.pb_reads_seen += other.pb_reads_seen;
        self.pb_read_hits += other.pb_read_hits;
        self.pb_reads_rerouted += other.pb_reads_rerouted;
        self.pb_writes_seen += other.pb_writes_seen;
        self.pb_coalesced += other.pb_coalesced;
        self.pb_drains += other.pb_drains;
        self.pb_stalls += other.pb_stalls;
        self.fence_stall_ps_sum += other.fence_stall_ps_sum;
        self.read_stall_ps_sum += other.read_stall_ps_sum;
        self.slot_stall_ps_sum += other.slot_stall_ps_sum;
        self.pm_reads += other.pm_reads;
        self.pm_writes += other.pm_writes;
        self.reads_checked += other.reads_checked;
        self.crash_points_checked += other.crash_points_checked;
        self.violation_count += other.violation_count;
        self.violations.extend(other.violations.iter().cloned());
    }

    /// Mean persist latency in ns (0 when no persist happened).
    pub fn persist_latency_ns(&self) -> f64 {
        if self.persists == 0 {
            0.0
        } else {
            self.persist_latency_ps_sum as f64 / self.persists as f64 / 1000.0
        }
    }
    /// Mean fabric read latency in ns.
    pub fn read_latency_ns(&self) -> f64 {
        if self.fabric_reads == 0 {
            0.0
        } else {
            self.read_latency_ps_sum as f64 / self.fabric_reads as f64 / 1000.0
        }
    }
    /// Share of reads reaching the first switch served by the PB.
    pub fn read_hit_rate(&self) -> f64 {
        if self.pb_reads_seen == 0 {
            0.0
        } else {
            self.pb_read_hits as f64 / self.pb_reads_seen as f64
        }
    }
    /// Share of PB writes coalesced into a Dirty entry.
    pub fn coalesce_rate(&self) -> f64 {
        if self.pb_writes_seen == 0 {
            0.0
        } else {
            self.pb_coalesced as f64 / self.pb_writes_seen as f64
        }
    }
    /// Share of the cores' time (cores x simulated time) spent waiting at fences.
    pub fn fence_stall_share(&self, cores: usize) -> f64 {
        self.stall_share(self.fence_stall_ps_sum, cores)
    }
    /// Share of the cores' time spent waiting for read data.
    pub fn read_stall_share(&self, cores: usize) -> f64 {
        self.stall_share(self.read_stall_ps_sum, cores)
    }
    /// Share of the cores' time spent waiting for a free outstanding-request slot.
    pub fn slot_stall_share(&self, cores: usize) -> f64 {
        self.stall_share(self.slot_stall_ps_sum, cores)
    }
    fn stall_share(&self, stall_ps: u64, cores: usize) -> f64 {
        let total = self.sim_time_ps as f64 * cores as f64;
        if total == 0.0 {
            0.0
        } else {
            stall_ps as f64 / total
        }
    }
    /// Simulated time in microseconds.
    pub fn sim_time_us(&self) -> f64 {
        self.sim_time_ps as f64 / 1e6
    }
}

/// Result of a real crash at an event index followed by recovery.
#[derive(Debug, Clone)]
pub struct CrashOutcome {
    /// Simulated crash time.
    pub time_ps: u64,
    /// PB entries that survived and were drained by recovery.
    pub survivors: usize,
    /// Violations (all kinds) found up to and including recovery.
    pub violation_count: u64,
    /// The first of them.
    pub violations: Vec<Violation>,
}

/// One simulation of a trace under a set of parameters.
pub struct Simulator<'t> {
    p: Params,
    trace: &'t Trace,
    cycle_ps: u64,
    l1_ps: u64,
    l2_ps: u64,
    stage_ps: u64,
    link_ps: u64,
    flit_ps: u64,
    tag_ps: u64,
    data_ps: u64,
    pm_read_ps: u64,
    pm_write_ps: u64,
    pb_active: bool,
    rf_high: usize,
    rf_low: usize,

    now_ps: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<Event>>,
    next_value: u64,
    next_id: u64,

    cores: Vec<Core>,
    l1: Vec<CacheArray>,
    l2: CacheArray,
    port_down_free_ps: Vec<u64>,
    port_up_free_ps: Vec<u64>,
    pm_bank_free_ps: Vec<u64>,
    pm_ctrl_ps: u64,
    pm_waiting: VecDeque<Packet>,
    wpq_lines: LineMap<u32>,
    wpq_len: usize,
    wpq_high: usize,
    wpq_low: usize,
    /// Per bank: reads waiting (arrival number, response slot) and writes of the write-pending
    /// queue not yet started (arrival number, line); what the bank is doing.
    pm_bank_reads: Vec<VecDeque<(u64, u32)>>,
    pm_bank_writes: Vec<VecDeque<(u64, u64)>>,
    pm_bank_op: Vec<BankOp>,
    pm_arrivals: u64,
    /// Scratch set of lines with a write waiting for room (reused by `pm_pump`).
    pm_blocked_lines: LineSet,

    pb: PersistBuffer,
    pi_acks: VecDeque<Packet>,
    pi_reqs: VecDeque<Packet>,
    drain_queue: VecDeque<usize>,
    pi_capacity: usize,
    /// Bound on the checker's unacknowledged versions: every one is a write in flight between
    /// its PD entry and the host (see `model`).
    unacked_bound: usize,
    pbc_scheduled: bool,
    pbc_free_ps: u64,
    pbc_stalled: bool,

    packets: Vec<Packet>,
    free_packets: Vec<u32>,
    cores_done: usize,
    model: Model,
    stats: Stats,
}

impl<'t> Simulator<'t> {
    /// Build a simulator; fails on invalid parameters or a trace with more threads than cores.
    pub fn new(params: &Params, trace: &'t Trace) -> Result<Simulator<'t>> {
        params.validate()?;
        if trace.threads.len() > params.cores {
            return Err(CxlsimError::param(
                "cores",
                format!(
                    "trace {} has {} threads but only {} cores",
                    trace.name,
                    trace.threads.len(),
                    params.cores
                ),
            ));
        }
        let p = params.clone();
        let cycle_ps = p.cycle_ps();
        let l1_sets = p.l1_bytes / LINE_BYTES as usize / p.l1_ways;
        let l2_sets = p.l2_bytes / LINE_BYTES as usize / p.l2_ways;
        let flit_ps = ((p.flit_bytes as f64 / p.link_gbps) * 1000.0)
            .round()
            .max(1.0) as u64;
        let pb_active = p.scheme != Scheme::NoPb && p.hops >= 1;
        let cores = (0..p.cores)
            .map(|_| Core {
                pc: 0,
                local_ps: 0,
                gap_paid: false,
                state: CoreState::Ready,
                inflight: Vec::with_capacity(p.outstanding_per_core + 2),
                flushes_pending: 0,
                pending_reads: 0,
                wait_since_ps: 0,
                finish_ps: 0,
            })
            .collect();
        let mut sim = Simulator {
            cycle_ps,
            l1_ps: p.l1_hit_cycles * cycle_ps,
            l2_ps: p.l2_hit_cycles * cycle_ps,
            stage_ps: ns_to_ps(p.switch_stage_ns),
            link_ps: ns_to_ps(p.link_ns),
            flit_ps,
            tag_ps: ns_to_ps(p.tag_ns()),
            data_ps: ns_to_ps(p.pb_data_ns),
            pm_read_ps: ns_to_ps(p.pm_read_ns),
            pm_write_ps: ns_to_ps(p.pm_write_ns),
            pb_active,
            rf_high: p.rf_high_entries(),
            rf_low: p.rf_low_entries(),
            now_ps: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            next_value: 1,
            next_id: 1,
            cores,
            l1: (0..p.cores)
                .map(|_| CacheArray::new(l1_sets, p.l1_ways))
                .collect(),
            l2: CacheArray::new(l2_sets, p.l2_ways),
            port_down_free_ps: vec![0; p.hops + 2],
            port_up_free_ps: vec![0; p.hops + 2],
            pm_bank_free_ps: vec![0; p.pm_banks],
            pm_ctrl_ps: ns_to_ps(p.pm_ctrl_ns),
            pm_waiting: VecDeque::new(),
            wpq_lines: LineMap::default(),
            wpq_len: 0,
            wpq_high: p.wpq_high_entries(),
            wpq_low: p.wpq_low_entries(),
            pm_bank_reads: vec![VecDeque::new(); p.pm_banks],
            pm_bank_writes: vec![VecDeque::new(); p.pm_banks],
            pm_bank_op: vec![BankOp::Idle; p.pm_banks],
            pm_arrivals: 0,
            pm_blocked_lines: LineSet::default(),
            pb: PersistBuffer::new(p.pb_entries),
            pi_acks: VecDeque::new(),
            pi_reqs: VecDeque::new(),
            drain_queue: VecDeque::new(),
            pi_capacity: p.cores * (p.outstanding_per_core + 2) + p.pb_entries,
            unacked_bound: 2 * (p.cores * (p.outstanding_per_core + 2) + p.pb_entries),
            pbc_scheduled: false,
            pbc_free_ps: 0,
            pbc_stalled: false,
            packets: Vec::new(),
            free_packets: Vec::new(),
            cores_done: 0,
            model: Model::new(),
            stats: Stats {
                workload: trace.name.clone(),
                scheme: Some(p.scheme),
                hops: p.hops,
                pb_entries: p.pb_entries,
                ..Stats::default()
            },
            p,
            trace,
        };
        for c in 0..sim.cores.len() {
            let start_ps = if sim.p.start_jitter_cycles == 0 {
                0
            } else {
                let seed = sim.p.jitter_seed ^ ((c as u64 + 1) << 32);
                crash_points(seed, 1, sim.p.start_jitter_cycles + 1)[0] * cycle_ps
            };
            sim.cores[c].local_ps = start_ps;
            sim.schedule(start_ps, Ev::CoreStep(c as u32));
        }
        Ok(sim)
    }

    fn schedule(&mut self, time_ps: u64, ev: Ev) {
        debug_assert!(time_ps >= self.now_ps, "event scheduled in the past");
        self.seq += 1;
        self.queue.push(Reverse(Event {
            time_ps,
            seq: self.seq,
            ev,
        }));
    }

    /// Park a packet in the slab; its slot travels in the event.
    fn stash(&mut self, pkt: Packet) -> u32 {
        match self.free_packets.pop() {
            Some(slot) => {
                self.packets[slot as usize] = pkt;
                slot
            }
            None => {
                self.packets.push(pkt);
                (self.packets.len() - 1) as u32
            }
        }
    }

    /// Take a packet out of the slab, freeing its slot.
    fn take(&mut self, slot: u32) -> Packet {
        self.free_packets.push(slot);
        self.packets[slot as usize]
    }

    fn horizon_ps(&self) -> u64 {
        self.queue.peek().map_or(u64::MAX, |Reverse(e)| e.time_ps)
    }

    /// Run to completion, evaluating a crash at each event index of `crash_points` (sorted
    /// ascending; indices past the end are evaluated on the final state).
    pub fn run(mut self, crash_points: &[u64]) -> Result<Stats> {
        let mut next_crash = 0;
        while self.cores_done < self.cores.len() {
            while next_crash < crash_points.len() && crash_points[next_crash] <= self.stats.events {
                self.crash_check();
                next_crash += 1;
            }
            self.step()?;
        }
        while next_crash < crash_points.len() {
            self.crash_check();
            next_crash += 1;
        }
        Ok(self.finish())
    }

    /// Run `events` events (or to completion), then crash for real and recover.
    pub fn run_then_crash(mut self, events: u64) -> Result<CrashOutcome> {
        while self.cores_done < self.cores.len() && self.stats.events < events {
            self.step()?;
        }
        // Everything volatile is lost: packets in flight, PI/PO contents, caches, cores.
        self.queue.clear();
        self.pi_acks.clear();
        self.pi_reqs.clear();
        self.drain_queue.clear();
        for l1 in &mut self.l1 {
            l1.clear();
        }
        self.l2.clear();
        let survivors = self.pb.survivors().len();
        let pb = if self.pb_active {
            Some(&mut self.pb)
        } else {
            None
        };
        self.model.recover(self.now_ps, pb);
        Ok(CrashOutcome {
            time_ps: self.now_ps,
            survivors,
            violation_count: self.model.violation_count(),
            violations: self.model.violations().to_vec(),
        })
    }

    fn crash_check(&mut self) {
        debug_assert_eq!(self.pb.validate(), Ok(()));
        let pb = if self.pb_active { Some(&self.pb) } else { None };
        self.model.crash_check(self.now_ps, pb);
    }

    fn finish(mut self) -> Stats {
        // Every core waited for its writes' acknowledgements before finishing, so every version
        // that entered the PD has been acknowledged (early-ack leaves PM writes in flight).
        debug_assert!(self.p.fault == Fault::EarlyAck || self.model.unacked_len() == 0);
        self.stats.sim_time_ps = self.cores.iter().map(|c| c.finish_ps).max().unwrap_or(0);
        self.stats.reads_checked = self.model.reads_checked();
        self.stats.crash_points_checked = self.model.crash_points_checked();
        self.stats.violation_count = self.model.violation_count();
        self.stats.violations = self.model.violations().to_vec();
        self.stats
    }

    fn step(&mut self) -> Result<()> {
        let Some(Reverse(event)) = self.queue.pop() else {
            return Err(CxlsimError::Deadlock {
                time_ps: self.now_ps,
                reason: self.stall_reason(),
            });
        };
        self.stats.events += 1;
        if self.stats.events > self.p.event_budget {
            return Err(CxlsimError::EventBudget {
                budget: self.p.event_budget,
            });
        }
        self.now_ps = event.time_ps;
        match event.ev {
            Ev::CoreStep(c) => self.core_step(c as usize),
            Ev::Arrive { pos, down, pkt } => {
                let pkt = self.take(pkt);
                self.arrive(pos as usize, down, pkt)
            }
            Ev::PiArrive(pkt) => {
                let pkt = self.take(pkt);
                self.pi_arrive(pkt)
            }
            Ev::PbcStep => self.pbc_step(),
            Ev::PmDone(pkt) => {
                let pkt = self.take(pkt);
                self.pm_done(pkt);
                Ok(())
            }
            Ev::PmRespond(pkt) => {
                let pkt = self.take(pkt);
                let from = self.p.hops + 1;
                self.send(from, false, pkt, self.now_ps);
                Ok(())
            }
            Ev::BankDone(bank) => {
                self.bank_done(bank as usize);
                Ok(())
            }
        }
    }

    fn stall_reason(&self) -> String {
        let waiting = self
            .cores
            .iter()
            .filter(|c| c.state != CoreState::Done)
            .count();
        format!(
            "{waiting} cores waiting; PBC stalled={} PI acks={} PI requests={} drains queued={} PB dirty={} of {}",
            self.pbc_stalled,
            self.pi_acks.len(),
            self.pi_reqs.len(),
            self.drain_queue.len(),
            self.pb.dirty_count(),
            self.pb.capacity()
        )
    }

    // ---------------------------------------------------------------- host

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn core_step(&mut self, c: usize) -> Result<()> {
        let ops: &'t [crate::trace::Op] = self.trace.threads.get(c).map_or(&[], |v| v.as_slice());
        loop {
            let core = &mut self.cores[c];
            if core.state != CoreState::Ready {
                return Ok(());
            }
            if core.pc >= ops.len() {
                if core.inflight.is_empty() {
                    core.state = CoreState::Done;
                    core.finish_ps = core.local_ps.max(self.now_ps);
                    self.cores_done += 1;
                } else {
                    core.state = CoreState::WaitEnd;
                }
                return Ok(());
            }
            let op = ops[core.pc];
            if !core.gap_paid {
                core.local_ps += u64::from(op.gap_cycles) * self.cycle_ps;
                core.gap_paid = true;
            }
            let line = op.addr / LINE_BYTES;
            // Private L1 hits touch no shared state: run them ahead of the clock.
            if matches!(op.kind, OpKind::Load | OpKind::Store) {
                if let Some(slot) = self.l1[c].find(line) {
                    if op.kind == OpKind::Store {
                        let v = self.next_value;
                        self.next_value += 1;
                        self.l1[c].write(slot, v);
                    } else {
                        self.l1[c].touch(slot);
                    }
                    let core = &mut self.cores[c];
                    core.local_ps += self.l1_ps;
                    core.pc += 1;
                    core.gap_paid = false;
                    self.stats.ops += 1;
                    continue;
                }
            }
            // Shared state: only when no other event comes first.
            let local = self.cores[c].local_ps;
            if local > self.now_ps && local >= self.horizon_ps() {
                self.schedule(local, Ev::CoreStep(c as u32));
                return Ok(());
            }
            self.now_ps = self.now_ps.max(local);
            let advanced = match op.kind {
                OpKind::Load | OpKind::Store => {
                    self.core_miss(c, line, op.kind == OpKind::Store)?
                }
                OpKind::Flush => self.core_flush(c, line)?,
                OpKind::Fence => {
                    let core = &mut self.cores[c];
                    if core.flushes_pending == 0 {
                        core.local_ps += self.cycle_ps;
                        true
                    } else {
                        core.state = CoreState::WaitFence;
                        core.wait_since_ps = self.now_ps;
                        false
                    }
                }
            };
            if advanced {
                let core = &mut self.cores[c];
                core.pc += 1;
                core.gap_paid = false;
                self.stats.ops += 1;
            }
        }
    }

    /// Whether the core has a read miss in flight for `line` (later accesses to it wait).
    fn read_pending(&self, c: usize, line: u64) -> bool {
        self.cores[c].pending_reads > 0
            && self.cores[c]
                .inflight
                .iter()
                .any(|f| !f.is_write && f.line == line)
    }

    /// L1 miss of a load or store at `now`. Returns whether the op retired (a miss retires
    /// into the miss window; the core stalls when the window is full).
    fn core_miss(&mut self, c: usize, line: u64, store: bool) -> Result<bool> {
        if self.read_pending(c, line) {
            self.cores[c].state = CoreState::WaitRead;
            self.cores[c].wait_since_ps = self.now_ps;
            return Ok(false);
        }
        let hit_value = if let Some(slot) = self.l2.find(line) {
            self.l2.touch(slot);
            Some(self.l2.value(slot))
        } else {
            // A line whose write is still in flight is served from the write-back buffer.
            let buffered = self.cores[c]
                .inflight
                .iter()
                .rev()
                .find(|f| f.is_write && f.line == line)
                .map(|f| f.value);
            // Its fill may evict a dirty L2 line, i.e. add a write-back: it needs a free slot
            // like a miss does, or repeated buffer hits would grow the in-flight list.
            if buffered.is_some() && self.cores[c].inflight.len() >= self.p.outstanding_per_core {
                self.cores[c].state = CoreState::WaitSlot;
                self.cores[c].wait_since_ps = self.now_ps;
                return Ok(false);
            }
            buffered
        };
        if let Some(value) = hit_value {
            self.fill(c, line, value, store)?;
            self.cores[c].local_ps += self.l1_ps + self.l2_ps;
            return Ok(true);
        }
        if self.cores[c].inflight.len() >= self.p.outstanding_per_core {
            self.cores[c].state = CoreState::WaitSlot;
            self.cores[c].wait_since_ps = self.now_ps;
            return Ok(false);
        }
        let id = self.new_id();
        let core = &mut self.cores[c];
        core.inflight.push(Inflight {
            id,
            line,
            value: 0,
            is_write: false,
            store,
        });
        core.pending_reads += 1;
        let issue = core.local_ps;
        core.local_ps += self.l1_ps + self.l2_ps;
        if core.pending_reads >= self.p.miss_window {
            core.state = CoreState::WaitRead;
            core.wait_since_ps = self.now_ps;
        }
        let pkt = Packet {
            kind: PktKind::ReadReq,
            line,
            value: 0,
            pd_seq: 0,
            id,
            issue_ps: issue,
            expected: NO_EXPECTATION,
            core: c as u16,
            pb_owned: false,
            flush: false,
        };
        self.send(0, true, pkt, issue + self.l1_ps + self.l2_ps);
        Ok(true)
    }

    /// Bring `line` into L2 and the core's L1 (inclusive), writing back what falls out.
    fn fill(&mut self, c: usize, line: u64, value: u64, store: bool) -> Result<()> {
        if self.l2.find(line).is_none() {
            let (_, evicted) = self.l2.insert(line, value, false);
            if let Some(ev) = evicted {
                let mut dirty = ev.dirty;
                let mut v = ev.value;
                for l1 in &mut self.l1 {
                    if let Some(s) = l1.find(ev.line) {
                        let out = l1.invalidate(s);
                        if out.dirty {
                            dirty = true;
                            v = out.value;
                        }
                    }
                }
                if dirty {
                    self.write_back(c, ev.line, v, false)?;
                }
            }
        }
        if self.l1[c].find(line).is_none() {
            let (_, evicted) = self.l1[c].insert(line, value, false);
            if let Some(ev) = evicted.filter(|e| e.dirty) {
                match self.l2.find(ev.line) {
                    Some(s) => self.l2.write(s, ev.value),
                    None => {
                        debug_assert!(false, "inclusion broken: L1 victim not in L2");
                        self.write_back(c, ev.line, ev.value, false)?;
                    }
                }
            }
        }
        if store {
            let v = self.next_value;
            self.next_value += 1;
            if let Some(s) = self.l1[c].find(line) {
                self.l1[c].write(s, v);
            }
        }
        Ok(())
    }

    fn write_back(&mut self, c: usize, line: u64, value: u64, flush: bool) -> Result<()> {
        let bound = self.p.outstanding_per_core + 2;
        if self.cores[c].inflight.len() >= bound {
            return Err(CxlsimError::Overflow {
                name: "core in-flight list",
                capacity: bound,
            });
        }
        let id = self.new_id();
        let core = &mut self.cores[c];
        core.inflight.push(Inflight {
            id,
            line,
            value,
            is_write: true,
            store: false,
        });
        if flush {
            core.flushes_pending += 1;
        } else {
            self.stats.writebacks += 1;
        }
        let issue = self.now_ps;
        let pkt = Packet {
            kind: PktKind::WriteReq,
            line,
            value,
            pd_seq: 0,
            id,
            issue_ps: issue,
            expected: NO_EXPECTATION,
            core: c as u16,
            pb_owned: false,
            flush,
        };
        self.send(0, true, pkt, issue + self.l2_ps);
        Ok(())
    }

    /// clflushopt at `now`: write the line back if any level holds it dirty, drop every copy.
    fn core_flush(&mut self, c: usize, line: u64) -> Result<bool> {
        if self.read_pending(c, line) {
            self.cores[c].state = CoreState::WaitRead;
            self.cores[c].wait_since_ps = self.now_ps;
            return Ok(false);
        }
        let mut dirty_value: Option<u64> = None;
        if let Some(s) = self.l1[c].find(line).filter(|&s| self.l1[c].is_dirty(s)) {
            dirty_value = Some(self.l1[c].value(s));
        }
        if dirty_value.is_none() {
            for l1 in &self.l1 {
                if let Some(s) = l1.find(line).filter(|&s| l1.is_dirty(s)) {
                    dirty_value = Some(l1.value(s));
                    break;
                }
            }
        }
        if dirty_value.is_none() {
            if let Some(s) = self.l2.find(line).filter(|&s| self.l2.is_dirty(s)) {
                dirty_value = Some(self.l2.value(s));
            }
        }
        if dirty_value.is_some() && self.cores[c].inflight.len() >= self.p.outstanding_per_core {
            self.cores[c].state = CoreState::WaitSlot;
            self.cores[c].wait_since_ps = self.now_ps;
            return Ok(false);
        }
        for l1 in &mut self.l1 {
            if let Some(s) = l1.find(line) {
                l1.invalidate(s);
            }
        }
        if let Some(s) = self.l2.find(line) {
            self.l2.invalidate(s);
        }
        match dirty_value {
            Some(value) => {
                self.write_back(c, line, value, true)?;
                self.cores[c].local_ps += self.l1_ps;
            }
            None => self.cores[c].local_ps += self.l2_ps,
        }
        Ok(true)
    }

    fn host_receive(&mut self, pkt: Packet) -> Result<()> {
        let c = usize::from(pkt.core);
        let now = self.now_ps;
        let Some(at) = self.cores[c].inflight.iter().position(|f| f.id == pkt.id) else {
            debug_assert!(false, "response for an unknown request");
            return Ok(());
        };
        let done = self.cores[c].inflight.swap_remove(at);
        match pkt.kind {
            PktKind::ReadResp => {
                self.stats.fabric_reads += 1;
                self.stats.read_latency_ps_sum += now - pkt.issue_ps;
                self.cores[c].pending_reads -= 1;
                self.fill(c, pkt.line, pkt.value, done.store)?;
            }
            PktKind::WriteAck => {
                self.model.acknowledged(pkt.line, pkt.value, now);
                if self.model.unacked_len() > self.unacked_bound {
                    return Err(CxlsimError::Overflow {
                        name: "checker unacknowledged versions",
                        capacity: self.unacked_bound,
                    });
                }
                if pkt.flush {
                    self.cores[c].flushes_pending -= 1;
                    self.stats.persists += 1;
                    self.stats.persist_latency_ps_sum += now - pkt.issue_ps;
                }
            }
            PktKind::ReadReq | PktKind::WriteReq => {
                debug_assert!(false, "request delivered to the host");
                return Ok(());
            }
        }
        let core = &mut self.cores[c];
        let wake = match core.state {
            // A read wait ends only with a read response (window slot or conflicting line).
            CoreState::WaitRead => pkt.kind == PktKind::ReadResp,
            CoreState::WaitSlot => true,
            CoreState::WaitFence => core.flushes_pending == 0,
            CoreState::WaitEnd => core.inflight.is_empty(),
            CoreState::Ready | CoreState::Done => false,
        };
        if wake {
            let waited_ps = now.saturating_sub(core.wait_since_ps);
            match core.state {
                CoreState::WaitRead => self.stats.read_stall_ps_sum += waited_ps,
                CoreState::WaitSlot => self.stats.slot_stall_ps_sum += waited_ps,
                CoreState::WaitFence => self.stats.fence_stall_ps_sum += waited_ps,
                CoreState::WaitEnd | CoreState::Ready | CoreState::Done => {}
            }
            core.state = CoreState::Ready;
            let resume = if pkt.kind == PktKind::ReadResp {
                now + self.l1_ps
            } else {
                now
            };
            core.local_ps = core.local_ps.max(resume);
        }
        if self.cores[c].state == CoreState::Ready {
            self.core_step(c)?;
        }
        Ok(())
    }

    // ---------------------------------------------------------------- fabric

    fn send(&mut self, from: usize, down: bool, pkt: Packet, ready_ps: u64) {
        let serialise_ps = pkt.flits() * self.flit_ps;
        let port = if down {
            &mut self.port_down_free_ps[from]
        } else {
            &mut self.port_up_free_ps[from]
        };
        let depart = ready_ps.max(*port);
        *port = depart + serialise_ps;
        let to = if down { from + 1 } else { from - 1 } as u32;
        let slot = self.stash(pkt);
        self.schedule(
            depart + serialise_ps + self.link_ps,
            Ev::Arrive {
                pos: to,
                down,
                pkt: slot,
            },
        );
    }

    fn arrive(&mut self, pos: usize, down: bool, pkt: Packet) -> Result<()> {
        if down && pos == self.p.hops + 1 {
            return self.pm_accept(pkt);
        }
        if !down && pos == 0 {
            return self.host_receive(pkt);
        }
        if pos == 1 && self.pb_active && self.p.fault == Fault::EarlyAck && !pkt.pb_owned {
            match (down, pkt.kind) {
                (true, PktKind::WriteReq) => {
                    // Broken on purpose: acknowledge now, keep no PB entry, forward to PM.
                    let ready = self.now_ps + self.p.switch_stages * self.stage_ps;
                    let ack = Packet {
                        kind: PktKind::WriteAck,
                        ..pkt
                    };
                    self.send(1, false, ack, ready);
                    self.send(1, true, pkt, ready);
                    return Ok(());
                }
                // PM's acknowledgement of a write already acknowledged: swallowed.
                (false, PktKind::WriteAck) => return Ok(()),
                _ => {}
            }
        }
        if pos == 1 && self.pb_active && self.selector_takes(down, &pkt) {
            // The selector decides before switch allocation: the packet leaves the pipeline
            // for the PI buffer after the stages that precede it.
            let ready = self.now_ps + (self.p.switch_stages - 2) * self.stage_ps;
            let slot = self.stash(pkt);
            self.schedule(ready, Ev::PiArrive(slot));
            return Ok(());
        }
        let mut pkt = pkt;
        if pos == 1 && self.pb_active && down && pkt.kind == PktKind::ReadReq {
            // The selector let the read pass: PM holds the latest persisted version now.
            pkt.expected = self.model.latest(pkt.line);
        }
        let ready = self.now_ps + self.p.switch_stages * self.stage_ps;
        self.send(pos, down, pkt, ready);
        Ok(())
    }

    /// PBCS (paper §V-C): decide, in parallel with routing, whether the PBC must see a packet.
    fn selector_takes(&mut self, down: bool, pkt: &Packet) -> bool {
        match (down, pkt.kind) {
            (true, PktKind::WriteReq) => !pkt.pb_owned,
            (true, PktKind::ReadReq) => {
                self.stats.pb_reads_seen += 1;
                let take = match self.pb.youngest(pkt.line).map(|i| self.pb.entry(i).state) {
                    Some(PbState::Dirty) => true,
                    Some(PbState::Drain) => self.p.fault != Fault::ReadBypassDrain,
                    _ => false,
                };
                if take {
                    self.stats.pb_reads_rerouted += 1;
                }
                take
            }
            (false, PktKind::WriteAck) => pkt.pb_owned,
            _ => false,
        }
    }

    // ---------------------------------------------------------------- PB controller

    fn pi_arrive(&mut self, pkt: Packet) -> Result<()> {
        if self.pi_acks.len() + self.pi_reqs.len() >= self.pi_capacity {
            return Err(CxlsimError::Overflow {
                name: "PI buffer",
                capacity: self.pi_capacity,
            });
        }
        if pkt.kind == PktKind::WriteAck && self.p.fault != Fault::AckBehindRequests {
            self.pi_acks.push_back(pkt);
        } else {
            self.pi_reqs.push_back(pkt);
        }
        self.kick_pbc();
        Ok(())
    }

    fn pbc_has_work(&self) -> bool {
        !self.pi_acks.is_empty()
            || !self.drain_queue.is_empty()
            || (!self.pi_reqs.is_empty() && !self.pbc_stalled)
    }

    fn kick_pbc(&mut self) {
        if !self.pbc_scheduled && self.pbc_has_work() {
            self.pbc_scheduled = true;
            let at = self.now_ps.max(self.pbc_free_ps);
            self.schedule(at, Ev::PbcStep);
        }
    }

    /// Send a packet out of the PO buffer of switch 1.
    fn po_send(&mut self, down: bool, pkt: Packet, done_ps: u64) {
        // From the PO buffer through switch allocation and traversal (the last 2 stages).
        self.send(1, down, pkt, done_ps + 2 * self.stage_ps);
    }

    fn pbc_step(&mut self) -> Result<()> {
        self.pbc_scheduled = false;
        let t = self.now_ps;
        let cost_ps = if let Some(ack) = self.pi_acks.pop_front() {
            self.pbc_ack(ack)
        } else if let Some(index) = self.drain_queue.pop_front() {
            self.pbc_drain(index, t)
        } else if !self.pbc_stalled {
            match self.pi_reqs.front().copied() {
                Some(pkt) => match pkt.kind {
                    PktKind::ReadReq => {
                        self.pi_reqs.pop_front();
                        self.pbc_read(pkt, t)
                    }
                    PktKind::WriteReq => self.pbc_write(pkt, t),
                    PktKind::WriteAck => {
                        self.pi_reqs.pop_front();
                        self.pbc_ack(pkt)
                    }
                    PktKind::ReadResp => {
                        self.pi_reqs.pop_front();
                        0
                    }
                },
                None => 0,
            }
        } else {
            0
        };
        self.pbc_free_ps = t + cost_ps;
        self.kick_pbc();
        Ok(())
    }

    fn pbc_ack(&mut self, ack: Packet) -> u64 {
        if let Some(i) = self.pb.draining(ack.line, ack.pd_seq) {
            self.pb.set_state(i, PbState::Empty);
            self.pbc_stalled = false;
        }
        self.tag_ps
    }

    fn pbc_drain(&mut self, index: usize, t: u64) -> u64 {
        let e = *self.pb.entry(index);
        if e.state != PbState::Drain {
            return 0;
        }
        let pkt = Packet {
            kind: PktKind::WriteReq,
            line: e.tag,
            value: e.value,
            pd_seq: e.pd_seq,
            id: e.header.request_id,
            issue_ps: t,
            expected: NO_EXPECTATION,
            core: e.header.src_core,
            pb_owned: true,
            flush: false,
        };
        let cost = self.tag_ps + self.data_ps;
        self.po_send(true, pkt, t + cost);
        self.stats.pb_drains += 1;
        if self.p.fault == Fault::EmptyBeforeAck {
            self.pb.set_state(index, PbState::Empty);
            self.pbc_stalled = false;
        }
        cost
    }

    fn pbc_read(&mut self, mut pkt: Packet, t: u64) -> u64 {
        let expected = self.model.latest(pkt.line);
        if let Some(i) = self.pb.youngest(pkt.line) {
            let value = self.pb.entry(i).value;
            self.pb.touch(i);
            self.model.check_read(pkt.line, value, expected, t);
            self.stats.pb_read_hits += 1;
            let cost = self.tag_ps + self.data_ps;
            pkt.kind = PktKind::ReadResp;
            pkt.value = value;
            self.po_send(false, pkt, t + cost);
            cost
        } else {
            // Drained and acknowledged meanwhile: PM is up to date; forward in PO order.
            pkt.expected = expected;
            self.po_send(true, pkt, t + self.tag_ps);
            self.tag_ps
        }
    }

    fn start_drain(&mut self, index: usize) {
        self.pb.set_state(index, PbState::Drain);
        // Each entry is queued once per Drain transition: the queue never exceeds the table.
        debug_assert!(self.drain_queue.len() < self.pb.capacity());
        self.drain_queue.push_back(index);
    }

    fn pbc_write(&mut self, pkt: Packet, t: u64) -> u64 {
        let header = PbHeader {
            src_core: pkt.core,
            request_id: pkt.id,
        };
        let youngest = self.pb.youngest(pkt.line);
        let coalesce = self.p.scheme == Scheme::PbRf
            && youngest.is_some_and(|i| self.pb.entry(i).state == PbState::Dirty);
        let target = if coalesce {
            youngest
        } else {
            self.pb.lru_empty()
        };
        let Some(index) = target else {
            // No Empty entry: drain the LRU Dirty victim (Drain entries are never victims) and
            // stall the PI queue until an acknowledgement frees an entry.
            if let Some(victim) = self.pb.lru_dirty() {
                self.start_drain(victim);
            }
            if !self.pbc_stalled {
                self.stats.pb_stalls += 1;
            }
            self.pbc_stalled = true;
            return self.tag_ps;
        };
        self.pi_reqs.pop_front();
        self.stats.pb_writes_seen += 1;
        let pd_seq = self.model.persist(pkt.line, pkt.value);
        if coalesce {
            self.stats.pb_coalesced += 1;
            self.pb.coalesce(index, pkt.value, pd_seq, header);
        } else {
            self.pb.fill(index, pkt.line, pkt.value, pd_seq, header);
        }
        match self.p.scheme {
            Scheme::Pb => self.start_drain(index),
            Scheme::PbRf => {
                if self.pb.dirty_count() >= self.rf_high {
                    while self.pb.dirty_count() > self.rf_low {
                        match self.pb.lru_dirty() {
                            Some(victim) => self.start_drain(victim),
                            None => break,
                        }
                    }
                }
            }
            Scheme::NoPb => {}
        }
        let cost = self.tag_ps + self.data_ps;
        let ack = Packet {
            kind: PktKind::WriteAck,
            pd_seq,
            expected: NO_EXPECTATION,
            ..pkt
        };
        self.po_send(false, ack, t + cost);
        cost
    }

    // ---------------------------------------------------------------- PM

    fn pm_accept(&mut self, pkt: Packet) -> Result<()> {
        if self.p.pm_wpq_entries == 0 {
            // No write queue: each access occupies its bank; effects apply at completion.
            let bank = (pkt.line % self.pm_bank_free_ps.len() as u64) as usize;
            let service = if pkt.kind == PktKind::WriteReq {
                self.pm_write_ps
            } else {
                self.pm_read_ps
            };
            let start = self.now_ps.max(self.pm_bank_free_ps[bank]);
            self.pm_bank_free_ps[bank] = start + service;
            let slot = self.stash(pkt);
            self.schedule(start + service + self.pm_ctrl_ps, Ev::PmDone(slot));
            return Ok(());
        }
        // Every packet that can reach PM is a core request or a PB drain: bounded by both.
        let bound = self.pi_capacity + self.cores.len() * (self.p.outstanding_per_core + 2);
        if self.pm_waiting.len() >= bound {
            return Err(CxlsimError::Overflow {
                name: "PM arrival queue",
                capacity: bound,
            });
        }
        self.pm_waiting.push_back(pkt);
        self.pm_pump();
        Ok(())
    }

    /// Serve PM arrivals in order: a write enters the write-pending queue (persistent, ADR) if
    /// it has room, else it and every write behind it waits; a read is served from the queue if
    /// its line is there, else it waits for its bank. Either takes effect (and is checked) at
    /// arrival: the bank only decides when the response leaves. With reads first, reads also
    /// pass writes that wait for room (gem5 keeps separate read and write queues), except
    /// writes of their own line.
    fn pm_pump(&mut self) {
        while let Some(&pkt) = self.pm_waiting.front() {
            match pkt.kind {
                PktKind::WriteReq => {
                    if self.wpq_len >= self.p.pm_wpq_entries {
                        break;
                    }
                    self.pm_waiting.pop_front();
                    self.pm_write_arrival(pkt);
                }
                PktKind::ReadReq => {
                    self.pm_waiting.pop_front();
                    self.pm_read_arrival(pkt);
                }
                PktKind::ReadResp | PktKind::WriteAck => {
                    self.pm_waiting.pop_front();
                    debug_assert!(false, "response delivered to PM");
                }
            }
        }
        if !self.p.pm_reads_first || self.pm_waiting.is_empty() {
            return;
        }
        let mut blocked = std::mem::take(&mut self.pm_blocked_lines);
        blocked.clear();
        let mut i = 0;
        while i < self.pm_waiting.len() {
            let pkt = self.pm_waiting[i];
            if pkt.kind == PktKind::ReadReq && !blocked.contains(&pkt.line) {
                self.pm_waiting.remove(i);
                self.pm_read_arrival(pkt);
            } else {
                blocked.insert(pkt.line);
                i += 1;
            }
        }
        self.pm_blocked_lines = blocked;
    }

    fn pm_write_arrival(&mut self, pkt: Packet) {
        let t = self.now_ps;
        let bank = (pkt.line % self.pm_bank_op.len() as u64) as usize;
        self.pm_arrivals += 1;
        self.wpq_len += 1;
        *self.wpq_lines.entry(pkt.line).or_insert(0) += 1;
        debug_assert!(self.pm_bank_writes[bank].len() < self.p.pm_wpq_entries);
        self.pm_bank_writes[bank].push_back((self.pm_arrivals, pkt.line));
        let ack = self.pm_apply(pkt);
        let slot = self.stash(ack);
        self.schedule(t + self.pm_ctrl_ps, Ev::PmRespond(slot));
        if self.p.pm_reads_first && self.wpq_len == self.wpq_low + 1 {
            // Writes just became eligible at banks with no read waiting.
            for b in 0..self.pm_bank_op.len() {
                self.bank_kick(b);
            }
        } else {
            self.bank_kick(bank);
        }
    }

    fn pm_read_arrival(&mut self, pkt: Packet) {
        let t = self.now_ps;
        let bank = (pkt.line % self.pm_bank_op.len() as u64) as usize;
        self.pm_arrivals += 1;
        let in_queue = self.wpq_lines.contains_key(&pkt.line);
        let resp = self.pm_apply(pkt);
        let slot = self.stash(resp);
        if in_queue {
            self.schedule(t + self.pm_ctrl_ps, Ev::PmRespond(slot));
        } else {
            // Every read reaching PM is a core's miss: bounded by the cores' request slots.
            debug_assert!(
                self.pm_bank_reads[bank].len()
                    < self.cores.len() * (self.p.outstanding_per_core + 2)
            );
            self.pm_bank_reads[bank].push_back((self.pm_arrivals, slot));
            self.bank_kick(bank);
        }
    }

    /// Start the next access of an idle bank: reads first unless the write-pending queue is
    /// above its high mark (or, with no read waiting, above its low mark), as gem5's MemCtrl;
    /// with `pm_reads_first` off, arrival order.
    fn bank_kick(&mut self, bank: usize) {
        if self.pm_bank_op[bank] != BankOp::Idle {
            return;
        }
        let read = self.pm_bank_reads[bank].front().copied();
        let write = self.pm_bank_writes[bank].front().copied();
        let take_write = match (read, write) {
            (None, None) => return,
            (Some(_), None) => false,
            (None, Some(_)) => !self.p.pm_reads_first || self.wpq_len > self.wpq_low,
            (Some(r), Some(w)) => {
                if self.p.pm_reads_first {
                    self.wpq_len > self.wpq_high
                } else {
                    w.0 < r.0
                }
            }
        };
        if take_write {
            if let Some((_, line)) = self.pm_bank_writes[bank].pop_front() {
                self.pm_bank_op[bank] = BankOp::Write(line);
                self.schedule(self.now_ps + self.pm_write_ps, Ev::BankDone(bank as u32));
            }
        } else if let Some((_, slot)) = self.pm_bank_reads[bank].pop_front() {
            self.pm_bank_op[bank] = BankOp::Read(slot);
            self.schedule(self.now_ps + self.pm_read_ps, Ev::BankDone(bank as u32));
        }
    }

    fn bank_done(&mut self, bank: usize) {
        match std::mem::replace(&mut self.pm_bank_op[bank], BankOp::Idle) {
            BankOp::Read(slot) => self.schedule(self.now_ps + self.pm_ctrl_ps, Ev::PmRespond(slot)),
            BankOp::Write(line) => {
                self.wpq_len -= 1;
                if let Some(n) = self.wpq_lines.get_mut(&line) {
                    *n -= 1;
                    if *n == 0 {
                        self.wpq_lines.remove(&line);
                    }
                }
                // Room in the queue: admit the writes (and what follows them) that waited.
                self.pm_pump();
            }
            BankOp::Idle => debug_assert!(false, "an idle bank finished an access"),
        }
        self.bank_kick(bank);
    }

    fn pm_done(&mut self, pkt: Packet) {
        if matches!(pkt.kind, PktKind::ReadResp | PktKind::WriteAck) {
            debug_assert!(false, "response delivered to PM");
            return;
        }
        let resp = self.pm_apply(pkt);
        let from = self.p.hops + 1;
        self.send(from, false, resp, self.now_ps);
    }

    /// Perform a PM access now (the checker sees it here) and build its response.
    fn pm_apply(&mut self, mut pkt: Packet) -> Packet {
        let t = self.now_ps;
        match pkt.kind {
            PktKind::WriteReq => {
                self.stats.pm_writes += 1;
                if !pkt.pb_owned {
                    // No persist buffer on the way: the write enters the PD here.
                    pkt.pd_seq = self.model.persist(pkt.line, pkt.value);
                }
                self.model.pm_write(pkt.line, pkt.value, pkt.pd_seq, t);
                pkt.kind = PktKind::WriteAck;
            }
            PktKind::ReadReq => {
                self.stats.pm_reads += 1;
                let value = self.model.pm_value(pkt.line);
                let expected = if pkt.expected == NO_EXPECTATION {
                    self.model.latest(pkt.line)
                } else {
                    pkt.expected
                };
                self.model.check_read(pkt.line, value, expected, t);
                pkt.kind = PktKind::ReadResp;
                pkt.value = value;
            }
            PktKind::ReadResp | PktKind::WriteAck => {}
        }
        pkt
    }
}

/// Run a trace once and return its statistics.
pub fn simulate(params: &Params, trace: &Trace) -> Result<Stats> {
    Simulator::new(params, trace)?.run(&[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Op;

    fn op(kind: OpKind, addr: u64) -> Op {
        Op {
            addr,
            gap_cycles: 0,
            kind,
        }
    }

    fn persist_loop(lines: u64, rounds: u64) -> Trace {
        let mut ops = Vec::new();
        for r in 0..rounds {
            for l in 0..lines {
                let a = 0x10_0000 + (l + r) % lines * 64;
                ops.push(op(OpKind::Store, a));
                ops.push(op(OpKind::Flush, a));
                ops.push(op(OpKind::Fence, 0));
                ops.push(op(OpKind::Load, a));
            }
        }
        Trace {
            name: "loop".into(),
            threads: vec![ops],
        }
    }

    #[test]
    fn persist_latency_matches_the_path() {
        let trace = Trace {
            name: "one".into(),
            threads: vec![vec![
                op(OpKind::Store, 0x40),
                op(OpKind::Flush, 0x40),
                op(OpKind::Fence, 0),
            ]],
        };
        let mut p = Params {
            cores: 1,
            hops: 1,
            scheme: Scheme::NoPb,
            ..Params::default()
        };
        let nopb = simulate(&p, &trace).unwrap();
        p.scheme = Scheme::Pb;
        let pb = simulate(&p, &trace).unwrap();
        assert_eq!(nopb.persists, 1);
        assert_eq!(pb.persists, 1);
        // nopb: 2 links + 1 switch each way + PM controller (the write queue acknowledges);
        // pb: 1 link each way + switch + PBC.
        assert!(
            nopb.persist_latency_ns() > 20.0 + 2.0 * (2.0 * 12.5 + 35.0),
            "{}",
            nopb.persist_latency_ns()
        );
        assert!(
            pb.persist_latency_ns() < 2.0 * (12.5 + 35.0) + 10.0,
            "{}",
            pb.persist_latency_ns()
        );
        assert_eq!(nopb.violation_count + pb.violation_count, 0);
        // Without the write queue the PM write itself is on the persist path.
        p.scheme = Scheme::NoPb;
        p.pm_wpq_entries = 0;
        let media = simulate(&p, &trace).unwrap();
        assert!(
            media.persist_latency_ns() > 200.0 + 2.0 * (2.0 * 12.5 + 35.0),
            "{}",
            media.persist_latency_ns()
        );
    }

    #[test]
    fn selector_adds_no_latency_to_unrelated_traffic() {
        // Loads of lines the PB does not hold pass the first switch exactly as in a volatile
        // switch (the selector decides in parallel with routing), at every hop count.
        let trace = Trace {
            name: "reads".into(),
            threads: vec![(0..32)
                .map(|i| op(OpKind::Load, 0x30_0000 + i * 64))
                .collect()],
        };
        for hops in 1..=3 {
            let run = |scheme| {
                simulate(
                    &Params {
                        cores: 1,
                        hops,
                        scheme,
                        ..Params::default()
                    },
                    &trace,
                )
                .unwrap()
            };
            let (nopb, pb) = (run(Scheme::NoPb), run(Scheme::Pb));
            assert_eq!(pb.fabric_reads, 32);
            assert_eq!(pb.pb_reads_rerouted, 0);
            assert_eq!(
                nopb.read_latency_ps_sum, pb.read_latency_ps_sum,
                "hops {hops}"
            );
            assert_eq!(nopb.sim_time_ps, pb.sim_time_ps, "hops {hops}");
        }
    }

    #[test]
    fn pm_banks_serve_reads_before_queued_writes() {
        // Eight flushed lines and then a load, all on one PM bank: in arrival order the load
        // waits for eight 200 ns media writes; reads first, it goes ahead of them (the writes
        // are already persistent in the write-pending queue).
        let mut ops = Vec::new();
        for i in 0..8 {
            ops.push(op(OpKind::Store, 0x50_0000 + i * 64));
            ops.push(op(OpKind::Flush, 0x50_0000 + i * 64));
        }
        ops.push(op(OpKind::Fence, 0));
        ops.push(op(OpKind::Load, 0x60_0000));
        let trace = Trace {
            name: "bank".into(),
            threads: vec![ops],
        };
        let run = |pm_reads_first| {
            simulate(
                &Params {
                    cores: 1,
                    scheme: Scheme::NoPb,
                    pm_banks: 1,
                    pm_reads_first,
                    ..Params::default()
                },
                &trace,
            )
            .unwrap()
        };
        let (first, fifo) = (run(true), run(false));
        // Nine fabric reads each (the eight store misses and the load).
        assert_eq!(first.fabric_reads, 9);
        assert_eq!(fifo.fabric_reads, 9);
        assert_eq!(first.violation_count + fifo.violation_count, 0);
        assert!(
            first.read_latency_ps_sum + 1_000_000 < fifo.read_latency_ps_sum,
            "reads first {} ps, fifo {} ps",
            first.read_latency_ps_sum,
            fifo.read_latency_ps_sum
        );
    }

    #[test]
    fn fence_stalls_are_accounted() {
        let trace = persist_loop(8, 4);
        let s = simulate(
            &Params {
                cores: 1,
                scheme: Scheme::NoPb,
                ..Params::default()
            },
            &trace,
        )
        .unwrap();
        // Every fence waits one persist round trip (store, flush, fence in a row).
        assert!(s.fence_stall_ps_sum > 0);
        assert!(s.fence_stall_ps_sum <= s.persist_latency_ps_sum);
        assert!(s.fence_stall_share(1) > 0.1 && s.fence_stall_share(1) < 1.0);
    }

    #[test]
    fn read_forwarding_hits_in_pb_rf() {
        let trace = persist_loop(4, 20);
        let p = Params {
            cores: 1,
            scheme: Scheme::PbRf,
            ..Params::default()
        };
        let s = simulate(&p, &trace).unwrap();
        assert!(s.pb_read_hits > 0, "{s:?}");
        assert_eq!(s.violation_count, 0, "{:?}", s.violations);
        let p = Params {
            cores: 1,
            scheme: Scheme::Pb,
            ..Params::default()
        };
        let s = simulate(&p, &trace).unwrap();
        assert_eq!(s.pb_coalesced, 0);
        assert_eq!(s.violation_count, 0, "{:?}", s.violations);
    }

    #[test]
    fn miss_window_overlaps_independent_misses_only() {
        let independent: Vec<Op> = (0..64)
            .map(|i| op(OpKind::Load, 0x20_0000 + i * 64))
            .collect();
        let same_line: Vec<Op> = (0..64)
            .map(|i| {
                op(
                    if i % 2 == 0 {
                        OpKind::Load
                    } else {
                        OpKind::Store
                    },
                    0x20_0000 + i / 2 * 64,
                )
            })
            .collect();
        for (ops, expect_faster) in [(independent, true), (same_line, false)] {
            let trace = Trace {
                name: "mlp".into(),
                threads: vec![ops],
            };
            let blocking = simulate(
                &Params {
                    cores: 1,
                    miss_window: 1,
                    ..Params::default()
                },
                &trace,
            )
            .unwrap();
            let window = simulate(
                &Params {
                    cores: 1,
                    miss_window: 8,
                    ..Params::default()
                },
                &trace,
            )
            .unwrap();
            assert_eq!(blocking.fabric_reads, window.fabric_reads);
            if expect_faster {
                assert!(
                    window.sim_time_ps * 3 < blocking.sim_time_ps,
                    "{} vs {}",
                    window.sim_time_ps,
                    blocking.sim_time_ps
                );
            } else {
                // Each store waits for the miss of its own line: pairs cannot overlap much.
                assert!(
                    window.sim_time_ps * 3 > blocking.sim_time_ps,
                    "{} vs {}",
                    window.sim_time_ps,
                    blocking.sim_time_ps
                );
            }
        }
    }

    #[test]
    fn deterministic() {
        let trace = persist_loop(40, 5);
        let p = Params {
            cores: 1,
            scheme: Scheme::PbRf,
            ..Params::default()
        };
        assert_eq!(simulate(&p, &trace).unwrap(), simulate(&p, &trace).unwrap());
    }

    #[test]
    fn too_many_threads_is_an_error() {
        let trace = Trace {
            name: "x".into(),
            threads: vec![vec![]; 3],
        };
        let p = Params {
            cores: 2,
            ..Params::default()
        };
        assert!(matches!(
            Simulator::new(&p, &trace),
            Err(CxlsimError::InvalidParam { .. })
        ));
    }
}
