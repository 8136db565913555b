//! `pmo create|destroy|write|read`: the commands on one PMO's existence and bytes.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use pmo_lmdb::lockdir::Removal;
use pmo_store::{Perm, StoreError};

use crate::common::{
    human, parse_bytes, parse_scheme, parse_seconds, scheme_name, with_shadow, Ctx, KeyArg, PoolArg,
};

#[derive(clap::Args)]
pub(crate) struct CreateArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArg,
    #[command(flatten)]
    pub(crate) key: KeyArg,
    /// Name of the new PMO (printable characters, no control characters)
    pub(crate) name: String,
    /// Size, e.g. 64MiB (rounded up to whole 4 KiB pages)
    #[arg(long, value_parser = parse_bytes)]
    pub(crate) size: u64,
    /// Protection scheme (default: PMO_SCHEME, else the pool's default)
    #[arg(long)]
    pub(crate) scheme: Option<String>,
    /// Where the plaintext copy lives when attached: dram or medium (default: the scheme's)
    #[arg(long)]
    pub(crate) shadow: Option<String>,
    /// The AEAD of `secure`'s pages: aegis (AEGIS-256X4, the default) or gcm (AES-256-GCM);
    /// the same as the scheme suffix `:aegis` or `:gcm`
    #[arg(long)]
    pub(crate) cipher: Option<String>,
    /// Lay the PMO out for this size (its layout capacity): `pmo resize` up to it, and
    /// any shrink, changes only metadata (default: the size; not with `wedi`)
    #[arg(long, value_parser = parse_bytes)]
    pub(crate) max_size: Option<u64>,
}

#[derive(clap::Args)]
pub(crate) struct DestroyArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArg,
    #[command(flatten)]
    pub(crate) key: KeyArg,
    /// PMO to destroy
    pub(crate) name: String,
}

#[derive(clap::Args)]
pub(crate) struct WriteArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArg,
    #[command(flatten)]
    pub(crate) key: KeyArg,
    /// PMO to write
    pub(crate) name: String,
    /// Byte offset in the PMO to write at, e.g. 4096 or 1MiB
    #[arg(long, default_value_t = 0, value_parser = parse_bytes)]
    pub(crate) offset: u64,
    /// Read the bytes from this file (default: standard input)
    #[arg(long)]
    pub(crate) file: Option<PathBuf>,
    /// Wait up to this many seconds for another writer to detach
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub(crate) wait: Option<Duration>,
}

#[derive(clap::Args)]
pub(crate) struct ReadArgs {
    #[command(flatten)]
    pub(crate) pool: PoolArg,
    #[command(flatten)]
    pub(crate) key: KeyArg,
    /// PMO to read
    pub(crate) name: String,
    /// Byte offset in the PMO to read from
    #[arg(long, default_value_t = 0, value_parser = parse_bytes)]
    pub(crate) offset: u64,
    /// Number of bytes to read, e.g. 16 or 4KiB [default: from the offset to the end]
    #[arg(long, value_parser = parse_bytes)]
    pub(crate) len: Option<u64>,
}

/// `pmo create`.
pub(crate) fn create(args: &CreateArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let CreateArgs {
        name,
        size,
        scheme,
        shadow,
        cipher,
        max_size,
        ..
    } = args;
    let pool = ctx.open()?;
    let cipher = cipher.as_deref();
    let scheme = match (scheme.as_deref(), shadow.as_deref()) {
        (None, None) if cipher.is_none() => None,
        (Some(s), shadow) => Some(with_shadow(parse_scheme(s)?, shadow, cipher)?),
        (None, shadow) => {
            let base = match pmo_store::Scheme::from_env()? {
                Some(s) => s,
                None => pool.default_scheme()?,
            };
            Some(with_shadow(base, shadow, cipher)?)
        }
    };
    let key = ctx.key()?;
    let info = pool.pcreate_max(name, *size, max_size.unwrap_or(0), &key, scheme)?;
    outln!(
        "created PMO '{}' ({}, scheme {}) at {:#x}",
        info.name,
        human(info.size),
        scheme_name(info.scheme),
        info.base_addr
    )?;
    Ok(())
}

/// `pmo destroy`.
pub(crate) fn destroy(args: &DestroyArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let DestroyArgs { name, .. } = args;
    let pool = ctx.open()?;
    let key = ctx.key()?;
    pool.pdestroy(name, &key)?;
    outln!("destroyed PMO '{name}'")?;
    // The lock directory of an LMDB environment it held goes with it (docs/lmdb.md).
    let root = pmo_lmdb::lockdir::lock_root();
    match pmo_lmdb::lockdir::remove_for(&root, &pool, name) {
        Ok(Removal::Removed | Removal::Absent) => {}
        Ok(Removal::InUse) => errln!(
            "note: LMDB's lock directory of '{name}' under {} is in use: left; \
             `pmo lmdb locks --clean` removes it once unused",
            root.display()
        ),
        Ok(Removal::Failed(e)) => {
            errln!("note: LMDB's lock directory of '{name}' not removed: {e}")
        }
        Ok(Removal::NotOurs(why)) => errln!(
            "note: left {} ({why})",
            root.join(pmo_lmdb::lockdir::dir_name(&pool.superblock().uuid, name))
                .display()
        ),
        Err(e) => errln!("note: LMDB's lock directory of '{name}' not removed: {e}"),
    }
    Ok(())
}

/// `pmo write`.
pub(crate) fn write(args: &WriteArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let WriteArgs {
        name,
        offset,
        file,
        wait,
        ..
    } = args;
    let pool = ctx.open()?;
    let key = ctx.key()?;
    let size = pool.info(name)?.size;
    let room = size.saturating_sub(*offset);
    let mut input: Box<dyn Read> = match file {
        Some(f) => {
            Box::new(std::fs::File::open(f).with_context(|| format!("open {}", f.display()))?)
        }
        None => Box::new(std::io::stdin().lock()),
    };
    let mut data = Vec::new();
    (&mut input)
        .take(room + 1)
        .read_to_end(&mut data)
        .context("read the input")?;
    if data.len() as u64 > room {
        // Count what was given, for the message, without keeping it (up to 1 GiB
        // more: an endless input such as a device must end too).
        const COUNTED: u64 = 1 << 30;
        let rest = std::io::copy(&mut (&mut input).take(COUNTED), &mut std::io::sink())
            .context("read the input")?;
        let more = if rest == COUNTED { "more than " } else { "" };
        bail!(
            "{more}{} bytes at offset {offset} do not fit in PMO '{name}' ({size} bytes: room for {room} there)",
            data.len() as u64 + rest
        );
    }
    // A real attach session, so `pmo info NAME` shows its breakdown afterwards.
    let a = pool
        .attach_with(
            name,
            Perm::Write,
            &key,
            pmo_store::AttachOptions {
                wait: *wait,
                relocate: true,
                ..Default::default()
            },
        )
        .map_err(|e| match e {
            StoreError::Busy { .. } if wait.is_none() => {
                anyhow!("{e}: wait for it with --wait SECONDS")
            }
            e => e.into(),
        })?;
    a.write_at(*offset as usize, &data)?;
    let stats = a.psync()?;
    a.detach()?;
    errln!(
        "wrote {} at offset {offset} of '{name}' ({} committed atomically)",
        crate::text::count(data.len() as u64, "byte"),
        crate::text::count(stats.pages, "page")
    );
    Ok(())
}

/// `pmo read`.
pub(crate) fn read(args: &ReadArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let ReadArgs {
        name, offset, len, ..
    } = args;
    let pool = ctx.open()?;
    let key = ctx.key()?;
    let h = pool.open_pmo(name, Perm::Read, &key, None)?;
    // Without --len: everything from the offset to the end (nothing at the end).
    if *offset > h.size() {
        bail!(
            "offset {offset} is past the end of the {}-byte PMO '{name}'",
            h.size()
        );
    }
    let room = h.size() - *offset;
    if len.is_some_and(|l| l > room) {
        bail!(
            "{} bytes at offset {offset} do not fit in the {}-byte PMO '{name}' (room for {room} there)",
            len.unwrap_or_default(),
            h.size()
        );
    }
    let len = &len.unwrap_or(room);
    let mut done = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    while done < *len {
        let n = (*len - done).min(buf.len() as u64) as usize;
        h.read_at(offset + done, &mut buf[..n])?;
        crate::out::stdout_bytes(&buf[..n])?;
        done += n as u64;
    }
    Ok(())
}
