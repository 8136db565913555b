//! The per-PMO version counter: the only source of page versions (and so of GCM nonces) and of
//! version-table epochs.
//!
//! Owns the rule that makes nonces unique across crashes: a version is handed out only from a
//! range whose upper end (the *reservation*) was persisted before any version in it was used.
//! After a crash the store calls [`VersionCounter::recover`] with the persisted reservation, and
//! counting resumes at that value, skipping whatever was handed out but never committed. A
//! version is therefore never returned twice for one PMO, whatever was lost in the crash.
//!
//! Pure logic, no I/O: the store persists [`VersionCounter::propose_reservation`]'s value in the
//! PMO header (and fences) before calling [`VersionCounter::confirm_reservation`].
//!
//! Invariant: `1 <= next <= reserved_until`; versions returned lie in `[next, reserved_until)`.
//! Version 0 is never returned: it means "page never sealed".

use crate::error::CryptError;

/// Monotonic per-PMO version source with crash-safe reservations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionCounter {
    next: u64,
    reserved_until: u64,
}

impl VersionCounter {
    /// Resume from the reservation persisted in the PMO header (0 for a new PMO). Nothing can be
    /// handed out until a new reservation is confirmed.
    pub fn recover(persisted_reserved_until: u64) -> Self {
        let start = persisted_reserved_until.max(1);
        Self {
            next: start,
            reserved_until: start,
        }
    }

    /// The next unused version, or [`CryptError::ReservationExhausted`] when the caller must
    /// persist a new reservation first.
    pub fn next_version(&mut self) -> Result<u64, CryptError> {
        if self.next >= self.reserved_until {
            return Err(CryptError::ReservationExhausted);
        }
        let v = self.next;
        self.next += 1;
        Ok(v)
    }

    /// Versions still usable without persisting a new reservation.
    pub fn remaining(&self) -> u64 {
        self.reserved_until - self.next
    }

    /// The value to persist to make `count` more versions usable.
    pub fn propose_reservation(&self, count: u64) -> Result<u64, CryptError> {
        self.reserved_until
            .checked_add(count)
            .ok_or(CryptError::CounterExhausted)
    }

    /// Declare that `persisted_reserved_until` (from [`Self::propose_reservation`]) is now
    /// durable. A value below the current reservation is ignored (reservations only grow).
    pub fn confirm_reservation(&mut self, persisted_reserved_until: u64) {
        if persisted_reserved_until > self.reserved_until {
            self.reserved_until = persisted_reserved_until;
        }
    }

    /// The current durable-or-pending upper end (what the header must hold at least).
    pub fn reserved_until(&self) -> u64 {
        self.reserved_until
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    #[test]
    fn needs_reservation_and_skips_after_crash() {
        let mut c = VersionCounter::recover(0);
        assert_eq!(c.next_version(), Err(CryptError::ReservationExhausted));
        let r = c.propose_reservation(3).unwrap();
        c.confirm_reservation(r);
        assert_eq!(c.next_version(), Ok(1));
        assert_eq!(c.next_version(), Ok(2));
        // crash: only r (=4) was persisted
        let mut c = VersionCounter::recover(r);
        let r2 = c.propose_reservation(2).unwrap();
        c.confirm_reservation(r2);
        assert_eq!(c.next_version(), Ok(4));
        assert_eq!(
            VersionCounter::recover(u64::MAX).propose_reservation(1),
            Err(CryptError::CounterExhausted)
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Seal page `index % pages` with a fresh version (what a psync does per dirty page).
        Seal(u8),
        /// Persist a reservation of `n` more versions.
        Reserve(u8),
        /// Persist a reservation, but crash before confirming it in memory.
        ReserveThenCrash(u8),
        /// Crash: in-memory state lost, recover from the persisted reservation.
        Crash,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => any::<u8>().prop_map(Op::Seal),
            2 => (1u8..16).prop_map(Op::Reserve),
            1 => (1u8..16).prop_map(Op::ReserveThenCrash),
            1 => Just(Op::Crash),
        ]
    }

    proptest! {
        /// Nonce uniqueness across version bumps, reservations and crashes: every
        /// (page index, version) pair — the GCM nonce — is produced at most once, and versions
        /// of one page strictly increase.
        #[test]
        fn nonces_never_repeat_across_crashes(ops in proptest::collection::vec(op(), 1..400)) {
            let mut persisted: u64 = 0;
            let mut counter = VersionCounter::recover(persisted);
            let mut nonces: HashSet<(u64, u64)> = HashSet::new();
            let mut last_version = [0u64; 8];
            for op in ops {
                match op {
                    Op::Seal(p) => {
                        let page = u64::from(p % 8);
                        match counter.next_version() {
                            Ok(v) => {
                                prop_assert!(nonces.insert((page, v)), "nonce reused: page {page} version {v}");
                                prop_assert!(v > last_version[page as usize]);
                                last_version[page as usize] = v;
                            }
                            Err(e) => prop_assert_eq!(e, CryptError::ReservationExhausted),
                        }
                    }
                    Op::Reserve(n) => {
                        persisted = counter.propose_reservation(u64::from(n)).unwrap();
                        counter.confirm_reservation(persisted);
                    }
                    Op::ReserveThenCrash(n) => {
                        persisted = counter.propose_reservation(u64::from(n)).unwrap();
                        counter = VersionCounter::recover(persisted);
                    }
                    Op::Crash => counter = VersionCounter::recover(persisted),
                }
                prop_assert!(counter.reserved_until() <= persisted.max(1));
            }
        }
    }
}
