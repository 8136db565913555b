//! Stable addresses (`docs/lifecycle.md`, "The stable address"): where in the address space a
//! PMO of a given size is placed so that it overlaps no live PMO's range and keeps room to grow
//! in place.

use pmo_format::{align_up, Superblock, PAGE_SIZE};

use crate::error::{Result, StoreError};
use crate::namespace::Namespace;

/// A PMO's stable address range can grow in place to this many times its size: pcreate (and a
/// resize that moves the address) places a PMO where `ADDRESS_HEADROOM` times its size overlaps
/// no live PMO's range or headroom (`docs/lifecycle.md`, "The stable address").
pub const ADDRESS_HEADROOM: u64 = 4;

/// Every entry's address range (`[base, base + capacity)`), but `except`'s (a uuid), and with
/// `headroom` its headroom too, in ascending order of the base. Every entry counts, live or an
/// older generation a crash left behind (superseded slots are cleaned at open): a superset of
/// the live PMOs' ranges, so a new range overlapping none of them overlaps no live PMO; and
/// the namespace's index keeps them in order, so no pcreate sorts or resolves every entry
/// (at Filebench's sizes that was most of a create: issue 29).
pub fn taken(
    ns: &Namespace,
    except: Option<[u8; 16]>,
    headroom: bool,
) -> impl Iterator<Item = (u64, u64)> + '_ {
    let k = if headroom { ADDRESS_HEADROOM } else { 1 };
    ns.by_base_addr()
        .filter(move |e| Some(e.uuid) != except)
        .map(move |e| {
            // A PMO's range covers its layout capacity (a writer's view maps it all).
            let span = e.size.saturating_mul(k).max(e.capacity_bytes());
            let hi = e.base_addr.saturating_add(span);
            (e.base_addr, align_up(hi, PAGE_SIZE).unwrap_or(u64::MAX))
        })
}

/// [`taken`], collected.
pub fn taken_ranges(ns: &Namespace, except: Option<[u8; 16]>, headroom: bool) -> Vec<(u64, u64)> {
    taken(ns, except, headroom).collect()
}

/// The lowest address from the pool's base up where a PMO of `size` bytes and its headroom
/// overlap no live PMO's range or headroom (`except`: a resized PMO's own uuid).
pub fn address_for(
    ns: &Namespace,
    sb: &Superblock,
    size: u64,
    except: Option<[u8; 16]>,
) -> Result<u64> {
    let span = size
        .checked_mul(ADDRESS_HEADROOM)
        .and_then(|s| align_up(s, PAGE_SIZE));
    let mut a = sb.base_addr;
    if let Some(span) = span {
        for (lo, hi) in taken(ns, except, true) {
            if a.saturating_add(span) <= lo {
                break;
            }
            a = a.max(hi);
        }
        if a.checked_add(span).is_some_and(|end| end <= 1 << 47) {
            return Ok(a);
        }
    }
    Err(StoreError::NoSpace(format!(
        "no free address range of {size} bytes (and its growth headroom) below 128 TiB for the PMO's stable address"
    )))
}

/// Whether a PMO at `base` can be `size` bytes long without overlapping another live PMO's
/// range (`except`: its own uuid).
pub fn address_free(ns: &Namespace, base: u64, size: u64, except: [u8; 16]) -> bool {
    base.checked_add(size).is_some_and(|end| {
        end <= 1 << 47 && taken(ns, Some(except), false).all(|(lo, hi)| end <= lo || hi <= base)
    })
}
