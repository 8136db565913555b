//! Builds the C and C++ programs under `tests/c/` against the libpmo cargo just built (the
//! static `libpmo.a` for C, the shared `libpmo.so` for C++) and runs them with a temporary
//! `PMO_POOL`, asserting exit status 0 and the expected output.
//!
//! - `pmo_test create` then `pmo_test verify` in a second process: every call and errno, a
//!   forked child for cross-process EBUSY, a raw-pointer linked list across detach/attach and
//!   process restart. Run once with the default fault mechanism and once with `sigsegv`.
//! - `pmo_heap_test create`, `wrongkey` (another `PMO_KEY`), then `verify`, each in its own
//!   process: the `pmo_p_malloc` family on the default heap created on first use, a list of
//!   pmo_p_malloc'd nodes found again from the root after restart, double/interior/invalid frees,
//!   and `pmo_heap_*` on a named heap. Default fault mechanism and `sigsegv`.
//! - `pmo_cxx`: the header from C++11, linked against the shared library; also the default
//!   pool path (no `PMO_POOL`) created on first use.
//! - `pmo_libpmem`: `<libpmem.h>` and `pmo.h` together (skipped with a note when libpmem-dev is
//!   not installed).
//! - the headers alone under `-std=c99 -Wpedantic` and `-std=c++11`, and the shared library's
//!   exported symbols: exactly the calls of `pmo.h` and `pmo_heap.h`, none of them libpmem's.
//! - the compatibility suite `ref_compat.c` + `ref_alloc.c` (a program written for the research
//!   kernel's header, defining its own `p_malloc` family): gcc and g++ as C99, C11, C++11 and
//!   C++17 with `-Wall -Wextra -Werror`, each linked statically and dynamically, `create` then
//!   `verify` in a new process; and neither library defines a name such programs define.
//!
//! Needs `cc`/`c++` (gcc or clang); without a C compiler the tests print a note and pass.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// Every function `include/pmo.h` and `include/pmo_heap.h` declare: the shared library
/// exports exactly these.
const HEADER_CALLS: &[&str] = &[
    "attach",
    "detach",
    "secure_attach",
    "dynamic_attach",
    "subset_attach",
    "secure_write_detach",
    "dynamic_detach",
    "pmo_enable_debug",
    "pmo_disable_debug",
    "pmo_attach",
    "pmo_attach_ex",
    "pmo_refresh",
    "pmo_snapshot_seq",
    "pmo_create",
    "pmo_create_ex",
    "pmo_create_max",
    "pmo_get_session_stats",
    "pmo_destroy",
    "pmo_rename",
    "pmo_rekey",
    "pmo_copy",
    "pmo_snapshot",
    "pmo_rotate",
    "pmo_resize",
    "pmo_export",
    "pmo_import",
    "pmo_detach",
    "pmo_exists",
    "pmo_get_name",
    "pmo_get_size",
    "pmo_last_error",
    "pmo_last_error_message",
    "pmo_pool_close",
    "pmo_pool_open",
    "pmo_psync_ex",
    "pmo_strerror",
    "psync",
    "psync_nochecksum",
    "pmo_p_malloc",
    "pmo_p_calloc",
    "pmo_p_realloc",
    "pmo_p_free",
    "pmo_p_sizeof",
    "pmo_p_persist",
    "pmo_p_get_root",
    "pmo_p_set_root",
    "pmo_heap_open",
    "pmo_heap_default",
    "pmo_heap_close",
    "pmo_heap_alloc",
    "pmo_heap_realloc",
    "pmo_heap_free",
    "pmo_heap_usable_size",
    "pmo_heap_psync",
    "pmo_heap_root",
    "pmo_heap_set_root",
    "pmo_heap_foreach",
    "pmo_heap_check",
];

fn create_then_verify(tag: &str, fault: Option<&str>) {
    if !compiler_available("cc") {
        eprintln!("note: no C compiler (cc): skipping pmo_test.c");
        return;
    }
    let dir = scratch(tag);
    let exe = dir.join("pmo_test");
    build_c_static("pmo_test.c", &exe, &[]);
    let pool = dir.join("pool").join("c.pool");
    assert!(!pool.exists());
    let with_fault = |mut c: Command| {
        if let Some(f) = fault {
            c.env("PMO_FAULT", f);
        }
        c
    };
    // Its read-only attaches' pin tables in a directory of the test's own (`PMO_PINS_DIR`).
    let pins = dir.join("pins");
    std::fs::create_dir_all(&pins).unwrap();
    let out = run_ok(
        with_fault(program(&exe, &pool))
            .env("PMO_PINS_DIR", &pins)
            .arg("create"),
        "pmo_test create",
    );
    assert!(out.contains("pmo_test create: ok"), "{out}");
    // The pool handle kept a reader's table for its next reader; the exit removed it (the
    // program never closes the pool).
    let left: Vec<_> = std::fs::read_dir(&pins)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "pin tables left after exit: {left:?}");
    // Created on first use, in a directory that did not exist: 1 GiB, sparse.
    let meta = std::fs::metadata(&pool).expect("pool created by the C API");
    assert_eq!(meta.len(), 1 << 30);
    let addr_line = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("list at "))
            .and_then(|l| l.split(':').next())
            .map(str::to_owned)
    };
    let created_at = addr_line(&out).expect("create prints the list address");
    // A new process: the list is at the same address, whole.
    let out = run_ok(
        with_fault(program(&exe, &pool)).arg("verify"),
        "pmo_test verify",
    );
    assert!(out.contains("pmo_test verify: ok"), "{out}");
    assert_eq!(addr_line(&out).as_deref(), Some(created_at.as_str()));
    // The list was destroyed by verify: a second verify must fail, and say why.
    let o = with_fault(program(&exe, &pool))
        .arg("verify")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no PMO named 'list'"),
        "{}",
        show(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn c_program_create_then_verify_in_a_new_process() {
    create_then_verify("default", None);
}

#[test]
fn c_program_with_the_sigsegv_fault_mechanism() {
    create_then_verify("sigsegv", Some("sigsegv"));
}

fn heap_create_then_verify(tag: &str, fault: Option<&str>) {
    if !compiler_available("cc") {
        eprintln!("note: no C compiler (cc): skipping pmo_heap_test.c");
        return;
    }
    let dir = scratch(tag);
    let exe = dir.join("pmo_heap_test");
    build_c_static("pmo_heap_test.c", &exe, &[]);
    let pool = dir.join("h.pool");
    let run = |phase: &str, key: &str| {
        let mut c = program(&exe, &pool);
        c.arg(phase)
            .env("PMO_HEAP", "capi.heap")
            .env("PMO_HEAP_SIZE", "16M")
            .env("PMO_KEY", key);
        match fault {
            Some(f) => c.env("PMO_FAULT", f),
            None => c.env_remove("PMO_FAULT"),
        };
        let out = run_ok(&mut c, &format!("pmo_heap_test {phase}"));
        assert!(out.contains(&format!("pmo_heap_test {phase}: ok")), "{out}");
        out
    };
    run("create", "heap key");
    run("threads", "heap key");
    run("wrongkey", "another key");
    let out = run("verify", "heap key");
    assert!(out.contains("verified 1000 nodes from the root"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rounds of the SIGKILL test: each kills a churning process at a random moment. The
/// environment variable `PMO_CAPI_KILLS` raises it for a soak run.
const KILL_ROUNDS: u32 = 12;

fn kill_rounds() -> u32 {
    std::env::var("PMO_CAPI_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(KILL_ROUNDS)
}

#[test]
fn c_heap_program_survives_sigkill_between_and_inside_p_persist() {
    if !compiler_available("cc") {
        eprintln!("note: no C compiler (cc): skipping pmo_heap_test.c");
        return;
    }
    use std::io::BufRead;
    let dir = scratch("heap-kill");
    let exe = dir.join("pmo_heap_test");
    build_c_static("pmo_heap_test.c", &exe, &[]);
    let pool = dir.join("k.pool");
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    eprintln!("kill test seed {seed}");
    let mut rng = seed;
    let mut next = move || {
        // xorshift64: reproducible from the printed seed.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let heap_env = |c: &mut Command| {
        c.env("PMO_HEAP", "kill.heap")
            .env("PMO_HEAP_SIZE", "16M")
            .env("PMO_KEY", "kill key")
            .env_remove("PMO_FAULT");
    };
    for round in 0..kill_rounds() {
        let mut cmd = program(&exe, &pool);
        cmd.arg("churn").stdout(std::process::Stdio::piped());
        heap_env(&mut cmd);
        let mut child = cmd.spawn().expect("spawn churn");
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel::<u64>();
        let reader = std::thread::spawn(move || {
            // Only whole lines count: each was printed after its pmo_p_persist returned.
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(seq) = line.trim().parse::<u64>() {
                    if tx.send(seq).is_err() {
                        break;
                    }
                }
            }
        });
        // Wait for the first acknowledged persist, then kill at a random moment.
        let first = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("round {round} (seed {seed}): churn acknowledged nothing"));
        std::thread::sleep(std::time::Duration::from_millis(5 + next() % 120));
        child.kill().expect("SIGKILL");
        let status = child.wait().expect("wait");
        reader.join().expect("reader");
        let acked = rx.try_iter().last().unwrap_or(first);
        assert!(
            status.code().is_none(),
            "round {round} (seed {seed}): churn exited by itself: {status:?}"
        );
        let mut check = program(&exe, &pool);
        check.arg("crashcheck").arg(acked.to_string());
        heap_env(&mut check);
        let out = run_ok(&mut check, &format!("crashcheck round {round} seed {seed}"));
        assert!(out.contains("pmo_heap_test crashcheck: ok"), "{out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn c_heap_program_create_then_verify_in_a_new_process() {
    heap_create_then_verify("heap", None);
}

#[test]
fn c_heap_program_with_the_sigsegv_fault_mechanism() {
    heap_create_then_verify("heap-sigsegv", Some("sigsegv"));
}

#[test]
fn cxx_program_against_the_shared_library_on_the_default_pool() {
    if !compiler_available("c++") {
        eprintln!("note: no C++ compiler (c++): skipping pmo_cxx.cpp");
        return;
    }
    let dir = scratch("cxx");
    let exe = dir.join("pmo_cxx");
    let so = library("so");
    // The shared library under its link name, so -lpmo finds this build and nothing else.
    let libdir = dir.join("lib");
    std::fs::create_dir_all(&libdir).unwrap();
    install_shared(&so, &libdir);
    let mut cmd = Command::new("c++");
    cmd.args(["-std=c++11", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(include_dir())
        .arg(c_source("pmo_cxx.cpp"))
        .arg("-L")
        .arg(&libdir)
        .arg("-lpmo")
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .arg("-o")
        .arg(&exe);
    run_ok(&mut cmd, "c++ pmo_cxx.cpp");
    // No PMO_POOL: the default path under XDG_DATA_HOME, created on first use.
    let data = dir.join("data");
    let out = run_ok(
        Command::new(&exe)
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("PMO_POOL")
            .env("XDG_DATA_HOME", &data)
            .env("PMO_KDF", "fast"),
        "pmo_cxx",
    );
    assert!(out.contains("pmo_cxx: ok"), "{out}");
    let pool = data.join("pmo").join("default.pool");
    assert_eq!(
        std::fs::metadata(&pool).expect("default pool").len(),
        1 << 30
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn libpmem_header_present() -> bool {
    let mut child = match Command::new("cc")
        .args(["-E", "-x", "c", "-o", "/dev/null", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(_) => return false,
    };
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let _ = stdin.write_all(b"#include <libpmem.h>\n");
    }
    child.wait().map(|s| s.success()).unwrap_or(false)
}

#[test]
fn pmo_h_and_libpmem_h_in_one_program() {
    if !compiler_available("cc") {
        eprintln!("note: no C compiler (cc): skipping pmo_libpmem.c");
        return;
    }
    if !libpmem_header_present() {
        eprintln!(
            "note: <libpmem.h> is not installed (Debian: libpmem-dev): skipping pmo_libpmem.c; \
             libpmem's documented symbols are all pmem_*, and libpmo exports none (see \
             shared_library_exports_exactly_the_header_calls)"
        );
        return;
    }
    let dir = scratch("libpmem");
    let exe = dir.join("pmo_libpmem");
    build_c_static("pmo_libpmem.c", &exe, &["-lpmem"]);
    let out = run_ok(&mut program(&exe, &dir.join("p.pool")), "pmo_libpmem");
    assert!(out.contains("pmo_libpmem: ok"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn header_compiles_alone_as_c99_and_cxx11() {
    let dir = scratch("header");
    let c = dir.join("h.c");
    std::fs::write(
        &c,
        "#include \"pmo.h\"\n#include \"pmo_heap.h\"\nint main(void) { return pmo_last_error(); }\n",
    )
    .unwrap();
    let cases: [(&str, &[&str], &Path); 2] = [
        (
            "cc",
            &[
                "-std=c99",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-Wpedantic",
                "-x",
                "c",
            ],
            &c,
        ),
        (
            "c++",
            &[
                "-std=c++11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-Wpedantic",
                "-x",
                "c++",
            ],
            &c,
        ),
    ];
    for (cc, flags, src) in cases {
        if !compiler_available(cc) {
            eprintln!("note: no {cc}: skipping the header check");
            continue;
        }
        let mut cmd = Command::new(cc);
        cmd.args(flags)
            .arg("-fsyntax-only")
            .arg("-I")
            .arg(include_dir())
            .arg(src);
        run_ok(&mut cmd, &format!("{cc} {flags:?} pmo.h"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Dynamic symbols a shared library defines.
fn defined_dynamic_symbols(lib: &Path) -> Option<Vec<String>> {
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .ok()?;
    if !o.status.success() {
        return None;
    }
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            // "<value> <type> <name>[@@VERSION]"; type A is a version node, not a symbol.
            let mut f = l.split_whitespace();
            let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
            (kind != "A").then(|| name.split('@').next().unwrap_or(name).to_owned())
        })
        .collect();
    v.sort();
    Some(v)
}

#[test]
fn shared_library_exports_exactly_the_header_calls() {
    let Some(ours) = defined_dynamic_symbols(&library("so")) else {
        eprintln!("note: nm is not available: skipping the symbol check");
        return;
    };
    let mut want: Vec<String> = HEADER_CALLS.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(ours, want);
    // Every call the headers declare is in HEADER_CALLS (a declaration is `name(` after a type).
    let header = std::fs::read_to_string(include_dir().join("pmo.h")).unwrap()
        + &std::fs::read_to_string(include_dir().join("pmo_heap.h")).unwrap();
    for name in HEADER_CALLS {
        assert!(
            header.contains(&format!(" {name}(")) || header.contains(&format!("*{name}(")),
            "{name}"
        );
    }
    let libpmem = [
        "/usr/lib/x86_64-linux-gnu/libpmem.so.1",
        "/usr/lib64/libpmem.so.1",
    ]
    .iter()
    .map(Path::new)
    .find(|p| p.exists());
    match libpmem.and_then(defined_dynamic_symbols) {
        Some(theirs) => {
            let clash: Vec<&String> = ours.iter().filter(|s| theirs.contains(s)).collect();
            assert!(clash.is_empty(), "symbols defined by both: {clash:?}");
            assert!(theirs.iter().all(|s| s.starts_with("pmem_")), "{theirs:?}");
        }
        None => eprintln!(
            "note: libpmem.so.1 not found: its documented symbols are pmem_* only, and none \
             of ours starts with pmem_"
        ),
    }
    assert!(ours.iter().all(|s| !s.starts_with("pmem_")));
}

/// Names a program written for the research kernel's PMO header defines for itself (its
/// allocator's calls and globals, its timing helpers, and the reference header's own helpers),
/// as `tests/c/ref_alloc.h` declares them: libpmo must define none of them.
const REFERENCE_PROGRAM_NAMES: &[&str] = &[
    "p_init",
    "p_destroy",
    "p_persist",
    "p_malloc",
    "p_calloc",
    "p_realloc",
    "p_free",
    "p_pool_create",
    "p_pool_delete",
    "p_pool_malloc",
    "p_pool_free",
    "p_defrag",
    "p_sizeof",
    "make_pmo_name",
    "pmalloc_init",
    "dump_times",
    "dump_thread_times",
    "alloc_memory",
    "dealloc_memory",
    "djb2_hash",
    "do_create",
    "get_size",
    "POOL_SIZE",
    "pcache",
    "attach_time",
    "detach_time",
    "psync_time",
    "total_cycle_times",
    "times_invoked",
];

/// Global symbols a static archive defines.
fn defined_archive_symbols(lib: &Path) -> Option<Vec<String>> {
    let o = Command::new("nm")
        .args(["-g", "--defined-only"])
        .arg(lib)
        .output()
        .ok()?;
    if !o.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 3).then(|| f[2].to_owned())
            })
            .collect(),
    )
}

#[test]
fn neither_library_defines_a_name_a_reference_program_defines() {
    let (Some(shared), Some(archive)) = (
        defined_dynamic_symbols(&library("so")),
        defined_archive_symbols(&library("a")),
    ) else {
        eprintln!("note: nm is not available: skipping the symbol check");
        return;
    };
    for name in REFERENCE_PROGRAM_NAMES {
        assert!(
            !shared.iter().any(|s| s == name),
            "libpmo.so defines {name}"
        );
        assert!(
            !archive.iter().any(|s| s == name),
            "libpmo.a defines {name}"
        );
    }
    // The reference's own calls are there, in both.
    for name in ["attach", "secure_attach", "pmo_create", "psync_nochecksum"] {
        assert!(archive.iter().any(|s| s == name), "libpmo.a lacks {name}");
        assert!(shared.iter().any(|s| s == name), "libpmo.so lacks {name}");
    }
    // ref_alloc.c, which the suite links, defines every one of those names (each is an
    // identifier there), so the link test below covers them all.
    let src = std::fs::read_to_string(c_source("ref_alloc.c")).unwrap();
    let idents: std::collections::HashSet<&str> = src
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    for name in REFERENCE_PROGRAM_NAMES {
        assert!(idents.contains(name), "ref_alloc.c does not define {name}");
    }
}

/// One compiler configuration of the compatibility suite.
struct Dialect {
    compiler: &'static str,
    std: &'static str,
}

const DIALECTS: &[Dialect] = &[
    Dialect {
        compiler: "gcc",
        std: "c99",
    },
    Dialect {
        compiler: "gcc",
        std: "c11",
    },
    Dialect {
        compiler: "g++",
        std: "c++11",
    },
    Dialect {
        compiler: "g++",
        std: "c++17",
    },
];

/// Build `ref_compat` in one dialect, linked statically (`libpmo.a`) or dynamically (`-lpmo`
/// from `libdir`).
fn build_ref_compat(d: &Dialect, shared: Option<&Path>, out: &Path) {
    let mut cmd = Command::new(d.compiler);
    cmd.arg(format!("-std={}", d.std))
        .args(["-Wall", "-Wextra", "-Werror", "-g", "-I"])
        .arg(include_dir());
    if d.compiler == "g++" {
        cmd.args(["-x", "c++"]);
    }
    cmd.arg(c_source("ref_compat.c"))
        .arg(c_source("ref_alloc.c"));
    if d.compiler == "g++" {
        cmd.args(["-x", "none"]);
    }
    match shared {
        Some(libdir) => {
            cmd.arg("-L")
                .arg(libdir)
                .arg("-lpmo")
                .arg(format!("-Wl,-rpath,{}", libdir.display()));
        }
        None => {
            cmd.arg(library("a")).args(STATIC_DEPS);
        }
    }
    cmd.arg("-o").arg(out);
    let how = if shared.is_some() { "shared" } else { "static" };
    run_ok(
        &mut cmd,
        &format!("{} -std={} ref_compat ({how})", d.compiler, d.std),
    );
}

#[test]
fn reference_programs_build_unchanged_and_run_in_every_dialect_static_and_shared() {
    if !compiler_available("gcc") || !compiler_available("g++") {
        eprintln!("note: gcc/g++ not available: skipping the compatibility suite");
        return;
    }
    let dir = scratch("ref-compat");
    let libdir = dir.join("lib");
    std::fs::create_dir_all(&libdir).unwrap();
    install_shared(&library("so"), &libdir);
    for d in DIALECTS {
        for shared in [false, true] {
            let tag = format!(
                "{}-{}",
                d.std.replace('+', "x"),
                if shared { "so" } else { "a" }
            );
            let exe = dir.join(format!("ref_compat-{tag}"));
            build_ref_compat(d, shared.then_some(libdir.as_path()), &exe);
            let pool = dir.join(format!("{tag}.pool"));
            let o = program(&exe, &pool)
                .args(["create", "200"])
                .output()
                .expect("run ref_compat create");
            assert!(o.status.success(), "{tag} create: {}", show(&o));
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(out.contains("ref_compat create: ok"), "{tag}: {out}");
            // pmo_enable_debug traced exactly the one call made while it was on.
            let err = String::from_utf8_lossy(&o.stderr);
            let traced: Vec<&str> = err.lines().filter(|l| l.starts_with("pmo: ")).collect();
            assert_eq!(traced.len(), 1, "{tag}: {err}");
            assert!(
                traced[0].starts_with("pmo: attach(\"ref.traced\", 'r') = 0x0 (no PMO named"),
                "{tag}: {err}"
            );
            let out = run_ok(
                program(&exe, &pool).args(["verify", "200"]),
                &format!("{tag} verify"),
            );
            assert!(out.contains("walked 200 nodes"), "{tag}: {out}");
            assert!(out.contains("ref_compat verify: ok"), "{tag}: {out}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The benchmark programs are run by hand (docs/c-api.md); they must still compile against
/// the current headers.
#[test]
fn benchmark_programs_compile() {
    if !compiler_available("cc") {
        eprintln!("note: no C compiler (cc): skipping the benchmark programs");
        return;
    }
    for src in ["pmo_heap_bench.c", "pmo_psync_bench.c"] {
        let mut cmd = Command::new("cc");
        cmd.args([
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            "-I",
        ])
        .arg(include_dir())
        .arg(c_source(src));
        run_ok(&mut cmd, &format!("cc {src}"));
    }
}
