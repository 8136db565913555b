//! `pmo demo`: the store end to end on the default pool, with pointer-rich data.
//!
//! Creates the pool and a PMO if needed, appends one node to a linked list built with raw
//! pointers inside the PMO, psyncs, detaches, re-attaches read-only and walks the list. Every run
//! adds a node: the list survives detach/attach and process restarts because the PMO is mapped
//! at its stable address.
#![allow(unsafe_code)] // the demo stores and follows raw pointers inside the attached PMO

use std::path::Path;

use anyhow::{anyhow, Context};
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, StoreError};

use crate::common::{Ctx, IntegrityProblem, KeyArg, PoolArg};

const PMO: &str = "demo-list";
/// The key of the demo PMO when none is given (documented in the README; not a secret).
pub const DEMO_KEY: &str = "demo";
const PMO_BYTES: u64 = 1 << 20;

/// Header at offset 0 of the PMO.
#[repr(C)]
struct Header {
    magic: u64,
    count: u64,
    head: *mut Node,
    next_free: u64,
}

/// A list node; `next` is a raw pointer into the same PMO.
#[repr(C)]
struct Node {
    value: u64,
    next: *mut Node,
    text: [u8; 48],
}

const MAGIC: u64 = 0x504d_4f44_454d_4f31; // "PMODEMO1"

// `pmo demo`'s options: the pool and the key (see `command`). No doc comment: the command's
// help is the dispatcher's.
#[derive(clap::Args)]
pub(crate) struct DemoArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArg,
    #[command(flatten)]
    pub(crate) key: KeyArg,
}

/// `pmo demo`: the key given, else [`DEMO_KEY`] (never a prompt), then [`run`] on the pool.
pub(crate) fn command(ctx: &Ctx) -> anyhow::Result<()> {
    // Never a prompt: the demo runs the same way with or without a terminal.
    let key = match crate::keysrc::given(ctx.key.key_file.as_deref()).map_err(|e| anyhow!(e))? {
        Some(k) => k,
        None => {
            outln!(
                "(no key given: using the demo key \"{}\"; set PMO_KEY or --key-file for your own)",
                DEMO_KEY
            )?;
            zeroize::Zeroizing::new(DEMO_KEY.as_bytes().to_vec())
        }
    };
    run(&ctx.pool_path(), &key)?;
    Ok(())
}

pub fn run(pool_path: &Path, key: &[u8]) -> anyhow::Result<()> {
    let pool = match Pool::open(pool_path) {
        Ok(p) => p,
        Err(StoreError::NoPool { .. }) => {
            if let Some(dir) = pool_path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("create {}", dir.display()))?;
            }
            outln!("creating pool {} (256 MiB, sparse)", pool_path.display())?;
            Pool::create(
                pool_path,
                256 << 20,
                &PoolOptions {
                    kdf: KdfParams::DEFAULT,
                    ..Default::default()
                },
            )?
        }
        Err(e) => return Err(e).with_context(|| format!("pool {}", pool_path.display())),
    };
    let wrong_key = |e: StoreError| match e {
        StoreError::WrongKey(_) => anyhow::anyhow!(
            "'{PMO}' in {} was created with another key: give that key (PMO_KEY or --key-file), \
             or `pmo destroy {PMO}` with it, or use another pool (--pool)",
            pool_path.display()
        ),
        e => e.into(),
    };
    if !pool.exists(PMO)? {
        let info = pool.pcreate(PMO, PMO_BYTES, key)?;
        outln!(
            "created PMO '{PMO}' ({} KiB) at stable address {:#x}",
            info.size >> 10,
            info.base_addr
        )?;
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    {
        let a = pool.attach(PMO, Perm::Write, key).map_err(wrong_key)?;
        let base = a.addr();
        let cap = (a.len() - 64) / std::mem::size_of::<Node>();
        // SAFETY: the header and every node lie inside the attached, writable mapping (bounds
        // checked against `cap`); all pointers stored point into this PMO at its stable address.
        unsafe {
            let h = base.cast::<Header>();
            if (*h).magic != MAGIC {
                *h = Header {
                    magic: MAGIC,
                    count: 0,
                    head: std::ptr::null_mut(),
                    next_free: 0,
                };
            }
            if (*h).next_free as usize >= cap {
                anyhow::bail!(
                    "the demo list is full ({cap} nodes): `pmo destroy {PMO}` to start over"
                );
            }
            let node = base
                .add(64 + (*h).next_free as usize * std::mem::size_of::<Node>())
                .cast::<Node>();
            let mut text = [0u8; 48];
            // Wrapping: a damaged count is only a number shown.
            let count = (*h).count.wrapping_add(1);
            let msg = format!("run {count} at unix time {stamp}");
            text[..msg.len().min(48)].copy_from_slice(&msg.as_bytes()[..msg.len().min(48)]);
            *node = Node {
                value: count,
                next: (*h).head,
                text,
            };
            (*h).head = node;
            (*h).count = count;
            (*h).next_free += 1;
        }
        let s = a.psync()?;
        outln!(
            "appended node {} with raw pointers; psync committed {} ({} bytes persisted) in {:.1} µs",
            // SAFETY: the header lies inside the attached mapping (written just above).
            unsafe { (*base.cast::<Header>()).count },
            crate::text::count(s.pages, "page"),
            s.bytes_persisted,
            s.elapsed_ns as f64 / 1e3
        )?;
        a.detach()?;
    }
    let a = pool.attach(PMO, Perm::Read, key)?;
    outln!(
        "re-attached read-only at {:#x} via {}; walking the list:",
        a.addr() as usize,
        a.mechanism().name()
    )?;
    // SAFETY: reading the header and following `next` pointers that the writer stored; each is
    // checked to lie inside the mapping, aligned for a `Node`, before it is dereferenced.
    unsafe {
        let h = a.addr().cast::<Header>();
        let mut p = (*h).head;
        let mut shown = 0;
        let (lo, hi) = (a.addr() as usize, a.addr() as usize + a.len());
        // A damaged list (a pointer outside the PMO or not at a node's alignment, or a cycle:
        // more nodes than fit) is reported, never followed.
        let cap = (a.len() - 64) / std::mem::size_of::<Node>();
        while !p.is_null() {
            let addr = p as usize;
            if addr < lo
                || addr.saturating_add(std::mem::size_of::<Node>()) > hi
                || !addr.is_multiple_of(std::mem::align_of::<Node>())
                || shown >= cap as u64
            {
                return Err(IntegrityProblem(format!(
                    "the demo list is damaged (a pointer to {addr:#x} after {shown} nodes): `pmo destroy {PMO}` to start over"
                ))
                .into());
            }
            if shown < 5 {
                let t = &(*p).text;
                let end = t.iter().position(|&b| b == 0).unwrap_or(t.len());
                outln!(
                    "  node {:>4} @ {addr:#x}: {}",
                    (*p).value,
                    String::from_utf8_lossy(&t[..end])
                )?;
            }
            shown += 1;
            p = (*p).next;
        }
        outln!(
            "  ... {} in all; run `pmo demo` again to add one",
            crate::text::count(shown, "node")
        )?;
    }
    Ok(())
}
