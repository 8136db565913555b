//! A workload ready to run: a parsed [`Script`] evaluated with its variables and the caller's
//! overrides. Unknown flowops and attributes are errors naming the file, the line and the name.

use std::collections::HashMap;
use std::sync::Arc;

use rand::Rng;
use rand_distr::Distribution;

use crate::lang::{parse, Attrs, FlowopDef, LangError, Pos, RawValue, Script, Stmt};
use crate::randvar::RandVar;

/// A size or count: fixed, drawn from a gamma distribution (`cvar-gamma`), or drawn from a
/// random variable (`randvar`, [`crate::randvar`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Dist {
    Const(u64),
    /// Filebench's `cvar-gamma`: `mean` and shape `gamma`.
    Gamma {
        mean: f64,
        gamma: f64,
    },
    Rand(Arc<RandVar>),
}

impl Dist {
    /// Draw one value.
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        match *self {
            Dist::Const(v) => v,
            Dist::Gamma { mean, gamma } => {
                // Checked at evaluation: both positive and finite.
                match rand_distr::Gamma::new(gamma, mean / gamma) {
                    Ok(g) => g.sample(rng).round().max(0.0) as u64,
                    Err(_) => mean as u64,
                }
            }
            Dist::Rand(ref r) => r.sample(rng),
        }
    }
    /// The mean.
    pub fn mean(&self) -> f64 {
        match *self {
            Dist::Const(v) => v as f64,
            Dist::Gamma { mean, .. } => mean,
            Dist::Rand(ref r) => r.mean,
        }
    }
}

/// An evaluated value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Num(f64),
    Text(String),
    Dist(Dist),
    Flag,
}

/// As an error message shows a value: the way a workload file writes it.
impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Num(n) => write!(f, "{n}"),
            Value::Text(t) => write!(f, "\"{t}\""),
            Value::Dist(Dist::Const(v)) => write!(f, "{v}"),
            Value::Dist(Dist::Gamma { mean, gamma }) => {
                write!(f, "cvar-gamma (mean {mean}, gamma {gamma})")
            }
            Value::Dist(Dist::Rand(r)) => write!(f, "a randvar (mean {})", r.mean),
            Value::Flag => write!(f, "a flag without a value"),
        }
    }
}

/// The flowops this interpreter runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlowopKind {
    CreateFile,
    OpenFile,
    CloseFile,
    ReadWholeFile,
    WriteWholeFile,
    AppendFile,
    AppendFileRand,
    Read,
    Write,
    DeleteFile,
    StatFile,
    Fsync,
    OpsLimit,
    FinishOnCount,
    FinishOnBytes,
    /// `iopslimit [target=F]`: like `opslimit`, watching read and write operations.
    IopsLimit,
    /// `bwlimit [target=F]`: like `opslimit`, watching bytes (one event per MiB).
    BwLimit,
    /// `eventlimit`: takes one event of the generator.
    EventLimit,
    /// `delay value=N`: sleeps N seconds.
    Delay,
    /// `hog value=N`: N stores to the thread's memory (CPU work).
    Hog,
    /// `listdir`: read a directory of the fileset.
    ListDir,
    /// `makedir`: create an absent leaf directory of a `leafdirs` fileset.
    MakeDir,
    /// `removedir`: remove an existing leaf directory of a `leafdirs` fileset.
    RemoveDir,
    /// `block`: wait until a `wakeup` names this flowop (a wakeup nobody waits for is lost,
    /// as with Filebench's condition variable).
    Block,
    /// `wakeup target=B`: wake every thread blocked in flowop `B`.
    Wakeup,
    /// `semblock value=V,highwater=H`: take V from this flowop's semaphore (waiting for it),
    /// after returning V to its high-water count.
    SemBlock,
    /// `sempost value=V,target=S[,blocking]`: give V to every instance of semblock `S`;
    /// `blocking` first waits until S's high-water count has V to take.
    SemPost,
    /// `aiowrite`: a `write`, done synchronously (a PMO store has no asynchronous I/O).
    AioWrite,
    /// `aiowait`: wait for the thread's outstanding `aiowrite`s (already complete).
    AioWait,
}

const FLOWOPS: [(&str, FlowopKind); 29] = [
    ("createfile", FlowopKind::CreateFile),
    ("openfile", FlowopKind::OpenFile),
    ("closefile", FlowopKind::CloseFile),
    ("readwholefile", FlowopKind::ReadWholeFile),
    ("writewholefile", FlowopKind::WriteWholeFile),
    ("appendfile", FlowopKind::AppendFile),
    ("appendfilerand", FlowopKind::AppendFileRand),
    ("read", FlowopKind::Read),
    ("write", FlowopKind::Write),
    ("deletefile", FlowopKind::DeleteFile),
    ("statfile", FlowopKind::StatFile),
    ("fsync", FlowopKind::Fsync),
    ("opslimit", FlowopKind::OpsLimit),
    ("finishoncount", FlowopKind::FinishOnCount),
    ("finishonbytes", FlowopKind::FinishOnBytes),
    ("iopslimit", FlowopKind::IopsLimit),
    ("bwlimit", FlowopKind::BwLimit),
    ("eventlimit", FlowopKind::EventLimit),
    ("delay", FlowopKind::Delay),
    ("hog", FlowopKind::Hog),
    ("listdir", FlowopKind::ListDir),
    ("makedir", FlowopKind::MakeDir),
    ("removedir", FlowopKind::RemoveDir),
    ("block", FlowopKind::Block),
    ("wakeup", FlowopKind::Wakeup),
    ("semblock", FlowopKind::SemBlock),
    ("sempost", FlowopKind::SemPost),
    ("aiowrite", FlowopKind::AioWrite),
    ("aiowait", FlowopKind::AioWait),
];

impl FlowopKind {
    /// An I/O flowop (Filebench's `FLOW_TYPE_IO`): counted by `opslimit` and
    /// `finishoncount` when they have no target.
    pub fn is_io(self) -> bool {
        !self.is_control()
    }

    /// A flowop that does no file operation: the limits, `finishon*`, `delay` and `hog`.
    pub fn is_control(self) -> bool {
        matches!(
            self,
            FlowopKind::OpsLimit
                | FlowopKind::FinishOnCount
                | FlowopKind::FinishOnBytes
                | FlowopKind::IopsLimit
                | FlowopKind::BwLimit
                | FlowopKind::EventLimit
                | FlowopKind::Delay
                | FlowopKind::Hog
                | FlowopKind::Block
                | FlowopKind::Wakeup
                | FlowopKind::SemBlock
                | FlowopKind::SemPost
                | FlowopKind::AioWait
        )
    }

    /// Reads file data (what `iopslimit` counts with `write`s, Filebench's `FLOW_ATTR_READ`).
    pub fn reads(self) -> bool {
        matches!(self, FlowopKind::ReadWholeFile | FlowopKind::Read)
    }

    /// Writes file data (the `paper` sync mode psyncs after it).
    pub fn writes(self) -> bool {
        matches!(
            self,
            FlowopKind::WriteWholeFile
                | FlowopKind::AppendFile
                | FlowopKind::AppendFileRand
                | FlowopKind::Write
                | FlowopKind::AioWrite
        )
    }
}

/// A fileset (or a `define file`, a fileset of one entry).
#[derive(Clone, Debug, PartialEq)]
pub struct FilesetSpec {
    pub name: String,
    pub path: String,
    pub entries: u64,
    pub dirwidth: u64,
    pub size: Dist,
    /// Percent of entries created before the run.
    pub prealloc_pct: u64,
    pub readonly: bool,
    pub reuse: bool,
    pub paralloc: bool,
    /// From `define file`: the one entry is `path/name` itself.
    pub single_file: bool,
    /// `leafdirs=N`: the entries are N leaf directories (made by `makedir`, removed by
    /// `removedir`), not files.
    pub leaf_dirs: bool,
}

/// One flowop of a thread.
#[derive(Clone, Debug, PartialEq)]
pub struct Flowop {
    pub kind: FlowopKind,
    pub name: String,
    /// Index into [`Workload::filesets`].
    pub fileset: Option<usize>,
    pub fd: u32,
    pub srcfd: Option<u32>,
    pub iosize: Dist,
    pub random: bool,
    pub iters: u64,
    pub workingset: u64,
    pub value: u64,
    /// `dsync`: every write of this flowop is durable before it returns (Filebench opens
    /// the file `O_SYNC`): a psync (fsync) after it.
    pub dsync: bool,
    /// `target=NAME`: index of the flowop of the same thread whose count `opslimit`,
    /// `finishoncount` and `finishonbytes` watch (`None`: every I/O flowop of the workload).
    pub target: Option<usize>,
    /// `target=NAME` of `wakeup` and `sempost`: the `block` / `semblock` flowops of that
    /// name in every thread.
    pub target_name: Option<String>,
    /// `indexed=$randvar`: the file is entry `draw % entries` of the fileset, not a random
    /// one (Filebench's `FILESET_PICKBYINDEX`).
    pub indexed: Option<Dist>,
    /// `highwater=` of a `semblock` (its semaphore's initial high-water count).
    pub highwater: u64,
    /// `blocking` of a `sempost`.
    pub blocking: bool,
    /// `directio`: bypass the page cache (see `Workload::notes`: a PMO has none; the POSIX
    /// peer runs cached).
    pub directio: bool,
    /// `opennext` (Filebench's `rotatefd`): without an `fd=`, each run uses the next of the
    /// thread's 128 descriptor slots, opening a file of the fileset into it when empty.
    pub opennext: bool,
    pub pos: Pos,
}

/// One thread instance.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadSpec {
    pub process: String,
    pub name: String,
    pub memsize: u64,
    pub flowops: Vec<Flowop>,
}

/// A runnable workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub name: String,
    /// The workload file (or a built-in personality's label), for errors.
    pub file: String,
    pub filesets: Vec<FilesetSpec>,
    pub threads: Vec<ThreadSpec>,
    /// `run N` (seconds; `None`: `run` without a time, or no `run`).
    pub run_seconds: Option<f64>,
    /// `set mode quit ...`: what a thread that runs out of work (a `finishoncount` reached,
    /// no file to pick) does to the run.
    pub quit: QuitMode,
    /// `eventgen rate=N` (events per second; `None` or 0: off, `opslimit` does nothing).
    pub eventgen_rate: Option<f64>,
    pub echoes: Vec<String>,
    /// Every variable's final value as text (for the records).
    pub vars: Vec<(String, String)>,
    /// What the workload asked for that this interpreter does differently from Filebench on
    /// a kernel file system (`debug`, `useism`, `cached`, `directio`, asynchronous I/O):
    /// printed with the results and kept in the records, never silently dropped.
    pub notes: Vec<String>,
    /// Some flowop asks for `directio` (the POSIX peer reports that it ran cached).
    pub directio: bool,
}

/// `set mode quit ...` (Filebench's run modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum QuitMode {
    /// The run lasts its time. Filebench aborts a time-based run whose thread reached a
    /// `finishoncount` (or found no file); here that thread's `finishoncount` ends the run
    /// early, and a thread that finds no file counts it and goes on.
    #[default]
    TimeBased,
    /// The first thread done ends the run.
    FirstDone,
    /// A thread done stops; the run ends when every thread is done (or its time is up).
    AllDone,
}

/// Most threads of one workload.
pub const MAX_THREADS: u64 = 1024;

/// Most entries of one fileset: a run keeps each one's path and size in memory.
pub const MAX_ENTRIES: u64 = 1 << 24;

/// Parse a number with an optional k/m/g/t suffix (powers of 1024).
pub fn parse_number(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, c) if c.eq_ignore_ascii_case(&'k') => (&s[..i], 1024.0),
        (i, c) if c.eq_ignore_ascii_case(&'m') => (&s[..i], 1024.0 * 1024.0),
        (i, c) if c.eq_ignore_ascii_case(&'g') => (&s[..i], 1024.0 * 1024.0 * 1024.0),
        (i, c) if c.eq_ignore_ascii_case(&'t') => (&s[..i], 1024f64.powi(4)),
        _ => (s, 1.0),
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v * mult)
}

struct Eval<'a> {
    file: &'a str,
    vars: HashMap<String, Value>,
    order: Vec<String>,
    overrides: &'a HashMap<String, Value>,
    /// The scope a composite flowop's body is evaluated in: its `$variables` in `vars`, the
    /// rest looked up here (not copied for every use of the composite).
    outer: Option<&'a Eval<'a>>,
}

impl Eval<'_> {
    /// Variable `name`, in this scope or an enclosing one.
    fn lookup(&self, name: &str) -> Option<&Value> {
        let mut scope = Some(self);
        while let Some(e) = scope {
            if let Some(v) = e.vars.get(name) {
                return Some(v);
            }
            scope = e.outer;
        }
        None
    }

    fn err(&self, pos: Pos, msg: impl Into<String>) -> LangError {
        LangError {
            file: self.file.into(),
            pos,
            with_col: false,
            msg: msg.into(),
        }
    }

    fn value(&self, v: &RawValue, pos: Pos) -> Result<Value, LangError> {
        Ok(match v {
            RawValue::Word(w) => match parse_number(w) {
                Some(n) => Value::Num(n),
                None => Value::Text(w.clone()),
            },
            RawValue::Str(s) => Value::Text(s.clone()),
            RawValue::Flag => Value::Flag,
            RawValue::Var(name) => self
                .lookup(name)
                .cloned()
                .ok_or_else(|| self.err(pos, format!("variable '${name}' is not set")))?,
            RawValue::Arith(a, op, b) => {
                let (x, y) = match (self.value(a, pos)?, self.value(b, pos)?) {
                    (Value::Num(x), Value::Num(y)) => (x, y),
                    (x, y) => {
                        return Err(
                            self.err(pos, format!("arithmetic needs numbers, not {x} {op} {y}"))
                        )
                    }
                };
                let r = match op {
                    '+' => x + y,
                    '-' => x - y,
                    '*' => x * y,
                    _ if y == 0.0 => {
                        return Err(self.err(pos, format!("division by zero ({x} / 0)")))
                    }
                    _ => x / y,
                };
                if !r.is_finite() || r < 0.0 {
                    return Err(self.err(pos, format!("{x} {op} {y} = {r}: not a size or count")));
                }
                Value::Num(r)
            }
            RawValue::Randvar(def) => {
                let num = |k: &str| -> Result<Option<f64>, LangError> {
                    match def.attrs.iter().find(|(n, _, _)| n == k) {
                        None => Ok(None),
                        Some((_, v, p)) => match self.value(v, *p)? {
                            Value::Num(n) => Ok(Some(n)),
                            other => Err(self.err(
                                *p,
                                format!("randvar attribute '{k}' must be a number, not {other}"),
                            )),
                        },
                    }
                };
                for (k, _, p) in &def.attrs {
                    if !matches!(
                        k.as_str(),
                        "type" | "min" | "round" | "mean" | "gamma" | "seed" | "randsrc"
                    ) {
                        return Err(self.err(
                            *p,
                            format!("unknown randvar attribute '{k}' (known: type, min, round, mean, gamma, seed, randsrc, randtable)"),
                        ));
                    }
                }
                let text = |k: &str| -> Result<Option<String>, LangError> {
                    match def.attrs.iter().find(|(n, _, _)| n == k) {
                        None => Ok(None),
                        Some((_, RawValue::Word(w), _)) => Ok(Some(w.clone())),
                        Some((_, _, p)) => Err(self.err(*p, format!("randvar {k} must be a word"))),
                    }
                };
                let kind = text("type")?.unwrap_or_else(|| "gamma".into());
                let randsrc = text("randsrc")?;
                if let Some(src) = &randsrc {
                    if !matches!(src.as_str(), "urandom" | "rand48") {
                        return Err(self.err(
                            def.pos,
                            format!("unknown randsrc '{src}' (known: urandom, rand48)"),
                        ));
                    }
                }
                let table = match &def.table {
                    None => None,
                    Some(rows) => {
                        let mut out = vec![];
                        for row in rows {
                            let mut t = [0.0; 3];
                            for (k, v) in row.iter().enumerate() {
                                t[k] = match self.value(v, def.pos)? {
                                    Value::Num(n) => n,
                                    other => {
                                        return Err(self.err(
                                            def.pos,
                                            format!(
                                                "randtable entries must be numbers, not {other}"
                                            ),
                                        ))
                                    }
                                };
                            }
                            out.push((t[0], t[1], t[2]));
                        }
                        Some(out)
                    }
                };
                let mut r = RandVar::new(
                    &kind,
                    num("min")?.unwrap_or(0.0),
                    num("mean")?,
                    num("gamma")?.unwrap_or(1500.0),
                    num("round")?.unwrap_or(0.0),
                    table.as_deref(),
                )
                .map_err(|m| self.err(def.pos, m))?;
                r.seed = num("seed")?.map(|s| s as u64);
                r.randsrc = randsrc;
                Value::Dist(Dist::Rand(Arc::new(r)))
            }
            RawValue::Cvar(pairs) => {
                let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
                for (k, _) in pairs {
                    if !matches!(k.as_str(), "type" | "parameters" | "min" | "max" | "round") {
                        return Err(self.err(pos, format!("unknown cvar attribute '{k}'")));
                    }
                }
                match get("type") {
                    Some("cvar-gamma") => {}
                    Some(t) => {
                        return Err(self.err(
                            pos,
                            format!("unsupported cvar type '{t}' (supported: cvar-gamma)"),
                        ))
                    }
                    None => return Err(self.err(pos, "cvar(...) needs type=")),
                }
                let mut mean = None;
                let mut gamma = 1.5;
                for p in get("parameters")
                    .unwrap_or("")
                    .split(';')
                    .filter(|p| !p.is_empty())
                {
                    let (k, v) = p.split_once(':').ok_or_else(|| {
                        self.err(pos, format!("cvar parameter '{p}' is not name:value"))
                    })?;
                    let n = parse_number(v).ok_or_else(|| {
                        self.err(pos, format!("cvar parameter '{k}': '{v}' is not a number"))
                    })?;
                    match k {
                        "mean" => mean = Some(n),
                        "gamma" => gamma = n,
                        other => {
                            return Err(
                                self.err(pos, format!("unknown cvar-gamma parameter '{other}'"))
                            )
                        }
                    }
                }
                let mean =
                    mean.ok_or_else(|| self.err(pos, "cvar-gamma needs parameters=mean:N"))?;
                if mean <= 0.0 || gamma <= 0.0 {
                    return Err(self.err(pos, "cvar-gamma mean and gamma must be positive"));
                }
                Value::Dist(Dist::Gamma { mean, gamma })
            }
        })
    }

    fn attr_value(&self, attrs: &Attrs, name: &str) -> Result<Option<(Value, Pos)>, LangError> {
        match attrs.items.iter().find(|(n, _, _)| n == name) {
            Some((_, v, pos)) => Ok(Some((self.value(v, *pos)?, *pos))),
            None => Ok(None),
        }
    }

    fn num(&self, attrs: &Attrs, name: &str, default: u64) -> Result<u64, LangError> {
        match self.attr_value(attrs, name)? {
            None => Ok(default),
            Some((Value::Num(n), _)) => Ok(n.round() as u64),
            Some((Value::Dist(d), _)) => Ok(d.mean().round() as u64),
            Some((v, pos)) => {
                Err(self.err(pos, format!("attribute '{name}' must be a number, not {v}")))
            }
        }
    }

    /// A file descriptor number (`fd`, `srcfd`): below 2^32, never cut to another one.
    fn fd(&self, attrs: &Attrs, name: &str) -> Result<u32, LangError> {
        let n = self.num(attrs, name, 0)?;
        u32::try_from(n).map_err(|_| {
            let pos = match attrs.items.iter().find(|(a, _, _)| a == name) {
                Some((_, _, pos)) => *pos,
                None => Pos::default(),
            };
            self.err(
                pos,
                format!("attribute '{name}' must be a descriptor number below 2^32, not {n}"),
            )
        })
    }

    fn dist(&self, attrs: &Attrs, name: &str, default: u64) -> Result<Dist, LangError> {
        match self.attr_value(attrs, name)? {
            None => Ok(Dist::Const(default)),
            Some((Value::Num(n), _)) => Ok(Dist::Const(n.round() as u64)),
            Some((Value::Dist(d), _)) => Ok(d),
            Some((v, pos)) => {
                Err(self.err(pos, format!("attribute '{name}' must be a size, not {v}")))
            }
        }
    }

    fn text(&self, attrs: &Attrs, name: &str) -> Result<Option<String>, LangError> {
        match self.attr_value(attrs, name)? {
            None => Ok(None),
            Some((Value::Text(t), _)) => Ok(Some(t)),
            Some((Value::Num(n), _)) => Ok(Some(format!("{n}"))),
            Some((v, pos)) => {
                Err(self.err(pos, format!("attribute '{name}' must be text, not {v}")))
            }
        }
    }

    fn flag(&self, attrs: &Attrs, name: &str) -> Result<bool, LangError> {
        match self.attr_value(attrs, name)? {
            None => Ok(false),
            Some((Value::Flag, _)) => Ok(true),
            Some((Value::Num(n), _)) => Ok(n != 0.0),
            Some((Value::Text(t), pos)) => match t.as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(self.err(pos, format!("attribute '{name}' must be true or false"))),
            },
            Some((_, pos)) => {
                Err(self.err(pos, format!("attribute '{name}' must be true or false")))
            }
        }
    }

    fn only(&self, attrs: &Attrs, allowed: &[&str], what: &str) -> Result<(), LangError> {
        for (n, _, pos) in &attrs.items {
            if !allowed.contains(&n.as_str()) {
                return Err(self.err(
                    *pos,
                    format!(
                        "unknown attribute '{n}' of {what} (known: {})",
                        allowed.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl Workload {
    /// Parse and evaluate workload text. `overrides` replace the file's own `set $VAR=`
    /// (and define variables it never sets) before anything uses them.
    pub fn from_text(
        file: &str,
        text: &str,
        overrides: &[(String, String)],
    ) -> Result<Workload, LangError> {
        let script = parse(file, text)?;
        Workload::from_script(&script, overrides)
    }

    /// Evaluate a parsed script.
    pub fn from_script(
        script: &Script,
        overrides: &[(String, String)],
    ) -> Result<Workload, LangError> {
        let ov = eval_overrides(overrides)?;
        let mut e = Eval {
            file: &script.file,
            vars: ov.clone(),
            order: ov.keys().cloned().collect(),
            overrides: &ov,
            outer: None,
        };
        e.order.sort();
        Workload::evaluate(script, e)
    }

    fn evaluate(script: &Script, mut e: Eval<'_>) -> Result<Workload, LangError> {
        let name = std::path::Path::new(&script.file)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| script.file.clone());
        let mut w = Workload {
            name,
            file: script.file.clone(),
            filesets: vec![],
            threads: vec![],
            run_seconds: None,
            quit: QuitMode::TimeBased,
            eventgen_rate: None,
            echoes: vec![],
            vars: vec![],
            notes: vec![],
            directio: false,
        };
        let mut thread_defs = vec![];
        let mut composites: HashMap<String, (Attrs, Vec<FlowopDef>)> = HashMap::new();
        for (stmt, pos) in &script.stmts {
            match stmt {
                Stmt::Set { var, value } => {
                    let v = match e.overrides.get(var) {
                        Some(v) => v.clone(),
                        None => e.value(value, *pos)?,
                    };
                    if let Value::Dist(Dist::Rand(r)) = &v {
                        if r.seed.is_some() || r.randsrc.is_some() {
                            note(&mut w, format!("randvar ${var}: seed/randsrc accepted, but draws come from each thread's generator seeded from the run's seed, not Filebench's rand48 stream"));
                        }
                    }
                    if !e.order.contains(var) {
                        e.order.push(var.clone());
                    }
                    e.vars.insert(var.clone(), v);
                }
                Stmt::SetMode(words) => match words.iter().map(|s| s.as_str()).collect::<Vec<_>>()[..] {
                    ["quit", "firstdone"] => w.quit = QuitMode::FirstDone,
                    ["quit", "alldone"] => w.quit = QuitMode::AllDone,
                    ["quit", "timebased"] => w.quit = QuitMode::TimeBased,
                    _ => return Err(e.err(*pos, format!("unsupported 'set mode {}' (supported: quit firstdone|alldone|timebased)", words.join(" ")))),
                },
                Stmt::DefineFileset(a) | Stmt::DefineFile(a) => {
                    let single = matches!(stmt, Stmt::DefineFile(_));
                    let mut allowed = vec!["name", "path", "size", "prealloc", "readonly", "reuse", "paralloc", "cached"];
                    if !single {
                        allowed.extend(["entries", "dirwidth", "leafdirs", "dirgamma"]);
                    }
                    e.only(a, &allowed, if single { "define file" } else { "define fileset" })?;
                    let name = e
                        .text(a, "name")?
                        .ok_or_else(|| e.err(*pos, "a fileset needs name="))?;
                    if w.filesets.iter().any(|f| f.name == name) {
                        return Err(e.err(*pos, format!("fileset '{name}' is defined twice")));
                    }
                    // `dirgamma=0` is Filebench's default (every directory `dirwidth` wide,
                    // what this interpreter lays out); a gamma-distributed width is not.
                    if let Some((v, p)) = e.attr_value(a, "dirgamma")? {
                        if v != Value::Num(0.0) {
                            return Err(e.err(p, format!("fileset '{name}': dirgamma={v} (gamma-distributed directory widths) is not supported; only 0")));
                        }
                    }
                    // `cached` (Filebench 1.4; 1.5 dropped it): whether the fileset's files
                    // stay in the page cache after they are created.
                    if e.attr_value(a, "cached")?.is_some() {
                        let c = e.flag(a, "cached")?;
                        note(&mut w, format!("fileset '{name}': cached={c}: the pmo file store has no page cache (its files are read from the medium and decrypted on every attach either way); the POSIX peer leaves the files as its file system keeps them (no cache drop)"));
                    }
                    let path = e.text(a, "path")?.unwrap_or_else(|| "/tmp".into());
                    if format!("{path}/{name}").split('/').any(|c| c == "..") {
                        return Err(e.err(*pos, format!("fileset '{name}': '..' in its path {path:?} or name would leave the run's directory")));
                    }
                    let prealloc_pct = match e.attr_value(a, "prealloc")? {
                        None => 0,
                        Some((Value::Flag, _)) => 100,
                        Some((Value::Num(n), _)) if n <= 100.0 => n as u64,
                        Some((_, p)) => return Err(e.err(p, "prealloc must be a percentage (0-100)")),
                    };
                    let leafdirs = if single { 0 } else { e.num(a, "leafdirs", 0)? };
                    if leafdirs > 0 && e.attr_value(a, "entries")?.is_some() {
                        return Err(e.err(*pos, format!("fileset '{name}': entries and leafdirs together are not supported")));
                    }
                    let entries = if single {
                        1
                    } else if leafdirs > 0 {
                        leafdirs
                    } else {
                        e.num(a, "entries", 1)?
                    };
                    if entries == 0 {
                        return Err(e.err(*pos, format!("fileset '{name}' has no entries")));
                    }
                    if entries > MAX_ENTRIES {
                        return Err(e.err(*pos, format!("fileset '{name}': {entries} entries, more than the {MAX_ENTRIES} a run can hold")));
                    }
                    w.filesets.push(FilesetSpec {
                        name,
                        path,
                        entries,
                        dirwidth: e.num(a, "dirwidth", 0)?.max(1),
                        size: e.dist(a, "size", 0)?,
                        prealloc_pct,
                        readonly: e.flag(a, "readonly")?,
                        reuse: e.flag(a, "reuse")?,
                        paralloc: e.flag(a, "paralloc")?,
                        single_file: single,
                        leaf_dirs: leafdirs > 0,
                    });
                }
                Stmt::DefineProcess { attrs, threads } => {
                    e.only(attrs, &["name", "instances", "nice"], "define process")?;
                    let pname = e.text(attrs, "name")?.unwrap_or_else(|| "process".into());
                    let pinst = e.num(attrs, "instances", 1)?;
                    thread_defs.push((pname, pinst, threads.clone()));
                }
                Stmt::Run(v) => {
                    w.run_seconds = match v {
                        None => None,
                        Some(v) => match e.value(v, *pos)? {
                            Value::Num(n) => Some(n),
                            other => return Err(e.err(*pos, format!("run needs seconds, not {other}"))),
                        },
                    }
                }
                Stmt::Echo(s) => w.echoes.push(s.clone()),
                Stmt::Debug(v) => {
                    let level = e.value(v, *pos)?;
                    note(&mut w, format!("debug {level}: Filebench's log verbosity; this interpreter has no debug log"));
                }
                Stmt::DefineFlowop { attrs, flowops } => {
                    let name = e.text(attrs, "name")?.ok_or_else(|| e.err(*pos, "define flowop needs name="))?;
                    for (n, _, p) in &attrs.items {
                        if n != "name" && !n.starts_with('$') {
                            return Err(e.err(*p, format!("composite flowop '{name}': attribute '{n}' (only name= and $variables are supported)")));
                        }
                    }
                    if FLOWOPS.iter().any(|(n, _)| *n == name) || composites.contains_key(&name) {
                        return Err(e.err(*pos, format!("flowop '{name}' is defined twice")));
                    }
                    composites.insert(name, (attrs.clone(), flowops.clone()));
                }
                Stmt::Eventgen(a) => {
                    e.only(a, &["rate"], "eventgen")?;
                    w.eventgen_rate = match e.attr_value(a, "rate")? {
                        Some((Value::Num(n), _)) => Some(n),
                        Some((_, p)) => return Err(e.err(p, "eventgen rate must be a number (events per second)")),
                        None => return Err(e.err(*pos, "eventgen needs rate=N")),
                    };
                }
            }
        }
        // Threads are resolved after every fileset is defined (a thread may name a fileset
        // defined below its process).
        for (pname, pinst, threads) in thread_defs {
            for t in &threads {
                e.only(
                    &t.attrs,
                    &["name", "memsize", "instances", "useism"],
                    "thread",
                )?;
                let tname = e.text(&t.attrs, "name")?.unwrap_or_else(|| "thread".into());
                let tinst = e.num(&t.attrs, "instances", 1)?;
                // Filebench's parser leaves an unset memsize at 0: a private I/O buffer of
                // whatever size each flowop asks (`run::Worker::fill_buf`).
                let memsize = e.num(&t.attrs, "memsize", 0)?;
                if e.flag(&t.attrs, "useism")? {
                    note(&mut w, format!("thread '{tname}': useism (Filebench puts the thread's memory in Solaris intimate shared memory): ignored, the thread's memory is its own"));
                }
                let mut u = Unrolled::default();
                expand(&e, &w, &composites, &t.flowops, 0, &mut u)?;
                let Unrolled {
                    mut flowops,
                    targets,
                    ..
                } = u;
                // `target=NAME` names a flowop of the same thread (Filebench looks it up in
                // the thread's own list).
                for (k, t) in targets.into_iter().enumerate() {
                    let Some(name) = t else { continue };
                    // Across threads and processes: resolved below.
                    if matches!(flowops[k].kind, FlowopKind::Wakeup | FlowopKind::SemPost) {
                        flowops[k].target_name = Some(name);
                        continue;
                    }
                    let i = flowops.iter().position(|f| f.name == name).ok_or_else(|| {
                        e.err(
                            flowops[k].pos,
                            format!(
                                "flowop {}: target '{name}' is no flowop of its thread",
                                flowops[k].name
                            ),
                        )
                    })?;
                    // Filebench refuses an iopslimit or bwlimit watching a flowop that does no
                    // I/O (it would wait forever).
                    let limit =
                        matches!(flowops[k].kind, FlowopKind::IopsLimit | FlowopKind::BwLimit);
                    if limit && !(flowops[i].kind.reads() || flowops[i].kind.writes()) {
                        return Err(e.err(
                            flowops[k].pos,
                            format!(
                                "flowop {}: target '{name}' does no reads or writes",
                                flowops[k].name
                            ),
                        ));
                    }
                    flowops[k].target = Some(i);
                }
                let n = pinst.saturating_mul(tinst);
                if (w.threads.len() as u64).saturating_add(n) > MAX_THREADS {
                    return Err(e.err(t.pos, format!("more than {MAX_THREADS} threads")));
                }
                let total: u64 = w.threads.iter().map(|t| t.flowops.len() as u64).sum();
                if total.saturating_add(n.saturating_mul(flowops.len() as u64))
                    > MAX_UNROLLED as u64 * 4
                {
                    return Err(e.err(
                        t.pos,
                        format!(
                            "more than {} flowops over all threads once composite flowops are unrolled",
                            MAX_UNROLLED * 4
                        ),
                    ));
                }
                for _ in 0..n {
                    w.threads.push(ThreadSpec {
                        process: pname.clone(),
                        name: tname.clone(),
                        memsize,
                        flowops: flowops.clone(),
                    });
                }
            }
        }
        // `wakeup` and `sempost` name a `block` / `semblock` of any thread.
        for t in &w.threads {
            for f in &t.flowops {
                let want = match f.kind {
                    FlowopKind::Wakeup => FlowopKind::Block,
                    FlowopKind::SemPost => FlowopKind::SemBlock,
                    _ => continue,
                };
                let Some(name) = &f.target_name else {
                    return Err(e.err(f.pos, format!("flowop {}: needs target=", f.name)));
                };
                let found = w
                    .threads
                    .iter()
                    .flat_map(|t| &t.flowops)
                    .any(|g| &g.name == name && g.kind == want);
                if !found {
                    return Err(e.err(
                        f.pos,
                        format!(
                            "flowop {}: target '{name}' is no {} flowop",
                            f.name,
                            FLOWOPS
                                .iter()
                                .find(|(_, k)| *k == want)
                                .map(|(n, _)| *n)
                                .unwrap_or("?")
                        ),
                    ));
                }
            }
        }
        let any = |w: &Workload, p: &dyn Fn(&Flowop) -> bool| {
            w.threads.iter().flat_map(|t| &t.flowops).any(p)
        };
        w.directio = any(&w, &|f| f.directio);
        if w.directio {
            note(&mut w, "directio: a PMO has no page cache to bypass (every PMO read and write goes to the medium already); the POSIX peer opens such files O_DIRECT where its file system allows (its own note says how it went)".into());
        }
        if any(&w, &|f| f.kind == FlowopKind::AioWrite) {
            note(&mut w, "aiowrite: done synchronously in the calling thread (a PMO store has no asynchronous I/O), so aiowait finds every aiowrite complete".into());
        }
        w.vars = e
            .order
            .iter()
            .filter_map(|k| e.vars.get(k).map(|v| (k.clone(), show_value(v))))
            .collect();
        Ok(w)
    }
}

/// Evaluate `--set VAR=VALUE` overrides (each VALUE in the language's own syntax).
pub fn eval_overrides(overrides: &[(String, String)]) -> Result<HashMap<String, Value>, LangError> {
    let mut ov = HashMap::new();
    for (k, v) in overrides {
        let s = parse("--set", &format!("set ${k}={v}"))?;
        let Some((Stmt::Set { value, .. }, pos)) = s.stmts.first() else {
            return Err(LangError {
                file: "--set".into(),
                pos: Pos::default(),
                with_col: false,
                msg: format!("'{k}={v}' is not an assignment"),
            });
        };
        let e = Eval {
            file: "--set",
            vars: HashMap::new(),
            order: vec![],
            overrides: &HashMap::new(),
            outer: None,
        };
        ov.insert(k.clone(), e.value(value, *pos)?);
    }
    Ok(ov)
}

fn show_value(v: &Value) -> String {
    match v {
        Value::Num(n) => format!("{n}"),
        Value::Text(t) => t.clone(),
        Value::Flag => "true".into(),
        Value::Dist(Dist::Const(c)) => format!("{c}"),
        Value::Dist(Dist::Gamma { mean, gamma }) => format!("gamma(mean={mean},gamma={gamma})"),
        Value::Dist(Dist::Rand(r)) => format!("randvar(mean={})", r.mean),
    }
}

fn flowop(e: &Eval<'_>, w: &Workload, f: &crate::lang::FlowopDef) -> Result<Flowop, LangError> {
    let kind = FLOWOPS
        .iter()
        .find(|(n, _)| *n == f.kind)
        .map(|(_, k)| *k)
        .ok_or_else(|| {
            let known: Vec<&str> = FLOWOPS.iter().map(|(n, _)| *n).collect();
            e.err(
                f.pos,
                format!("unknown flowop '{}' (known: {})", f.kind, known.join(", ")),
            )
        })?;
    e.only(
        &f.attrs,
        &[
            "name",
            "filesetname",
            "filename",
            "fd",
            "srcfd",
            "iosize",
            "random",
            "iters",
            "workingset",
            "value",
            "target",
            "dsync",
            "indexed",
            "highwater",
            "blocking",
            "directio",
            "opennext",
        ],
        &format!("flowop {}", f.kind),
    )?;
    let set = match (
        e.text(&f.attrs, "filesetname")?,
        e.text(&f.attrs, "filename")?,
    ) {
        (Some(n), _) | (None, Some(n)) => {
            Some(w.filesets.iter().position(|s| s.name == n).ok_or_else(|| {
                e.err(
                    f.pos,
                    format!("flowop {}: no fileset or file named '{n}'", f.kind),
                )
            })?)
        }
        (None, None) => None,
    };
    let needs_set = matches!(
        kind,
        FlowopKind::CreateFile
            | FlowopKind::DeleteFile
            | FlowopKind::StatFile
            | FlowopKind::ListDir
            | FlowopKind::MakeDir
            | FlowopKind::RemoveDir
    );
    // `deletefile fd=N` deletes the file descriptor slot N last held.
    let by_fd = kind == FlowopKind::DeleteFile && e.num(&f.attrs, "fd", 0)? > 0;
    if needs_set && set.is_none() && !by_fd {
        return Err(e.err(
            f.pos,
            format!("flowop {} needs filesetname= or filename=", f.kind),
        ));
    }
    // makedir and removedir work on leaf directories, the file flowops on files.
    if let Some(i) = set {
        let dirs = w.filesets[i].leaf_dirs;
        let wants_dirs = matches!(kind, FlowopKind::MakeDir | FlowopKind::RemoveDir);
        if dirs != wants_dirs && !kind.is_control() && kind != FlowopKind::ListDir {
            let what = if dirs { "leafdirs" } else { "file" };
            return Err(e.err(
                f.pos,
                format!(
                    "flowop {}: fileset '{}' is a {what} fileset",
                    f.kind, w.filesets[i].name
                ),
            ));
        }
    }
    Ok(Flowop {
        kind,
        name: e.text(&f.attrs, "name")?.unwrap_or_else(|| f.kind.clone()),
        fileset: set,
        fd: e.fd(&f.attrs, "fd")?,
        srcfd: match e.attr_value(&f.attrs, "srcfd")? {
            None => None,
            Some(_) => Some(e.fd(&f.attrs, "srcfd")?),
        },
        iosize: e.dist(&f.attrs, "iosize", 1 << 20)?,
        random: e.flag(&f.attrs, "random")?,
        iters: e.num(&f.attrs, "iters", 1)?.max(1),
        workingset: e.num(&f.attrs, "workingset", 0)?,
        value: e.num(&f.attrs, "value", 0)?,
        dsync: e.flag(&f.attrs, "dsync")?,
        target: None,
        target_name: None,
        indexed: match e.attr_value(&f.attrs, "indexed")? {
            None => None,
            Some(_) => Some(e.dist(&f.attrs, "indexed", 0)?),
        },
        highwater: e.num(&f.attrs, "highwater", 1)?,
        blocking: e.flag(&f.attrs, "blocking")?,
        directio: e.flag(&f.attrs, "directio")?,
        opennext: e.flag(&f.attrs, "opennext")?,
        pos: f.pos,
    })
}

fn note(w: &mut Workload, n: String) {
    if !w.notes.contains(&n) {
        w.notes.push(n);
    }
}

/// Most flowops one thread may have once its composite flowops are unrolled.
const MAX_UNROLLED: usize = 100_000;

/// Most flowop uses (and their attributes) visited to unroll one thread's flowops: a use
/// that adds a flowop at the bottom of 8 levels of composites is 9 visits.
const MAX_EXPANSION_STEPS: u64 = 16 * MAX_UNROLLED as u64;

/// A thread's flowops as [`expand`] unrolls them.
#[derive(Default)]
struct Unrolled {
    flowops: Vec<Flowop>,
    /// Each flowop's `target=` name.
    targets: Vec<Option<String>>,
    /// Uses and attributes visited so far ([`MAX_EXPANSION_STEPS`]).
    steps: u64,
}

/// Evaluate a thread's (or composite flowop's) flowop list into `u.flowops`, unrolling each use
/// of a composite flowop: its body `iters` times, with its `$variables` bound to the
/// definition's defaults and the use's values (Filebench's `flowop_composite` runs the
/// body's flowops in order, each with its own `iters`, `iters` times). `u.targets` gets each
/// flowop's `target=` name.
fn expand(
    e: &Eval<'_>,
    w: &Workload,
    comps: &HashMap<String, (Attrs, Vec<FlowopDef>)>,
    defs: &[FlowopDef],
    depth: usize,
    u: &mut Unrolled,
) -> Result<(), LangError> {
    for f in defs {
        // Every use visited counts, those that add no flowop (a composite with an empty body)
        // included: nested, they multiply without growing `u.flowops`.
        u.steps += 1 + f.attrs.items.len() as u64;
        if u.steps > MAX_EXPANSION_STEPS {
            return Err(e.err(
                f.pos,
                format!("composite flowops take more than {MAX_EXPANSION_STEPS} steps to unroll"),
            ));
        }
        let Some((cattrs, body)) = comps.get(&f.kind) else {
            u.flowops.push(flowop(e, w, f)?);
            u.targets.push(e.text(&f.attrs, "target")?);
            continue;
        };
        if depth >= 8 {
            return Err(e.err(
                f.pos,
                format!("composite flowop '{}' nested deeper than 8", f.kind),
            ));
        }
        let mut inner = Eval {
            file: e.file,
            vars: HashMap::new(),
            order: vec![],
            overrides: e.overrides,
            outer: Some(e),
        };
        for (n, v, p) in &cattrs.items {
            if let (Some(var), false) = (n.strip_prefix('$'), *v == RawValue::Flag) {
                inner.vars.insert(var.into(), e.value(v, *p)?);
            }
        }
        for (n, v, p) in &f.attrs.items {
            match n.strip_prefix('$') {
                Some(var) => {
                    if !cattrs.items.iter().any(|(c, _, _)| c == n) {
                        return Err(e.err(
                            *p,
                            format!("composite flowop '{}' has no variable '{n}'", f.kind),
                        ));
                    }
                    inner.vars.insert(var.into(), e.value(v, *p)?);
                }
                None if matches!(n.as_str(), "name" | "iters") => {}
                None => {
                    return Err(e.err(
                        *p,
                        format!(
                            "unknown attribute '{n}' of composite flowop {} (known: name, iters, its $variables)",
                            f.kind
                        ),
                    ))
                }
            }
        }
        let iters = e.num(&f.attrs, "iters", 1)?.max(1);
        if (u.flowops.len() as u64).saturating_add(iters.saturating_mul(body.len() as u64))
            > MAX_UNROLLED as u64
        {
            return Err(e.err(
                f.pos,
                format!(
                    "composite flowop '{}' unrolls to more than {MAX_UNROLLED} flowops",
                    f.kind
                ),
            ));
        }
        for _ in 0..iters {
            let before = u.flowops.len();
            expand(&inner, w, comps, body, depth + 1, u)?;
            if u.flowops.len() == before {
                // Every round adds the same: one that adds nothing (an empty body) is all.
                break;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: &str =
        "set $dir=/tmp\nset $n=100\nset $fs=cvar(type=cvar-gamma,parameters=mean:4096;gamma:1.5)\n\
        define fileset name=b,path=$dir,size=$fs,entries=$n,dirwidth=20,prealloc=80\n\
        define process name=p,instances=2\n{\nthread name=t,memsize=1m,instances=3\n{\n\
        flowop openfile name=o,filesetname=b,fd=1\nflowop readwholefile name=r,fd=1,iosize=1m\n\
        flowop closefile name=c,fd=1\n}\n}\nrun 60\n";

    #[test]
    fn evaluates_with_overrides() {
        let w = Workload::from_text(
            "x.f",
            W,
            &[("n".into(), "7".into()), ("extra".into(), "1k".into())],
        )
        .unwrap();
        assert_eq!(w.filesets[0].entries, 7);
        assert_eq!(w.filesets[0].path, "/tmp");
        assert_eq!(
            w.filesets[0].size,
            Dist::Gamma {
                mean: 4096.0,
                gamma: 1.5
            }
        );
        assert_eq!(w.threads.len(), 6);
        assert_eq!(w.threads[0].flowops[1].iosize, Dist::Const(1 << 20));
        assert_eq!(w.run_seconds, Some(60.0));
        assert!(w.vars.contains(&("extra".into(), "1024".into())));
    }

    #[test]
    fn a_wrong_value_is_named_as_the_file_writes_it() {
        let bad = W.replace("entries=$n", "entries=abc");
        let e = Workload::from_text("x.f", &bad, &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("attribute 'entries' must be a number, not \"abc\""),
            "{e}"
        );
    }

    #[test]
    fn unknown_names_are_errors_with_file_and_line() {
        let bad = W.replace("readwholefile name=r", "readwholefiel name=r");
        let e = Workload::from_text("x.f", &bad, &[]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("x.f:10: unknown flowop 'readwholefiel'"),
            "{e}"
        );
        let bad = W.replace("iosize=1m", "iosiz=1m");
        let e = Workload::from_text("x.f", &bad, &[]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("x.f:10: unknown attribute 'iosiz' of flowop readwholefile"),
            "{e}"
        );
        let bad = W.replace("$dir,", "$nodir,");
        let e = Workload::from_text("x.f", &bad, &[]).unwrap_err();
        assert_eq!(e.to_string(), "x.f:4: variable '$nodir' is not set");
        let e = Workload::from_text("x.f", W, &[("n".into(), "cvar(".into())]).unwrap_err();
        assert!(e.file == "--set", "{e}");
    }

    #[test]
    fn numbers_and_gamma() {
        assert_eq!(parse_number("16k"), Some(16384.0));
        assert_eq!(parse_number("1m"), Some(1048576.0));
        assert_eq!(parse_number("1.5"), Some(1.5));
        assert_eq!(parse_number("x"), None);
        let d = Dist::Gamma {
            mean: 1000.0,
            gamma: 1.5,
        };
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(7);
        let n = 2000;
        let m: f64 = (0..n).map(|_| d.sample(&mut rng) as f64).sum::<f64>() / n as f64;
        assert!((m - 1000.0).abs() < 200.0, "sample mean {m}");
    }
}
