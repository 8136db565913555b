//! Where the user key comes from: `--key-file FILE`, else `PMO_KEY`. Never a prompt when standard
//! input is not a terminal.

use std::io::IsTerminal;
use std::path::Path;

use zeroize::Zeroizing;

/// The key given on the command line or in the environment, if any (never a prompt). The
/// trailing newline of a key file is not part of the key.
pub fn given(key_file: Option<&Path>) -> Result<Option<Zeroizing<Vec<u8>>>, String> {
    if let Some(path) = key_file {
        let mut bytes = Zeroizing::new(std::fs::read(path).map_err(|e| {
            format!(
                "cannot read key file {}: {}",
                path.display(),
                crate::errtext::io(&e)
            )
        })?);
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
