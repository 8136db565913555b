//! Gives `libpmo.so` a SONAME (`libpmo.so.MAJOR`), so that programs linked against an installed
//! libpmo record the ABI generation they were built for, as a system library's users expect
//! (`scripts/install` installs `libpmo.so.VERSION` with the `libpmo.so.MAJOR` and `libpmo.so`
//! links). ELF targets only.
//!
//! A program linked in the tree (`-L target/release -lpmo -Wl,-rpath,...`, docs/c-api.md) then
//! asks the loader for `libpmo.so.MAJOR`, so the build also leaves the link
//! `libpmo.so.MAJOR -> libpmo.so` beside the library (the profile directory, three levels above
//! `OUT_DIR`): the one file this script writes outside `OUT_DIR`.
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if matches!(os.as_str(), "macos" | "ios" | "windows") {
        return;
    }
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    let soname = format!("libpmo.so.{major}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    let Ok(out) = std::env::var("OUT_DIR") else {
        return;
    };
    if let Some(profile_dir) = Path::new(&out).ancestors().nth(3) {
        let link = profile_dir.join(&soname);
        if std::fs::read_link(&link).is_err() {
            let _ = std::fs::remove_file(&link);
            #[cfg(unix)]
            if let Err(e) = std::os::unix::fs::symlink("libpmo.so", &link) {
                println!("cargo:warning=cannot link {}: {e}", link.display());
            }
        }
    }
}
