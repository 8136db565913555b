//! Background detaches in flight in this process (`pmo_store`'s detach worker queues them): an
//! attach of a PMO whose detach is still running waits for it instead of polling its lock.

use std::sync::{Condvar, Mutex};

/// Longest an attach waits for another user's background detach to finish.
pub const DETACH_STALL_MAX: std::time::Duration = std::time::Duration::from_secs(60);

/// Detaches queued or in progress: the uuid of each one's PMO.
static IN_FLIGHT: Mutex<Vec<[u8; 16]>> = Mutex::new(Vec::new());
static DONE: Condvar = Condvar::new();

/// The background detach of the PMO `pmo` is finished (the detach worker calls this).
pub fn done(pmo: [u8; 16]) {
    let mut v = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = v.iter().position(|&o| o == pmo) {
        v.swap_remove(i);
    }
    DONE.notify_all();
}

/// A background detach of the PMO `pmo` (uuid) is queued: it is in flight until [`done`].
pub fn track(pmo: [u8; 16]) {
    IN_FLIGHT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(pmo);
}

/// Mark the PMO `pmo` as having a background detach queued (tests replaying interleavings).
#[cfg(test)]
pub fn track_for_test(pmo: [u8; 16]) {
    IN_FLIGHT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(pmo);
}

/// As the worker does when a detach is finished (tests replaying interleavings).
#[cfg(test)]
pub fn done_for_test(pmo: [u8; 16]) {
    done(pmo);
}

/// Whether this process has a background detach of the PMO `pmo` (its uuid) queued or running
/// (it holds the attach lock until it is done, even after it cleared the holder word).
pub fn in_flight(pmo: [u8; 16]) -> bool {
    IN_FLIGHT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&pmo)
}

/// Wait up to `timeout` while this process has a background detach of the PMO `pmo` (uuid)
/// queued or running (an attach of it then takes the lock as soon as it is released, instead
/// of polling for it). Returns at once when there is none (another process's detach).
pub fn wait_for_pmo(pmo: [u8; 16], timeout: std::time::Duration) {
    let deadline = std::time::Instant::now() + timeout;
    let mut v = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
    while v.contains(&pmo) {
        let now = std::time::Instant::now();
        if now >= deadline {
            return;
        }
        v = DONE
            .wait_timeout(v, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// Wait until every background detach of this process has finished (for tools and tests
/// that must see the medium settled, and before a process exits on purpose).
pub fn wait_for_background_detaches() {
    let mut v = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
    while !v.is_empty() {
        v = DONE.wait(v).unwrap_or_else(|e| e.into_inner());
    }
}
