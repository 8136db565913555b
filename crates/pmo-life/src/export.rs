//! Moving a PMO's contents: export to a self-contained file, import from one, copy to a new
//! PMO (`docs/lifecycle.md`; the file format byte by byte in `docs/format.md` §7).
//!
//! An export file is encrypted and authenticated under keys derived from the PMO's data master
//! key and a random export id: every page is sealed with AES-256-GCM (associated data: export
//! id, PMO uuid, page index), and an HMAC-SHA256 covers the header and every page tag, so a
//! changed byte, a reordered page or a truncated file fails. Import checks the key against the
//! entry in the header, then verifies the whole file (every page opened, the MAC compared)
//! before it creates anything; then it creates the PMO under a temporary name, fills it in
//! psynced batches and renames it, so a crash leaves either no PMO of the final name or the
//! whole one (and at most a `NAME.partial` PMO to destroy).

use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use pmo_crypt::{open_page, seal_page, MasterKey as CryptMaster, PageCtx, PmoKeys, Tag, TAG_LEN};
use pmo_format::{Entry, ENTRY_SIZE, PAGE_SIZE};

use crate::snapshot::Sink;
use pmo_engine::engine::Page;
use pmo_meta::error::{Result, StoreError};
use pmo_meta::keys::{self, MasterKey};
use pmo_meta::scheme::Scheme;
use pmo_pool::handle::PmoHandle;
use pmo_pool::pool::{Perm, PmoInfo, Pool};

/// Magic of an export file.
pub const EXPORT_MAGIC: [u8; 8] = *b"PMOEXPRT";
/// Export format version.
pub const EXPORT_VERSION: u32 = 1;
/// Header bytes: magic 8, version 4, header length 4, size 8, pages 8, export id 16, entry 512.
pub const HEADER_LEN: usize = 48 + ENTRY_SIZE;
/// Bytes per page record: ciphertext and GCM tag.
pub const RECORD_LEN: usize = PAGE_SIZE as usize + TAG_LEN;
/// Bytes of the trailing MAC.
pub const MAC_LEN: usize = 32;
/// Pages per psync when filling an imported or copied PMO.
const BATCH: u64 = 256;
const MAC_DOMAIN: &[u8] = b"pmo/v1/export";

pub use pmo_pool::pool::Progress;

fn io(op: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
    let op = op.into();
    move |source| StoreError::Io { op, source }
}

fn bad(file: &Path, why: impl std::fmt::Display) -> StoreError {
    StoreError::IntegrityPmo {
        name: file.display().to_string(),
        reason: format!("export file refused: {why}"),
    }
}

fn file_keys(data: &MasterKey, id: [u8; 16], uuid: [u8; 16]) -> Result<PmoKeys> {
    PmoKeys::derive(&CryptMaster::from_bytes(**data), id, uuid)
        .map_err(|e| StoreError::Invalid(format!("export keys: {e}")))
}

fn ctx(keys: &PmoKeys, page: u64) -> PageCtx {
    PageCtx {
        pool_uuid: keys.pool_uuid(),
        pmo_uuid: keys.pmo_uuid(),
        page_index: page,
        version: 1,
    }
}

/// The decoded header of an export file.
struct Header {
    raw: [u8; HEADER_LEN],
    pages: u64,
    id: [u8; 16],
    entry: Entry,
}

fn encode_header(entry: &Entry, id: [u8; 16]) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&EXPORT_MAGIC);
    h[8..12].copy_from_slice(&EXPORT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    h[16..24].copy_from_slice(&entry.size.to_le_bytes());
    h[24..32].copy_from_slice(&(entry.size / PAGE_SIZE).to_le_bytes());
    h[32..48].copy_from_slice(&id);
    h[48..].copy_from_slice(&entry.encode());
    h
}

fn decode_header(file: &Path, raw: [u8; HEADER_LEN], file_len: u64) -> Result<Header> {
    let u32_at = |o: usize| u32::from_le_bytes(raw[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(raw[o..o + 8].try_into().expect("8 bytes"));
    if raw[..8] != EXPORT_MAGIC {
        return Err(StoreError::Invalid(format!(
            "{} is not a pmo export file (no PMOEXPRT magic)",
            file.display()
        )));
    }
    if u32_at(8) != EXPORT_VERSION || u32_at(12) as usize != HEADER_LEN {
        return Err(bad(
            file,
            format!("version {} header {} unknown", u32_at(8), u32_at(12)),
        ));
    }
    let (size, pages) = (u64_at(16), u64_at(24));
    let entry = Entry::decode(&raw[48..])
        .map_err(|e| bad(file, format!("its entry: {e}")))?
        .ok_or_else(|| bad(file, "no entry"))?;
    if entry.size != size || pages != size / PAGE_SIZE {
        return Err(bad(file, "sizes disagree"));
    }
    let want = (pages as u128) * RECORD_LEN as u128 + (HEADER_LEN + MAC_LEN) as u128;
    if file_len as u128 != want {
        return Err(bad(
            file,
            format!("{file_len} bytes where {want} are expected (truncated or extended)"),
        ));
    }
    Ok(Header {
        raw,
        pages,
        id: raw[32..48].try_into().expect("16 bytes"),
        entry,
    })
}

/// Where an export file is written before it is complete.
pub fn partial_path(file: &Path) -> std::path::PathBuf {
    let mut p = file.as_os_str().to_owned();
    p.push(".partial");
    p.into()
}

/// The export file a snapshot writes (`Pool::snapshot_to_file`): every page sealed under
/// the file keys at its place, the tags kept for the MAC written last, then an fsync.
pub struct FileSink {
    path: std::path::PathBuf,
    file: std::fs::File,
    fk: PmoKeys,
    header: [u8; HEADER_LEN],
    tags: Vec<u8>,
    pages: u64,
    ct: Box<Page>,
    /// Consecutive records not yet written (a run starting at `run_start`).
    run: Vec<u8>,
    run_start: u64,
}

impl FileSink {
    /// Create the export file `file` (which must not exist) for PMO `entry` with data master
    /// `data`: written as `file.partial`, which [`FileSink::finish`] links to `file` once it
    /// is complete and synced, so a process killed meanwhile leaves no `file`.
    pub fn create(file: &Path, entry: &Entry, data: &MasterKey) -> Result<FileSink> {
        let id = keys::random_bytes::<16>();
        let fk = file_keys(data, id, entry.uuid)?;
        if file.symlink_metadata().is_ok() {
            return Err(StoreError::Io {
                op: format!("create {}", file.display()),
                source: std::io::ErrorKind::AlreadyExists.into(),
            });
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .read(true)
            .create(true)
            .truncate(true)
            .open(partial_path(file))
            .map_err(io(format!("create {}", partial_path(file).display())))?;
        let pages = entry.size / PAGE_SIZE;
        Ok(FileSink {
            path: file.to_path_buf(),
            file: f,
            fk,
            header: encode_header(entry, id),
            tags: vec![0; pages as usize * TAG_LEN],
            pages,
            ct: Box::new([0; PAGE_SIZE as usize]),
            run: Vec::with_capacity(256 * RECORD_LEN),
            run_start: 0,
        })
    }

    fn write_run(&mut self) -> Result<()> {
        use std::os::unix::fs::FileExt;
        if !self.run.is_empty() {
            let at = HEADER_LEN as u64 + self.run_start * RECORD_LEN as u64;
            self.file
                .write_all_at(&self.run, at)
                .map_err(io("write the export"))?;
            self.run.clear();
        }
        Ok(())
    }

    /// Write the header and the MAC, fsync.
    pub fn finish(&mut self) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.write_run()?;
        let mac = self
            .fk
            .mac_metadata(MAC_DOMAIN, &[&self.header, &self.tags]);
        let end = HEADER_LEN as u64 + self.pages * RECORD_LEN as u64;
        self.file
            .write_all_at(&mac.0, end)
            .and_then(|_| self.file.write_all_at(&self.header, 0))
            .map_err(io("write the export"))?;
        self.file.sync_all().map_err(io("sync the export"))?;
        let tmp = partial_path(&self.path);
        // A link, not a rename: a file that appeared under the final name meanwhile stays.
        std::fs::hard_link(&tmp, &self.path)
            .map_err(io(format!("create {}", self.path.display())))?;
        let _ = std::fs::remove_file(&tmp);
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("sync the export's directory"))
    }

    /// Remove the unfinished file.
    pub fn discard(&self) {
        let _ = std::fs::remove_file(partial_path(&self.path));
    }
}

impl Sink for FileSink {
    fn put(&mut self, p: u64, page: &Page) -> Result<()> {
        let next = self.run_start + (self.run.len() / RECORD_LEN) as u64;
        if self.run.is_empty() || p != next || self.run.len() >= 256 * RECORD_LEN {
            self.write_run()?;
            self.run_start = p;
        }
        let tag = seal_page(&self.fk, &ctx(&self.fk, p), page, &mut self.ct)
            .map_err(|e| StoreError::Invalid(format!("seal: {e}")))?;
        self.run.extend_from_slice(&self.ct[..]);
        self.run.extend_from_slice(&tag.0);
        self.tags[p as usize * TAG_LEN..][..TAG_LEN].copy_from_slice(&tag.0);
        Ok(())
    }

    fn end_pass(&mut self) -> Result<()> {
        self.write_run()
    }

    fn get(&mut self, p: u64, page: &mut Page) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let mut rec = vec![0u8; RECORD_LEN];
        self.file
            .read_exact_at(&mut rec, HEADER_LEN as u64 + p * RECORD_LEN as u64)
            .map_err(io("read the export back"))?;
        open_record(&self.fk, p, &rec, page).map_err(|_| bad(&self.path, "a page changed"))
    }
}

/// The new PMO a snapshot or copy fills (`Pool::snapshot`): psyncs of up to `BATCH` pages;
/// all-zero pages are skipped unless an earlier pass wrote the page.
pub struct PmoSink<'a> {
    h: &'a PmoHandle,
    batch: Vec<(u64, Box<Page>)>,
    written: Vec<bool>,
}

impl<'a> PmoSink<'a> {
    pub fn new(h: &'a PmoHandle, pages: u64) -> PmoSink<'a> {
        PmoSink {
            h,
            batch: Vec::new(),
            written: vec![false; pages as usize],
        }
    }
}

impl Sink for PmoSink<'_> {
    fn put(&mut self, p: u64, page: &Page) -> Result<()> {
        if self.written[p as usize] || page.iter().any(|&b| b != 0) {
            self.written[p as usize] = true;
            self.batch.push((p, Box::new(*page)));
        }
        if self.batch.len() as u64 >= BATCH {
            self.end_pass()?;
        }
        Ok(())
    }

    fn end_pass(&mut self) -> Result<()> {
        commit(self.h, &self.batch)?;
        self.batch.clear();
        Ok(())
    }

    fn get(&mut self, p: u64, page: &mut Page) -> Result<()> {
        self.h.read_page(p, page)
    }
}

/// Import an export file as PMO `name` (`None`: the name it was exported under), checked
/// with `key` and verified whole before anything is created. Integrity failures of the file
/// are `IntegrityPmo` (exit 2); a wrong key is `WrongKey`.
pub fn import(
    pool: &Pool,
    file: &Path,
    name: Option<&str>,
    key: &[u8],
    progress: Progress,
) -> Result<PmoInfo> {
    let f = std::fs::File::open(file).map_err(io(format!("open {}", file.display())))?;
    let len = f.metadata().map_err(io("stat the export"))?.len();
    let mut r = BufReader::with_capacity(1 << 20, f);
    let mut raw = [0u8; HEADER_LEN];
    if len < HEADER_LEN as u64 {
        return Err(
            if len >= 8 && {
                r.read_exact(&mut raw[..8]).map_err(io("read the export"))?;
                raw[..8] == EXPORT_MAGIC
            } {
                bad(file, format!("truncated to {len} bytes"))
            } else {
                StoreError::Invalid(format!("{} is not a pmo export file", file.display()))
            },
        );
    }
    r.read_exact(&mut raw).map_err(io("read the export"))?;
    let hd = decode_header(file, raw, len)?;
    let data = keys::check_key(&hd.entry, key)?;
    let fk = file_keys(&data, hd.id, hd.entry.uuid)?;
    let name = name.unwrap_or(&hd.entry.name).to_string();
    pmo_meta::entries::validate_new_name(&name)?;
    let scheme = Scheme::from_code(hd.entry.scheme)?;
    // Pass 1: every page opens and the MAC matches. Nothing is created before this.
    let mut tags = Vec::with_capacity(hd.pages as usize * TAG_LEN);
    let mut rec = vec![0u8; RECORD_LEN];
    let mut pt: Box<Page> = Box::new([0; PAGE_SIZE as usize]);
    for p in 0..hd.pages {
        read_record(&mut r, &mut rec, file)?;
        open_record(&fk, p, &rec, &mut pt)
            .map_err(|_| bad(file, format!("page {p} fails its check")))?;
        tags.extend_from_slice(&rec[PAGE_SIZE as usize..]);
        progress(p + 1, 2 * hd.pages);
    }
    let mut mac = [0u8; MAC_LEN];
    r.read_exact(&mut mac).map_err(io("read the export"))?;
    fk.verify_metadata(MAC_DOMAIN, &[&hd.raw, &tags], &pmo_crypt::MetadataTag(mac))
        .map_err(|_| bad(file, "its MAC does not match"))?;
    // Pass 2: create, fill, rename.
    r.seek(SeekFrom::Start(HEADER_LEN as u64))
        .map_err(io("read the export"))?;
    let pages = hd.pages;
    let fill = |h: &PmoHandle| -> Result<()> {
        let mut batch: Vec<(u64, Box<Page>)> = Vec::new();
        for p in 0..pages {
            read_record(&mut r, &mut rec, file)?;
            open_record(&fk, p, &rec, &mut pt)
                .map_err(|_| bad(file, format!("page {p} changed during the import")))?;
            if pt.iter().any(|&b| b != 0) {
                batch.push((p, pt.clone()));
            }
            if batch.len() as u64 >= BATCH || p + 1 == pages {
                commit(h, &batch)?;
                batch.clear();
            }
            progress(pages + p + 1, 2 * pages);
        }
        pt.fill(0);
        Ok(())
    };
    // Laid out for its size: the export file does not carry a layout capacity.
    create_filled(pool, &name, hd.entry.size, 0, key, scheme, fill)
}

/// Create `name` (laid out for `capacity` bytes, 0: its size) under the temporary name
/// `name.partial`, fill it, rename it to `name`.
pub fn create_filled(
    pool: &Pool,
    name: &str,
    size: u64,
    capacity: u64,
    key: &[u8],
    scheme: Scheme,
    fill: impl FnOnce(&PmoHandle) -> Result<()>,
) -> Result<PmoInfo> {
    if pool.exists(name)? {
        return Err(StoreError::Exists(name.into()));
    }
    let tmp = format!("{name}.partial");
    pmo_meta::entries::validate_new_name(&tmp)?;
    pool.pcreate_in(&tmp, size, capacity, key, Some(scheme), None)
        .map_err(|e| match e {
            StoreError::Exists(n) if n == tmp => StoreError::Invalid(format!(
                "cannot create '{name}': it is built under the temporary name '{tmp}', \
                 which a PMO already has (one of yours, or one an interrupted import or \
                 snapshot left): destroy or rename '{tmp}' first"
            )),
            e => e,
        })?;
    let r = pool
        .open_pmo(&tmp, Perm::Write, key, None)
        .and_then(|h| fill(&h));
    match r {
        Ok(()) => crate::lifecycle::rename(pool, &tmp, name, key),
        Err(e) => {
            let _ = pool.pdestroy(&tmp, key);
            Err(e)
        }
    }
}

fn commit(h: &PmoHandle, batch: &[(u64, Box<Page>)]) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let list: Vec<(u64, &Page)> = batch.iter().map(|(p, b)| (*p, &**b)).collect();
    h.commit_pages(&list).map(|_| ())
}

fn read_record(r: &mut impl Read, rec: &mut [u8], file: &Path) -> Result<()> {
    r.read_exact(rec).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => bad(file, "truncated"),
        _ => StoreError::Io {
            op: "read the export".into(),
            source: e,
        },
    })
}

fn open_record(fk: &PmoKeys, p: u64, rec: &[u8], out: &mut Page) -> std::result::Result<(), ()> {
    let ct: &Page = rec[..PAGE_SIZE as usize].try_into().map_err(|_| ())?;
    let tag = Tag(rec[PAGE_SIZE as usize..].try_into().map_err(|_| ())?);
    open_page(fk, &ctx(fk, p), ct, &tag, out).map_err(|_| ())
}
