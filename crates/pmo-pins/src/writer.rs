//! A writer's hold on its PMO's pin table: joined when the medium announces one (one 8-byte
//! load per psync otherwise), kept until the writer's core goes (detach).

use std::sync::{Arc, Mutex};

use pmo_meta::error::Result;

use crate::table::{PinTable, PinsAt};

/// A writer core's pin table, joined on demand.
#[derive(Default)]
pub struct WriterPins {
    at: Option<PinsAt>,
    table: Mutex<Option<Arc<PinTable>>>,
}

impl WriterPins {
    /// Pins for a core that commits: where its table would be.
    pub fn new(at: PinsAt) -> WriterPins {
        WriterPins {
            at: Some(at),
            table: Mutex::new(None),
        }
    }

    /// The table, joined now if the medium announces one; `newest`: the newest psync.
    pub fn for_commit(&self, newest: u64) -> Result<Option<Arc<PinTable>>> {
        let Some(at) = &self.at else {
            return Ok(None);
        };
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = &*t {
            return Ok(Some(t.clone()));
        }
        if !at.announced()? {
            return Ok(None);
        }
        if let Some(joined) = PinTable::join_writer(at)? {
            joined.track(newest);
            *t = Some(joined.clone());
            return Ok(Some(joined));
        }
        Ok(None)
    }

    /// The writer leaves the table it joined (its detach): called while it still holds the
    /// attach lock, so that the next writer, which may attach as soon as the lock is free,
    /// finds the table gone if this writer was its last user (the core, which may outlive the
    /// handle in a background detach, would otherwise hold it until it goes). Later psyncs of
    /// this core join again.
    pub fn leave(&self) {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(t);
    }

    /// The table if this writer has joined one (`pmo info`).
    pub fn joined(&self) -> Option<Arc<PinTable>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
