//! The project's own four default personalities, built from the parameters Filebench
//! publishes for them (FileServer, VarMail, WebProxy, WebServer, version 3.x), so that
//! `pmo bench filebench` runs without Filebench's files. The variables keep Filebench's names,
//! so the same `--set` overrides work here and on the `.f` files.
//!
//! | personality | files | dir width | file size | threads | per loop |
//! |---|---|---|---|---|---|
//! | fileserver | 10000, 80% preallocated | 20 | gamma(128 KiB, 1.5) | 50 | create, write whole, append ~16 KiB, read whole, delete, stat |
//! | varmail | 1000, 80% | 1000000 | gamma(16 KiB, 1.5) | 16 | delete, create + append + fsync, read + append + fsync, read |
//! | webproxy | 10000, 80% | 1000000 | 16 KiB | 100 | delete, create + append, 5 whole-file reads |
//! | webserver | 1000, all, read-only; 1 log file | 20 | gamma(16 KiB, 1.5) | 100 | 10 whole-file reads, append ~16 KiB to the log |

use std::collections::HashMap;

use crate::lang::{LangError, Pos};
use crate::model::{
    eval_overrides, Dist, FilesetSpec, Flowop, FlowopKind, ThreadSpec, Value, Workload,
    MAX_ENTRIES, MAX_THREADS,
};

/// Names of the default personalities, in the papers' order.
pub const NAMES: [&str; 4] = ["fileserver", "varmail", "webproxy", "webserver"];

struct Vars {
    map: HashMap<String, Value>,
    file: String,
}

impl Vars {
    fn err(&self, msg: String) -> LangError {
        LangError {
            file: self.file.clone(),
            pos: Pos::default(),
            with_col: false,
            msg,
        }
    }
    fn num(&self, k: &str, default: u64) -> Result<u64, LangError> {
        match self.map.get(k) {
            None => Ok(default),
            Some(Value::Num(n)) => Ok(n.round() as u64),
            Some(v) => Err(self.err(format!("${k} must be a number, not {v}"))),
        }
    }
    fn dist(&self, k: &str, default: Dist) -> Result<Dist, LangError> {
        match self.map.get(k) {
            None => Ok(default),
            Some(Value::Num(n)) => Ok(Dist::Const(n.round() as u64)),
            Some(Value::Dist(d)) => Ok(d.clone()),
            Some(v) => Err(self.err(format!("${k} must be a size, not {v:?}"))),
        }
    }
    fn text(&self, k: &str, default: &str) -> String {
        match self.map.get(k) {
            Some(Value::Text(t)) => t.clone(),
            _ => default.into(),
        }
    }
}

fn op(kind: FlowopKind, name: &str, set: Option<usize>, fd: u32, iosize: &Dist) -> Flowop {
    Flowop {
        kind,
        name: name.into(),
        fileset: set,
        fd,
        srcfd: None,
        iosize: iosize.clone(),
        random: false,
        iters: 1,
        workingset: 0,
        value: 0,
        dsync: false,
        target: None,
        target_name: None,
        indexed: None,
        highwater: 1,
        blocking: false,
        directio: false,
        opennext: false,
        pos: Pos::default(),
    }
}

fn fileset(
    name: &str,
    path: &str,
    size: Dist,
    entries: u64,
    dirwidth: u64,
    prealloc: u64,
) -> FilesetSpec {
    FilesetSpec {
        name: name.into(),
        path: path.into(),
        entries: entries.max(1),
        dirwidth: dirwidth.max(1),
        size,
        prealloc_pct: prealloc,
        readonly: false,
        reuse: false,
        paralloc: false,
        single_file: false,
        leaf_dirs: false,
    }
}

const GAMMA: f64 = 1.5;

/// The personality `name` with `overrides` (`--set VAR=VALUE`).
pub fn personality(name: &str, overrides: &[(String, String)]) -> Result<Workload, LangError> {
    let v = Vars {
        map: eval_overrides(overrides)?,
        file: format!("{name} (built in)"),
    };
    use FlowopKind::*;
    let dir = v.text("dir", "/tmp");
    if dir.split('/').any(|c| c == "..") {
        return Err(v.err(format!(
            "$dir {dir:?}: '..' would leave the run's directory"
        )));
    }
    let iosize = v.dist("iosize", Dist::Const(1 << 20))?;
    let append = v.dist("meanappendsize", Dist::Const(16 << 10))?;
    let gamma = |mean: f64| Dist::Gamma { mean, gamma: GAMMA };
    let s = Some(0);
    let (filesets, nthreads, flowops, runtime): (Vec<FilesetSpec>, u64, Vec<Flowop>, Option<f64>) =
        match name {
            "fileserver" => {
                let size = v.dist("filesize", gamma(131072.0))?;
                let mut write = op(WriteWholeFile, "wrtfile1", s, 1, &iosize);
                write.srcfd = Some(1);
                (
                    vec![fileset(
                        "bigfileset",
                        &dir,
                        size,
                        v.num("nfiles", 10000)?,
                        v.num("meandirwidth", 20)?,
                        80,
                    )],
                    v.num("nthreads", 50)?,
                    vec![
                        op(CreateFile, "createfile1", s, 1, &iosize),
                        write,
                        op(CloseFile, "closefile1", None, 1, &iosize),
                        op(OpenFile, "openfile1", s, 1, &iosize),
                        op(AppendFileRand, "appendfilerand1", None, 1, &append),
                        op(CloseFile, "closefile2", None, 1, &iosize),
                        op(OpenFile, "openfile2", s, 1, &iosize),
                        op(ReadWholeFile, "readfile1", None, 1, &iosize),
                        op(CloseFile, "closefile3", None, 1, &iosize),
                        op(DeleteFile, "deletefile1", s, 0, &iosize),
                        op(StatFile, "statfile1", s, 0, &iosize),
                    ],
                    Some(v.num("runtime", 60)? as f64),
                )
            }
            "varmail" => {
                let size = v.dist("filesize", gamma(16384.0))?;
                (
                    vec![fileset(
                        "bigfileset",
                        &dir,
                        size,
                        v.num("nfiles", 1000)?,
                        v.num("meandirwidth", 1_000_000)?,
                        80,
                    )],
                    v.num("nthreads", 16)?,
                    vec![
                        op(DeleteFile, "deletefile1", s, 0, &iosize),
                        op(CreateFile, "createfile2", s, 1, &iosize),
                        op(AppendFileRand, "appendfilerand2", None, 1, &append),
                        op(Fsync, "fsyncfile2", None, 1, &iosize),
                        op(CloseFile, "closefile2", None, 1, &iosize),
                        op(OpenFile, "openfile3", s, 1, &iosize),
                        op(ReadWholeFile, "readfile3", None, 1, &iosize),
                        op(AppendFileRand, "appendfilerand3", None, 1, &append),
                        op(Fsync, "fsyncfile3", None, 1, &iosize),
                        op(CloseFile, "closefile3", None, 1, &iosize),
                        op(OpenFile, "openfile4", s, 1, &iosize),
                        op(ReadWholeFile, "readfile4", None, 1, &iosize),
                        op(CloseFile, "closefile4", None, 1, &iosize),
                    ],
                    Some(v.num("runtime", 60)? as f64),
                )
            }
            "webproxy" => {
                let size = v.dist("meanfilesize", Dist::Const(16 << 10))?;
                let io = v.dist("meaniosize", Dist::Const(16 << 10))?;
                let mut ops = vec![
                    op(DeleteFile, "deletefile1", s, 0, &iosize),
                    op(CreateFile, "createfile1", s, 1, &iosize),
                    op(AppendFileRand, "appendfilerand1", None, 1, &io),
                    op(CloseFile, "closefile1", None, 1, &iosize),
                ];
                for i in 2..=6 {
                    ops.push(op(OpenFile, &format!("openfile{i}"), s, 1, &iosize));
                    ops.push(op(ReadWholeFile, &format!("readfile{i}"), None, 1, &iosize));
                    ops.push(op(CloseFile, &format!("closefile{i}"), None, 1, &iosize));
                }
                ops.push(op(OpsLimit, "limit", None, 0, &iosize));
                (
                    vec![fileset(
                        "bigfileset",
                        &dir,
                        size,
                        v.num("nfiles", 10000)?,
                        v.num("meandirwidth", 1_000_000)?,
                        80,
                    )],
                    v.num("nthreads", 100)?,
                    ops,
                    v.map
                        .get("runtime")
                        .map(|_| v.num("runtime", 60))
                        .transpose()?
                        .map(|r| r as f64),
                )
            }
            "webserver" => {
                let size = v.dist("filesize", gamma(16384.0))?;
                let mut big = fileset(
                    "bigfileset",
                    &dir,
                    size.clone(),
                    v.num("nfiles", 1000)?,
                    v.num("meandirwidth", 20)?,
                    100,
                );
                big.readonly = true;
                let log = fileset("logfiles", &dir, size, 1, v.num("meandirwidth", 20)?, 100);
                let mut ops = vec![];
                for i in 1..=10 {
                    ops.push(op(OpenFile, &format!("openfile{i}"), s, 1, &iosize));
                    ops.push(op(ReadWholeFile, &format!("readfile{i}"), None, 1, &iosize));
                    ops.push(op(CloseFile, &format!("closefile{i}"), None, 1, &iosize));
                }
                ops.push(op(AppendFileRand, "appendlog", Some(1), 2, &append));
                (
                    vec![big, log],
                    v.num("nthreads", 100)?,
                    ops,
                    Some(v.num("runtime", 60)? as f64),
                )
            }
            other => {
                return Err(v.err(format!(
                    "unknown personality '{other}' (built in: {})",
                    NAMES.join(", ")
                )))
            }
        };
    if nthreads == 0 || nthreads > MAX_THREADS {
        return Err(v.err(format!("$nthreads must be 1..={MAX_THREADS}")));
    }
    if let Some(f) = filesets.iter().find(|f| f.entries > MAX_ENTRIES) {
        return Err(v.err(format!(
            "fileset '{}': {} entries, more than the {MAX_ENTRIES} a run can hold",
            f.name, f.entries
        )));
    }
    let thread = ThreadSpec {
        process: name.into(),
        name: format!("{name}thread"),
        memsize: 10 << 20,
        flowops,
    };
    let mut vars: Vec<(String, String)> = overrides.to_vec();
    vars.sort();
    Ok(Workload {
        name: name.into(),
        file: v.file.clone(),
        filesets,
        threads: vec![thread; nthreads as usize],
        run_seconds: runtime,
        quit: crate::model::QuitMode::TimeBased,
        eventgen_rate: None,
        echoes: vec![],
        vars,
        notes: vec![],
        directio: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let w = personality("fileserver", &[]).unwrap();
        assert_eq!(w.threads.len(), 50);
        assert_eq!(w.filesets[0].entries, 10000);
        assert_eq!(w.threads[0].flowops.len(), 11);
        let w = personality(
            "webserver",
            &[
                ("nthreads".into(), "4".into()),
                ("nfiles".into(), "20".into()),
            ],
        )
        .unwrap();
        assert_eq!((w.threads.len(), w.filesets[0].entries), (4, 20));
        assert_eq!(w.threads[0].flowops.last().unwrap().fileset, Some(1));
        assert!(personality("mailserver", &[]).is_err());
        assert!(personality("varmail", &[("nthreads".into(), "0".into())]).is_err());
        let e = personality("webproxy", &[("nfiles".into(), "1e30".into())])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("entries"), "{e}");
        let e = personality("varmail", &[("dir".into(), "/t/../..".into())])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("'..'"), "{e}");
    }
}
