//! pmo's pin table: readers beside a writer, across processes (`docs/readers.md`).
//!
//! A reader attached beside a writer sees one psync's state for as long as it likes. Shadow
//! paging keeps the version before the current one of every page in the page's other slot;
//! the pin table keeps what else the readers need: which psync each reader pins, and copies of
//! slot contents that a psync would overwrite while a reader's snapshot still shows them. It
//! is volatile shared memory (a file in `/dev/shm` named by the pool and PMO, or process memory
//! for a medium without a file), made by the first reader, used by the writer while it exists,
//! and removed by the last process leaving. Nothing in it needs to survive a crash.
//!
//! Above `pmo-meta` (errors, locks); below `pmo-engine`, whose commit calls
//! [`PinTable::before_overwrite`] and [`PinTable::committed`], and `pmo-pool`, whose readers
//! claim slots and look frames up.
//!
//! | module | owns |
//! |---|---|
//! | [`layout`] | the words of a table |
//! | [`at`] | where a PMO's table is: its path, the readers word, the last user's leaving, the tables a pool handle keeps for its next reader |
//! | [`table`] | finding, making and removing a PMO's table; the readers word on the medium |
//! | [`readers`] | reader slots, pins, dead readers |
//! | [`frames`] | the versions kept: before an overwrite, after a commit, a reader's lookup |
//! | [`changes`] | the change ring: the pages each psync wrote, for a reader's refresh |
//! | [`writer`] | a writer's hold on the table, joined when the medium announces one |
#![deny(unsafe_code)]

pub mod at;
pub mod changes;
pub mod frames;
pub mod layout;
pub mod readers;
pub mod table;
pub mod writer;

pub use at::KeptTables;
pub use at::PinsAt;
pub use frames::Overwrite;
pub use layout::{FRAME_BYTES, META_MAX};
pub use readers::ReaderSlot;
pub use table::PinTable;
pub use writer::WriterPins;
