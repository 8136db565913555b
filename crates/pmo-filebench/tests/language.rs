//! The rest of Filebench's workload language (randvar, arithmetic, continued statements,
//! composite flowops, block/wakeup, semblock/sempost, aiowrite/aiowait, indexed, directio and
//! the other accepted-with-a-note attributes): what each does when it runs, and clear
//! FILE:LINE(:COLUMN) errors for malformed ones.

use pmo_filebench::backend::PosixBackend;
use pmo_filebench::model::{Dist, FlowopKind};
use pmo_filebench::run::{run, RunOptions, RunResult};
use pmo_filebench::Workload;

fn go(w: &Workload, secs: f64) -> RunResult {
    let dir = std::env::temp_dir().join(format!("pmo-fb-lang-{}-{}", std::process::id(), w.name));
    let _ = std::fs::remove_dir_all(&dir);
    let b = PosixBackend::new(dir.clone());
    let r = run(
        w,
        &b,
        &RunOptions {
            seconds_cap: Some(secs),
            ..Default::default()
        },
    )
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn stat<'a>(r: &'a RunResult, name: &str) -> &'a pmo_filebench::run::FlowopStats {
    r.flowops.iter().find(|f| f.name == name).unwrap()
}

#[test]
fn randvars_arithmetic_and_continued_lines() {
    let text = "set $n = 3 * 2 + 4 / 2\n\
        define randvar name=$io, type=tabular, min=1k, randtable =\n\
        {{ 50, 1k, 1k},\n { 50, 4k, 4k}}\n\
        set $sz = randvar(type=gamma, min=0, mean=8k,\n gamma=1500, round=1k)\n\
        define fileset name=f,path=/t,size=$sz,\n   entries=$n,prealloc\n\
        define process name=p { thread name=t {\n\
          flowop openfile name=o,filesetname=f,fd=1\n\
          flowop read name=r,fd=1,\n     iosize=$io\n\
          flowop closefile name=c,fd=1\n } }\n";
    let w = Workload::from_text("v.f", text, &[]).unwrap();
    assert_eq!(w.filesets[0].entries, 8);
    let Dist::Rand(io) = &w.threads[0].flowops[1].iosize else {
        panic!("{:?}", w.threads[0].flowops[1].iosize)
    };
    // Two rows, 1k and 4k: every draw is one of them, both occur.
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(9);
    let draws: Vec<u64> = (0..400).map(|_| io.sample(&mut rng)).collect();
    assert!(draws.iter().all(|&d| d == 1024 || d == 4096), "{draws:?}");
    assert!(draws.contains(&1024) && draws.contains(&4096));
    let r = go(&w, 0.3);
    let rd = stat(&r, "r");
    assert!(rd.ops > 0);
    // Reads of 1k or 4k (short at a file's end): the mean is between.
    let mean = rd.bytes as f64 / rd.ops as f64;
    assert!(mean <= 4096.0, "{mean}");
}

#[test]
fn composite_flowops_unroll_with_their_variables() {
    let text = "define fileset name=a,path=/t,size=1k,entries=4,prealloc\n\
        define fileset name=b,path=/t,size=1k,entries=4,prealloc\n\
        define flowop name=rd, $set\n{\n\
          flowop openfile name=o,filesetname=$set,fd=1\n\
          flowop closefile name=c,fd=1\n}\n\
        define flowop name=outer, $s2, $n\n{\n\
          flowop rd name=x, iters=$n, $set=$s2\n\
          flowop statfile name=st,filesetname=$s2\n}\n\
        define process name=p { thread name=t {\n\
          flowop outer name=w, iters=2, $s2=b, $n=3\n } }\n";
    let w = Workload::from_text("c.f", text, &[]).unwrap();
    let kinds: Vec<FlowopKind> = w.threads[0].flowops.iter().map(|f| f.kind).collect();
    // outer x2 = (rd x3 = open, close) x3 + stat
    assert_eq!(kinds.len(), 2 * (3 * 2 + 1));
    assert!(w.threads[0]
        .flowops
        .iter()
        .all(|f| f.fileset.is_none() || f.fileset == Some(1)));
    let bad = text.replace("$set=$s2", "$nope=$s2");
    let e = Workload::from_text("c.f", &bad, &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("c.f:10:") && e.contains("no variable '$nope'"),
        "{e}"
    );
    let r = go(&w, 0.2);
    // Each round of `outer`: three opens, then one stat.
    let (o, st) = (stat(&r, "o").ops, stat(&r, "st").ops);
    assert!(o >= 3 * st && o <= 3 * st + 3, "opens {o} stats {st}");
}

#[test]
fn an_empty_composite_flowop_unrolls_to_nothing_at_once() {
    // iters=1e30 of an empty body (also inside another composite): nothing to unroll, so
    // loading ends at once instead of counting to 2^64.
    let text = "define flowop name=empty\n{\n}\n\
        define flowop name=outer\n{\n flowop empty name=e, iters=1e30\n}\n\
        define process name=p { thread name=t {\n\
          flowop empty name=a, iters=1e30\n\
          flowop outer name=b, iters=1000\n\
          flowop delay name=d, value=1\n } }\n";
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Workload::from_text("e.f", text, &[]).map(|w| w.threads[0].flowops.len()));
    });
    let r = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("loading ended");
    assert_eq!(r.unwrap(), 1);
}

#[test]
fn block_and_wakeup_alternate_two_processes() {
    // createdelete-swing's shape: one thread creates then wakes the other and blocks.
    let text = "define fileset name=m,path=/t,size=1k,entries=50\n\
        define process name=cr { thread name=ct {\n\
          flowop createfile name=cf,filesetname=m,fd=1\n\
          flowop closefile name=cc,fd=1\n\
          flowop wakeup name=wd, target=delblock\n\
          flowop block name=crblock\n } }\n\
        define process name=del { thread name=dt {\n\
          flowop block name=delblock\n\
          flowop deletefile name=df,filesetname=m\n\
          flowop wakeup name=wc, target=crblock\n } }\n";
    let w = Workload::from_text("s.f", text, &[]).unwrap();
    let r = go(&w, 0.6);
    let (c, d) = (stat(&r, "cf").ops, stat(&r, "df").ops);
    // A lost wakeup can stall the pair, but each create is followed by at most one delete
    // and the two never drift apart by more than one.
    assert!(c >= 1, "{r:?}");
    assert!(d <= c && c - d <= 1, "creates {c} deletes {d}");
    let bad = text.replace("target=delblock", "target=nosuch");
    let e = Workload::from_text("s.f", &bad, &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("s.f:5:") && e.contains("no block flowop"),
        "{e}"
    );
}

#[test]
fn sempost_and_semblock_pace_each_other() {
    // The blocker takes 4 per round; posters give 1 each, blocking at highwater 8.
    let text = "define file name=f,path=/t,size=64k,prealloc\n\
        define process name=w { thread name=wt {\n\
          flowop aiowrite name=aw,filename=f,iosize=4k,random,directio\n\
          flowop semblock name=sb,value=4,highwater=8\n\
          flowop aiowait name=awt\n } }\n\
        define process name=s,instances=2 { thread name=st,useism {\n\
          flowop read name=r,filename=f,iosize=4k,random\n\
          flowop sempost name=sp,value=1,target=sb,blocking\n } }\n\
        debug 1\n";
    let w = Workload::from_text("o.f", text, &[]).unwrap();
    assert!(w.directio);
    for n in ["directio", "aiowrite", "useism", "debug 1"] {
        assert!(w.notes.iter().any(|x| x.contains(n)), "{n}: {:?}", w.notes);
    }
    let r = go(&w, 0.5);
    assert!(w.notes.iter().all(|n| r.notes.contains(n)), "{:?}", r.notes);
    // The POSIX peer says whether its O_DIRECT opens worked (and how many 4 KiB-aligned
    // operations went direct) or the file system refused them.
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("files O_DIRECT; ") && !n.contains("; 0 operations ran O_DIRECT"))
            || r.notes.iter().any(|n| n.contains("refused O_DIRECT")),
        "{:?}",
        r.notes
    );
    let (blocks, posts) = (stat(&r, "sb").ops, stat(&r, "sp").ops);
    // Each finished semblock took 4 posts; blocking posters run at most highwater (8) plus
    // the 4 the unfinished semblock returned ahead of it.
    assert!(blocks >= 1, "{r:?}");
    assert!(
        posts >= 4 * blocks && posts <= 4 * blocks + 12,
        "posts {posts} blocks {blocks}"
    );
    assert!(stat(&r, "aw").ops >= blocks && stat(&r, "aw").bytes > 0);
}

#[test]
fn malformed_constructs_name_file_line_and_column() {
    let cases: &[(&str, &str)] = &[
        ("set $a = 3 * \n", "x.f:1:14: expected a value"),
        ("set $a = 3 / 0\n", "x.f:1: division by zero"),
        ("set $a = $b * 2\n", "x.f:1: variable '$b' is not set"),
        ("set $a = \"x\" + 1\n", "x.f:1: arithmetic needs numbers"),
        (
            "set $r = randvar(type=normal)\n",
            "x.f:1: unknown randvar type 'normal'",
        ),
        (
            "set $r = randvar(type=gamma, mean=1k, bogus=1)\n",
            "unknown randvar attribute 'bogus'",
        ),
        (
            "set $r = randvar(type=gamma, mean=1k\n",
            "x.f:1:37: unterminated randvar(",
        ),
        (
            "define randvar name=$r, type=tabular, randtable = {{50, 1, 2}}\n",
            "x.f:1: randtable percentages total 50%, not 100%",
        ),
        (
            "define randvar name=$r, type=tabular, randtable = {{50, 1}}\n",
            "x.f:1:",
        ),
        (
            "define randvar type=gamma\n",
            "x.f:1:8: define randvar needs name=$variable",
        ),
        (
            "define fileset name=f,path=/t,entries=2,dirgamma=1500\n",
            "x.f:1: fileset 'f': dirgamma=1500",
        ),
        // More entries than a run could list (a panic or the OOM killer when it did).
        (
            "define fileset name=f,path=/t,entries=1e30,size=1k\n",
            "x.f:1: fileset 'f': 18446744073709551615 entries",
        ),
        (
            "define fileset name=f,path=/t,leafdirs=1e12\n",
            "x.f:1: fileset 'f': 1000000000000 entries",
        ),
        // An fd past 2^32 is no other fd (4294967297 was fd 1).
        (
            "define fileset name=f,path=/t,entries=1\ndefine process name=p {\n thread name=t {\n\
             flowop openfile name=o,filesetname=f,fd=4294967297\n }\n}\n",
            "x.f:4: attribute 'fd' must be",
        ),
        (
            "define fileset name=f,path=/t,entries=1\ndefine process name=p {\n thread name=t {\n\
             flowop writewholefile name=w,filesetname=f,srcfd=1e30\n }\n}\n",
            "x.f:4: attribute 'srcfd' must be",
        ),
        // A '..' would take the files out of the run's directory (`--dir`).
        (
            "define fileset name=f,path=/t/../..,entries=1\n",
            "x.f:1: fileset 'f': '..'",
        ),
        ("define file name=..,path=/t\n", "x.f:1: fileset '..': '..'"),
        // Values are shown as the file writes them, never in Rust's Debug form.
        ("run -1\n", "x.f:1: run needs seconds, not \"-1\""),
        (
            "define fileset name=f,path=cvar(type=cvar-gamma,parameters=mean:1k;gamma:1)\n",
            "attribute 'path' must be text, not cvar-gamma (mean 1024, gamma 1)",
        ),
    ];
    for (text, want) in cases {
        let e = Workload::from_text("x.f", text, &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

/// Run a one-thread workload reading a 1 KiB file with `thread_attrs` and `iosize` for at most
/// 0.2 s: the error, if any.
fn run_read(thread_attrs: &str, iosize: &str) -> Option<String> {
    let text = format!(
        "define fileset name=f,path=/t,entries=1,size=1k,prealloc=100\n\
         define process name=p {{\n thread name=t{thread_attrs} {{\n\
         flowop openfile name=o,filesetname=f,fd=1\n\
         flowop read name=r,fd=1,iosize={iosize}\n }}\n}}\n"
    );
    let w = Workload::from_text("x.f", &text, &[]).unwrap();
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("pmo-fb-lang-{}-io-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let r = run(
        &w,
        &PosixBackend::new(dir.clone()),
        &RunOptions {
            seconds_cap: Some(0.2),
            ..Default::default()
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
    r.err().map(|e| e.to_string())
}

#[test]
fn an_iosize_no_buffer_can_hold_fails_its_flowop_with_file_and_line() {
    // memsize=0: a private buffer of any size, as Filebench. 1e30 overflows a buffer's
    // capacity; 1e15 bytes no allocator gives (and is more than the memory available).
    for iosize in ["1e30", "1e15"] {
        let e = run_read(",memsize=0", iosize).unwrap_or_else(|| panic!("iosize={iosize} ran"));
        assert!(
            e.contains("x.f:5") && e.contains("I/O buffer"),
            "{iosize}: {e}"
        );
    }
}

#[test]
fn an_iosize_over_the_threads_memsize_fails_as_in_filebench() {
    // Filebench's flowoplib_iobufsetup: "tf_memsize smaller than IO size".
    let e = run_read(",memsize=1m", "2m").expect("iosize 2m over memsize 1m ran");
    assert!(
        e.contains("x.f:5") && e.contains("iosize 2097152") && e.contains("memsize 1048576"),
        "{e}"
    );
    // Before, an iosize of tens of GiB that the allocator still granted (overcommit) was
    // filled until the OOM killer ended the run.
    let e = run_read(",memsize=1m", "64g").expect("iosize 64g ran");
    assert!(e.contains("memsize 1048576"), "{e}");
    assert_eq!(run_read(",memsize=1m", "1m"), None);
    // memsize unset is 0, as in Filebench's parser: a private buffer, no bound but memory.
    assert_eq!(run_read(",memsize=0", "2m"), None);
    assert_eq!(run_read("", "2m"), None);
}

/// A workload using every construct, mutated at random (bytes deleted, duplicated, or
/// replaced by the language's punctuation): loading never panics, and every refusal names
/// the file and a line.
#[test]
fn mutated_workloads_load_or_fail_with_file_and_line() {
    use rand::{Rng, SeedableRng};
    let base = "set $n = 2 * 3\nset $dir=/t\n\
        define randvar name=$io, type=tabular, min=1k, round=1k, randtable =\n\
        {{ 60, 1k, 4k},\n { 40, 4k, 8k}}\n\
        set $idx = randvar(type=gamma, min=0, gamma=100)\n\
        set $u = randvar(type=uniform, min=1, mean=10, seed=7, randsrc=rand48)\n\
        debug 1\neventgen rate = 10\n\
        define fileset name=f,path=$dir,size=cvar(type=cvar-gamma,parameters=mean:4096;gamma:1.5),\n\
           entries=$n,dirwidth=4,prealloc=50,cached=false,dirgamma=0\n\
        define flowop name=c, $s\n{\n  flowop openfile name=o,filesetname=$s,indexed=$idx,fd=1\n\
          flowop read name=r,fd=1,iosize=$io,random,directio\n  flowop closefile name=cl,fd=1\n}\n\
        define process name=p,instances=1 {\n thread name=t,memsize=1m,useism {\n\
          flowop c name=cc, iters=2, $s=f\n\
          flowop aiowrite name=aw,filesetname=f,iosize=$u,random,opennext\n\
          flowop aiowait name=aw2\n\
          flowop semblock name=sb,value=1,highwater=4\n\
          flowop block name=bl\n } }\n\
        define process name=q {\n thread name=u {\n\
          flowop sempost name=sp,value=1,target=sb,blocking\n\
          flowop wakeup name=wk,target=bl\n\
          flowop deletefile name=d,fd=1\n } }\nrun 1\n";
    Workload::from_text("f.f", base, &[]).unwrap();
    let noise = b"{}(),=$*+-/\n 019kx\"#";
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xf00d);
    for _ in 0..3000 {
        let mut t = base.as_bytes().to_vec();
        for _ in 0..rng.gen_range(1..4) {
            let i = rng.gen_range(0..t.len());
            match rng.gen_range(0..3) {
                0 => {
                    let j = (i + rng.gen_range(1..12)).min(t.len());
                    t.drain(i..j);
                }
                1 => {
                    let j = (i + rng.gen_range(1..12)).min(t.len());
                    let dup = t[i..j].to_vec();
                    t.splice(i..i, dup);
                }
                _ => t[i] = noise[rng.gen_range(0..noise.len())],
            }
            if t.is_empty() {
                break;
            }
        }
        let text = String::from_utf8_lossy(&t);
        if let Err(e) = Workload::from_text("f.f", &text, &[]) {
            let e = e.to_string();
            let rest = e.strip_prefix("f.f:").unwrap_or_else(|| panic!("{e}"));
            assert!(
                rest.chars().next().is_some_and(|c| c.is_ascii_digit()),
                "{e}\n{text}"
            );
        }
    }
}
