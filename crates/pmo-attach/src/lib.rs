//! pmo's attach layer (`ARCHITECTURE.md`, "The store's layers"): a PMO mapped at its stable
//! address. The top working layer of the store: it uses the pool layer's `PmoHandle` and
//! `pmo_os`'s views, and the life-cycle resize for an attachment that grows.
//!
//! | module | owns |
//! |---|---|
//! | [`attach`] | [`Attachment`](attach::Attachment): a handle plus a view; psync, rollback, detach; the page sources the fault handler calls |
//! | `source` | the page sources a view calls on a fault (a reader beside a writer's included) |
//! | `whole` | the whole-PMO checksum (`wedi`) over a populated view |
//! | [`refresh`] | `Attachment::refresh`: a reader moves to the newest psync |
//! | [`tracking`] | the default dirty tracking of an attach, chosen from the PMO's size |
//! | [`predict`] | predictive decryption: streams seen at faults, workers that install the next pages |
//! | [`predict_history`] | a predictor's learnt strides, kept across attaches in the process |
//! | [`detach`] | the background detach worker |
//! | [`resize_attached`] | `Attachment::grow` and `Attachment::resize` |
//! | [`pptr`] | relocatable typed offset pointers |
//!
//! Everything `pub` here is for `pmo-store`, the store's public API.
#![deny(unsafe_code)]

pub mod attach;
pub mod detach;
pub mod pptr;
pub mod predict;
pub mod predict_history;
pub mod refresh;
pub mod resize_attached;
mod source;
pub mod tracking;
mod whole;
