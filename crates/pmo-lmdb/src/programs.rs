//! LMDB's own programs, compiled unchanged from its source (their `main` renamed by build.rs)
//! and linked into this crate: `mdb_stat`, `mdb_dump`, `mdb_load`, `mdb_copy`, `mdb_drop`, and
//! the test programs `mtest` .. `mtest6`. They open `pmo:NAME` paths like any other; the
//! mtests, which hard-code `./testdb`, run on the PMO `testdb` under `PMO_LMDB=1`.
#![allow(unsafe_code)] // Reason: calls the C programs' entry points.

use std::ffi::{c_char, c_int, CString};

use crate::ffi::programs as p;

extern "C" {
    static mut optind: c_int;
}

type Main = unsafe extern "C" fn(c_int, *mut *mut c_char) -> c_int;

/// The programs, by name.
pub const PROGRAMS: [&str; 11] = [
    "mdb_stat", "mdb_dump", "mdb_load", "mdb_copy", "mdb_drop", "mtest", "mtest2", "mtest3",
    "mtest4", "mtest5", "mtest6",
];

fn entry(name: &str) -> Option<Main> {
    Some(match name {
        "mdb_stat" => p::mdb_stat_main,
        "mdb_dump" => p::mdb_dump_main,
        "mdb_load" => p::mdb_load_main,
        "mdb_copy" => p::mdb_copy_main,
        "mdb_drop" => p::mdb_drop_main,
        "mtest" => p::mtest_main,
        "mtest2" => p::mtest2_main,
        "mtest3" => p::mtest3_main,
        "mtest4" => p::mtest4_main,
        "mtest5" => p::mtest5_main,
        "mtest6" => p::mtest6_main,
        _ => return None,
    })
}

/// Run program `name` with `args` (not including the program name) in this process and return
/// its exit status. The programs exit(3) the process themselves on usage errors, and the mtests
/// abort(3) on any failed check: run them in a child process when that matters
/// (`pmo-lmdb-run`). `None`: no such program.
pub fn run(name: &str, args: &[String]) -> Option<i32> {
    let main = entry(name)?;
    // SAFETY: getopt's global cursor; reset so that a second program in this process parses
    // its own arguments (no other thread runs getopt).
    unsafe { optind = 1 };
    let owned: Vec<CString> = std::iter::once(name.to_string())
        .chain(args.iter().cloned())
        .map(|a| CString::new(a.replace('\0', "")).unwrap_or_default())
        .collect();
    let mut argv: Vec<*mut c_char> = owned.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    // SAFETY: argv is a NULL-terminated array of `owned.len()` NUL-terminated strings that outlive
    // the call; the programs may permute argv (getopt) but do not free it.
    Some(unsafe { main(owned.len() as c_int, argv.as_mut_ptr()) })
}

/// `pmo lmdb TOOL ARGS`: LMDB's tool `mdb_TOOL` (stat, dump, load, copy, drop) on the PMOs of
/// `pool` opened with `key`; every environment path names a PMO (`pmo:` optional), except
/// mdb_copy's destination, a directory. Returns the exit code: the tool's, or 2 when the pool
/// reported corruption or a failed integrity check. The tools print their own errors; a
/// failure below LMDB (a wrong key, a busy PMO) is printed on one more line.
pub fn cli(
    pool: pmo_store::Pool,
    key: &[u8],
    tool: &str,
    args: &[String],
) -> Result<i32, crate::LmdbError> {
    const TOOLS: [&str; 5] = ["stat", "dump", "load", "copy", "drop"];
    if !TOOLS.contains(&tool) {
        return Err(crate::LmdbError::Usage(format!(
            "unknown LMDB tool '{tool}' (one of {})",
            TOOLS.join(", ")
        )));
    }
    crate::glue::install(crate::Backend::new(pool, key));
    crate::glue::set_paths_are_names(true);
    crate::glue::clear_last_error();
    let code = run(&format!("mdb_{tool}"), args).unwrap_or(1);
    let last = crate::glue::last_error();
    crate::glue::uninstall();
    // Let a detach's background work (scrubbing a plaintext copy on the medium) finish.
    pmo_store::wait_for_background_detaches();
    Ok(match last {
        Some((msg, integrity)) if code != 0 => {
            eprintln!("pmo: {msg}");
            if integrity {
                2
            } else {
                code
            }
        }
        _ => code,
    })
}
