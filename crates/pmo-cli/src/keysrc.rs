//! Where the user key comes from: `--key-file FILE`, else `PMO_KEY`. Never a prompt when standard
//! input is not a terminal.

use std::io::{IsTerminal, Read};
use std::path::Path;

use zeroize::Zeroizing;

/// The longest key file read (1 MiB).
const KEY_FILE_MAX: u64 = 1 << 20;

/// The key given on the command line or in the environment, if any (never a prompt). The
/// trailing newline of a key file is not part of the key.
pub fn given(key_file: Option<&Path>) -> Result<Option<Zeroizing<Vec<u8>>>, String> {
    if let Some(path) = key_file {
        let cannot = |e: std::io::Error| {
            format!(
                "cannot read key file {}: {}",
                path.display(),
                crate::errtext::io(&e)
            )
        };
        // One byte more than a key may have, so that a device or a pool given by mistake is
        // refused instead of read whole.
        let file = std::fs::File::open(path).map_err(cannot)?;
        // Room for all of it up front: a growing buffer would leave copies of the key behind.
        let len = file.metadata().map_or(0, |m| m.len());
        let mut bytes = Zeroizing::new(Vec::with_capacity(
            len.saturating_add(1).min(KEY_FILE_MAX + 1) as usize,
        ));
        file.take(KEY_FILE_MAX + 1)
            .read_to_end(&mut bytes)
            .map_err(cannot)?;
        if bytes.len() as u64 > KEY_FILE_MAX {
            return Err(format!(
                "key file {} is larger than {KEY_FILE_MAX} bytes: not a key file",
                path.display()
            ));
        }
        while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            bytes.pop();
        }
        if bytes.is_empty() {
            return Err(format!("key file {} is empty", path.display()));
        }
        return Ok(Some(bytes));
    }
    if let Some(k) = std::env::var_os("PMO_KEY") {
        use std::os::unix::ffi::OsStrExt;
        if k.is_empty() {
            return Err("PMO_KEY is empty".into());
        }
        return Ok(Some(Zeroizing::new(k.as_bytes().to_vec())));
    }
    Ok(None)
}

/// Read the key: [`given`], else a prompt when standard input is a terminal.
pub fn load(key_file: Option<&Path>) -> Result<Zeroizing<Vec<u8>>, String> {
    if let Some(k) = given(key_file)? {
        return Ok(k);
    }
    if std::io::stdin().is_terminal() {
        let k = Zeroizing::new(
            rpassword::prompt_password("key: ").map_err(|e| format!("cannot read key: {e}"))?,
        );
        if k.is_empty() {
            return Err("empty key".into());
        }
        return Ok(Zeroizing::new(k.as_bytes().to_vec()));
    }
    Err("no key given: use --key-file FILE or set PMO_KEY".into())
}
