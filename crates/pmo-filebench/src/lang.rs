//! Filebench's workload language (`.f` files): tokens and statements.
//!
//! Supported (what the standard personalities use):
//!
//! ```text
//! # comment
//! set $var=VALUE                      VALUE: 123, 16k, 1m, 1.5, "text", true, $other,
//!                                      cvar(type=cvar-gamma,parameters=mean:N;gamma:G)
//! set mode quit firstdone|alldone|timebased
//! define fileset name=N,path=P,size=S,entries=E,dirwidth=W,prealloc[=PCT],readonly,reuse,paralloc
//! define file name=N,path=P,size=S,prealloc[=PCT],readonly,reuse,paralloc
//! define process name=N,instances=I { thread name=T,memsize=M,instances=J { flowop TYPE attrs... } }
//! eventgen rate=N                    the event generator `opslimit` waits on (N events/s)
//! set $v = randvar(type=gamma|uniform|tabular, min=N, round=N, mean=N, gamma=N, seed=N,
//!                  randsrc=urandom|rand48, randtable = {{PCT, MIN, MAX}, ...})
//! define randvar name=$v, ...         the same, Filebench 1.4's spelling
//! set $v = $a * 2 + $b / 4            arithmetic in any value
//! define flowop name=N, $p... { flowop ... }   a composite flowop, used as `flowop N ..., $p=V`
//! debug N
//! run [SECONDS]
//! echo "text"
//! ```
//!
//! A statement continues on the next line after a `,` or `=` (and inside `randvar(...)` and a
//! `randtable`). Errors name the file and line, and for syntax errors the column.

use std::fmt;

/// Where a token or statement starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

/// An error in a workload file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LangError {
    pub file: String,
    pub pos: Pos,
    /// Column is meaningful (syntax errors).
    pub with_col: bool,
    pub msg: String,
}

impl fmt::Display for LangError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.with_col {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file, self.pos.line, self.pos.col, self.msg
            )
        } else {
            write!(f, "{}:{}: {}", self.file, self.pos.line, self.msg)
        }
    }
}

impl std::error::Error for LangError {}

/// A value as written.
#[derive(Clone, Debug, PartialEq)]
pub enum RawValue {
    /// A bare word or number (`16k`, `/tmp`, `true`, `cvar-gamma`).
    Word(String),
    /// A quoted string.
    Str(String),
    /// `$name`.
    Var(String),
    /// `cvar(...)`: its `key=value` pairs; `parameters` kept as text (`mean:1;gamma:1.5`).
    Cvar(Vec<(String, String)>),
    /// An attribute given without `=value` (`prealloc`, `readonly`).
    Flag,
    /// `A op B` with `op` one of `+ - * /` (`$nfiles * $eventrate`).
    Arith(Box<RawValue>, char, Box<RawValue>),
    /// A random variable: `randvar(type=...,min=...,...)` or `define randvar name=$v, ...`.
    Randvar(RandvarDef),
}

/// A random variable as written: its `key=value` attributes and its `randtable`, if any.
#[derive(Clone, Debug, PartialEq)]
pub struct RandvarDef {
    pub attrs: Vec<(String, RawValue, Pos)>,
    /// `randtable = {{percent, min, max}, ...}` rows.
    pub table: Option<Vec<[RawValue; 3]>>,
    pub pos: Pos,
}

/// `name=value` attributes in order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Attrs {
    pub items: Vec<(String, RawValue, Pos)>,
}

impl Attrs {
    /// The value of attribute `name`.
    pub fn get(&self, name: &str) -> Option<&RawValue> {
        self.items
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, v, _)| v)
    }
}

/// One flowop inside a thread.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowopDef {
    pub kind: String,
    pub attrs: Attrs,
    pub pos: Pos,
}

/// A thread definition.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadDef {
    pub attrs: Attrs,
    pub flowops: Vec<FlowopDef>,
    pub pos: Pos,
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Set {
        var: String,
        value: RawValue,
    },
    SetMode(Vec<String>),
    DefineFileset(Attrs),
    DefineFile(Attrs),
    DefineProcess {
        attrs: Attrs,
        threads: Vec<ThreadDef>,
    },
    Run(Option<RawValue>),
    Echo(String),
    /// `eventgen rate=N`.
    Eventgen(Attrs),
    /// `debug N`: Filebench's log verbosity.
    Debug(RawValue),
    /// `define flowop name=N, $param... { flowop ... }`: a composite flowop.
    DefineFlowop {
        attrs: Attrs,
        flowops: Vec<FlowopDef>,
    },
}

/// A parsed workload file.
#[derive(Clone, Debug, PartialEq)]
pub struct Script {
    pub file: String,
    pub stmts: Vec<(Stmt, Pos)>,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Word(String),
    Var(String),
    Str(String),
    Punct(char),
    Newline,
}

/// The deepest value accepted (a chain of 64 operators, randvars nested 64 deep): evaluating,
/// cloning and dropping a value recurse once per level, so a long `1 + 1 + ...` must not
/// overflow the stack.
pub const MAX_VALUE_DEPTH: usize = 64;

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '+')
}

fn lex(file: &str, text: &str) -> Result<Vec<(Tok, Pos)>, LangError> {
    let mut out = Vec::new();
    let err = |pos: Pos, msg: String| LangError {
        file: file.into(),
        pos,
        with_col: true,
        msg,
    };
    for (li, line) in text.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let pos = Pos {
                line: li + 1,
                col: i + 1,
            };
            if c == '#' {
                break;
            }
            if c.is_whitespace() {
                i += 1;
            } else if c == '"' {
                let start = i + 1;
                let end = chars[start..]
                    .iter()
                    .position(|&c| c == '"')
                    .ok_or_else(|| err(pos, "unterminated string".into()))?;
                out.push((Tok::Str(chars[start..start + end].iter().collect()), pos));
                i = start + end + 1;
            } else if c == '$' {
                let start = i + 1;
                let mut j = start;
                while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '_') {
                    j += 1;
                }
                if j == start {
                    return Err(err(pos, "'$' must start a variable name".into()));
                }
                out.push((Tok::Var(chars[start..j].iter().collect()), pos));
                i = j;
            } else if is_word(c) {
                let start = i;
                while i < chars.len() && is_word(chars[i]) {
                    i += 1;
                }
                out.push((Tok::Word(chars[start..i].iter().collect()), pos));
            } else if matches!(c, '=' | ',' | '{' | '}' | '(' | ')' | ';' | ':' | '*') {
                out.push((Tok::Punct(c), pos));
                i += 1;
            } else {
                return Err(err(pos, format!("unexpected character {c:?}")));
            }
        }
        out.push((
            Tok::Newline,
            Pos {
                line: li + 1,
                col: chars.len() + 1,
            },
        ));
    }
    Ok(out)
}

struct Parser<'a> {
    file: &'a str,
    toks: Vec<(Tok, Pos)>,
    at: usize,
    /// `randvar(` levels open at the cursor.
    nest: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&(Tok, Pos)> {
        self.toks.get(self.at)
    }
    fn end_pos(&self) -> Pos {
        self.toks.last().map(|t| t.1).unwrap_or_default()
    }
    fn err(&self, pos: Pos, msg: impl Into<String>) -> LangError {
        LangError {
            file: self.file.into(),
            pos,
            with_col: true,
            msg: msg.into(),
        }
    }
    fn next(&mut self) -> Option<(Tok, Pos)> {
        let t = self.toks.get(self.at).cloned();
        self.at += 1;
        t
    }
    fn skip_newlines(&mut self) {
        while matches!(self.peek(), Some((Tok::Newline, _))) {
            self.at += 1;
        }
    }
    fn expect_punct(&mut self, c: char) -> Result<Pos, LangError> {
        match self.next() {
            Some((Tok::Punct(p), pos)) if p == c => Ok(pos),
            Some((t, pos)) => Err(self.err(pos, format!("expected '{c}', found {}", show(&t)))),
            None => Err(self.err(self.end_pos(), format!("expected '{c}', found the end"))),
        }
    }
    fn word(&mut self, what: &str) -> Result<(String, Pos), LangError> {
        match self.next() {
            Some((Tok::Word(w), pos)) => Ok((w, pos)),
            Some((t, pos)) => Err(self.err(pos, format!("expected {what}, found {}", show(&t)))),
            None => Err(self.err(self.end_pos(), format!("expected {what}, found the end"))),
        }
    }
    fn end_of_stmt(&mut self) -> Result<(), LangError> {
        match self.peek() {
            None | Some((Tok::Newline, _)) => Ok(()),
            Some((Tok::Punct('}'), _)) => Ok(()),
            Some((t, pos)) => {
                Err(self.err(*pos, format!("unexpected {} after the statement", show(t))))
            }
        }
    }

    /// The arithmetic operator at the cursor, if any (`*` is punctuation; `+`, `-` and `/`
    /// lex as one-character words since they also occur inside words and paths).
    fn operator(&self) -> Option<char> {
        match self.peek() {
            Some((Tok::Punct('*'), _)) => Some('*'),
            Some((Tok::Word(w), _)) if matches!(w.as_str(), "+" | "-" | "/") => w.chars().next(),
            _ => None,
        }
    }

    /// A value, possibly an arithmetic expression of values (`*` and `/` bind tighter than
    /// `+` and `-`; left to right otherwise).
    fn value(&mut self) -> Result<RawValue, LangError> {
        self.value_d().map(|(v, _)| v)
    }

    /// A value and its depth (the evaluation's recursion: one level per operator of a chain,
    /// per nested `randvar(...)`), refused above [`MAX_VALUE_DEPTH`].
    fn value_d(&mut self) -> Result<(RawValue, usize), LangError> {
        let (mut v, mut d) = self.term()?;
        while let Some(op @ ('+' | '-')) = self.operator() {
            let pos = self.peek().map(|t| t.1).unwrap_or_default();
            self.at += 1;
            let (r, rd) = self.term()?;
            d = self.deeper(d.max(rd), pos)?;
            v = RawValue::Arith(Box::new(v), op, Box::new(r));
        }
        Ok((v, d))
    }

    /// One more level over `d`, or an error at `pos` above [`MAX_VALUE_DEPTH`].
    fn deeper(&self, d: usize, pos: Pos) -> Result<usize, LangError> {
        if d >= MAX_VALUE_DEPTH {
            return Err(self.err(
                pos,
                format!("a value nested deeper than {MAX_VALUE_DEPTH} (operators or randvars)"),
            ));
        }
        Ok(d + 1)
    }

    fn term(&mut self) -> Result<(RawValue, usize), LangError> {
        let (mut v, mut d) = self.primary()?;
        while let Some(op @ ('*' | '/')) = self.operator() {
            let pos = self.peek().map(|t| t.1).unwrap_or_default();
            self.at += 1;
            let (r, rd) = self.primary()?;
            d = self.deeper(d.max(rd), pos)?;
            v = RawValue::Arith(Box::new(v), op, Box::new(r));
        }
        Ok((v, d))
    }

    fn primary(&mut self) -> Result<(RawValue, usize), LangError> {
        match self.next() {
            Some((Tok::Word(w), _)) if w == "cvar" => {
                if matches!(self.peek(), Some((Tok::Punct('('), _))) {
                    self.at += 1;
                    return Ok((self.cvar()?, 1));
                }
                Ok((RawValue::Word(w), 1))
            }
            Some((Tok::Word(w), pos)) if w == "randvar" => {
                if matches!(self.peek(), Some((Tok::Punct('('), _))) {
                    self.at += 1;
                    // Refused on the way down too: the parser recurses here.
                    self.nest = self.deeper(self.nest, pos)?;
                    let r = self.randvar_d(pos, true);
                    self.nest -= 1;
                    let (def, d) = r?;
                    return Ok((RawValue::Randvar(def), d));
                }
                Ok((RawValue::Word(w), 1))
            }
            Some((Tok::Word(w), _)) => Ok((RawValue::Word(w), 1)),
            Some((Tok::Str(s), _)) => Ok((RawValue::Str(s), 1)),
            Some((Tok::Var(v), _)) => Ok((RawValue::Var(v), 1)),
            Some((t, pos)) => Err(self.err(pos, format!("expected a value, found {}", show(&t)))),
            None => Err(self.err(self.end_pos(), "expected a value, found the end")),
        }
    }

    /// After `cvar(`: `key=value` pairs separated by `,` up to `)`; a value is the raw text of
    /// its tokens (`mean:131072;gamma:1.5`).
    fn cvar(&mut self) -> Result<RawValue, LangError> {
        let mut pairs = Vec::new();
        loop {
            let (k, _) = self.word("a cvar attribute")?;
            self.expect_punct('=')?;
            let mut v = String::new();
            loop {
                match self.peek().cloned() {
                    Some((Tok::Punct(','), _)) | Some((Tok::Punct(')'), _)) => break,
                    Some((Tok::Word(w), _)) => v.push_str(&w),
                    Some((Tok::Punct(c @ (':' | ';' | '=')), _)) => v.push(c),
                    Some((t, pos)) => {
                        return Err(self.err(pos, format!("unexpected {} in cvar(...)", show(&t))))
                    }
                    None => return Err(self.err(self.end_pos(), "unterminated cvar(")),
                }
                self.at += 1;
            }
            pairs.push((k, v));
            match self.next() {
                Some((Tok::Punct(')'), _)) => return Ok(RawValue::Cvar(pairs)),
                Some((Tok::Punct(','), _)) => continue,
                _ => unreachable!("the loop above stops at ',' or ')'"),
            }
        }
    }

    /// The attributes of a random variable up to `)` (`paren`) or the end of the statement,
    /// `randtable = {{P, MIN, MAX}, ...}` included; newlines inside are spaces.
    fn randvar(&mut self, pos: Pos, paren: bool) -> Result<RandvarDef, LangError> {
        self.randvar_d(pos, paren).map(|(def, _)| def)
    }

    /// [`Parser::randvar`] and its depth (one more than its deepest value).
    fn randvar_d(&mut self, pos: Pos, paren: bool) -> Result<(RandvarDef, usize), LangError> {
        let mut def = RandvarDef {
            attrs: vec![],
            table: None,
            pos,
        };
        let mut depth = 0;
        loop {
            self.skip_newlines();
            let (name, apos) = self.word("a randvar attribute")?;
            self.skip_newlines();
            self.expect_punct('=')?;
            self.skip_newlines();
            if name == "randtable" {
                if def.table.is_some() {
                    return Err(self.err(apos, "randtable given twice"));
                }
                let (table, d) = self.randtable()?;
                depth = depth.max(d);
                def.table = Some(table);
            } else {
                let (v, d) = self.value_d()?;
                depth = depth.max(d);
                def.attrs.push((name, v, apos));
            }
            if paren {
                self.skip_newlines();
            }
            match self.peek() {
                Some((Tok::Punct(','), _)) => self.at += 1,
                Some((Tok::Punct(')'), _)) if paren => {
                    self.at += 1;
                    return Ok((def, self.deeper(depth, pos)?));
                }
                None | Some((Tok::Newline, _)) if !paren => {
                    return Ok((def, self.deeper(depth, pos)?))
                }
                Some((t, p)) => {
                    let want = if paren { "',' or ')'" } else { "','" };
                    return Err(self.err(
                        *p,
                        format!("expected {want} in a randvar, found {}", show(t)),
                    ));
                }
                None => return Err(self.err(self.end_pos(), "unterminated randvar(")),
            }
        }
    }

    /// `{{P, MIN, MAX}, {P, MIN, MAX} ...}` (commas between rows optional, newlines free).
    fn randtable(&mut self) -> Result<(Vec<[RawValue; 3]>, usize), LangError> {
        self.expect_punct('{')?;
        let mut rows = vec![];
        let mut depth = 0;
        loop {
            self.skip_newlines();
            if matches!(self.peek(), Some((Tok::Punct('}'), _))) {
                self.at += 1;
                return Ok((rows, depth));
            }
            if !rows.is_empty() && matches!(self.peek(), Some((Tok::Punct(','), _))) {
                self.at += 1;
                self.skip_newlines();
            }
            self.expect_punct('{')?;
            let mut row = vec![];
            for k in 0..3 {
                self.skip_newlines();
                let (v, d) = self.value_d()?;
                depth = depth.max(d);
                row.push(v);
                self.skip_newlines();
                self.expect_punct(if k < 2 { ',' } else { '}' })?;
            }
            let [a, b, c]: [RawValue; 3] = row.try_into().expect("three values");
            rows.push([a, b, c]);
        }
    }

    /// `name=value,flag,name=value` up to the end of the line or a `{`; a line ending in `,`
    /// or `=` continues on the next. A name may be a `$variable` (a composite flowop's
    /// local variables).
    fn attrs(&mut self) -> Result<Attrs, LangError> {
        let mut a = Attrs::default();
        loop {
            match self.peek() {
                None | Some((Tok::Newline, _)) | Some((Tok::Punct('{'), _)) => return Ok(a),
                _ => {}
            }
            let (name, pos) = match self.peek().cloned() {
                Some((Tok::Var(v), pos)) => {
                    self.at += 1;
                    (format!("${v}"), pos)
                }
                _ => self.word("an attribute name")?,
            };
            let v = if matches!(self.peek(), Some((Tok::Punct('='), _))) {
                self.at += 1;
                self.skip_newlines();
                self.value()?
            } else {
                RawValue::Flag
            };
            a.items.push((name, v, pos));
            match self.peek() {
                Some((Tok::Punct(','), _)) => {
                    self.at += 1;
                    self.skip_newlines();
                }
                None | Some((Tok::Newline, _)) | Some((Tok::Punct('{'), _)) => return Ok(a),
                Some((t, pos)) => {
                    return Err(self.err(
                        *pos,
                        format!("expected ',' between attributes, found {}", show(t)),
                    ))
                }
            }
        }
    }

    fn open_brace(&mut self) -> Result<(), LangError> {
        self.skip_newlines();
        self.expect_punct('{').map(|_| ())
    }

    /// `{ flowop TYPE attrs ... }` (the body of a thread or a composite flowop).
    fn flowops(&mut self, what: &str) -> Result<Vec<FlowopDef>, LangError> {
        self.open_brace()?;
        let mut flowops = Vec::new();
        loop {
            self.skip_newlines();
            match self.next() {
                Some((Tok::Punct('}'), _)) => return Ok(flowops),
                Some((Tok::Word(w), pos)) if w == "flowop" => {
                    let (kind, _) = self.word("a flowop type")?;
                    let attrs = self.attrs()?;
                    self.end_of_stmt()?;
                    flowops.push(FlowopDef { kind, attrs, pos });
                }
                Some((t, pos)) => {
                    return Err(self.err(
                        pos,
                        format!("expected 'flowop' or '}}' in {what}, found {}", show(&t)),
                    ))
                }
                None => {
                    return Err(self.err(self.end_pos(), format!("missing '}}' closing {what}")))
                }
            }
        }
    }

    fn process(&mut self) -> Result<Stmt, LangError> {
        let attrs = self.attrs()?;
        self.open_brace()?;
        let mut threads = Vec::new();
        loop {
            self.skip_newlines();
            match self.next() {
                Some((Tok::Punct('}'), _)) => break,
                Some((Tok::Word(w), pos)) if w == "thread" => {
                    let attrs = self.attrs()?;
                    let flowops = self.flowops("a thread")?;
                    threads.push(ThreadDef {
                        attrs,
                        flowops,
                        pos,
                    });
                }
                Some((t, pos)) => {
                    return Err(self.err(
                        pos,
                        format!("expected 'thread' or '}}' in a process, found {}", show(&t)),
                    ))
                }
                None => return Err(self.err(self.end_pos(), "missing '}' closing a process")),
            }
        }
        Ok(Stmt::DefineProcess { attrs, threads })
    }

    fn stmt(&mut self, kw: &str, pos: Pos) -> Result<Stmt, LangError> {
        match kw {
            "set" => match self.next() {
                Some((Tok::Var(var), _)) => {
                    self.expect_punct('=')?;
                    let value = self.value()?;
                    self.end_of_stmt()?;
                    Ok(Stmt::Set { var, value })
                }
                Some((Tok::Word(w), _)) if w == "mode" => {
                    let mut words = Vec::new();
                    while let Some((Tok::Word(w), _)) = self.peek().cloned() {
                        words.push(w);
                        self.at += 1;
                    }
                    self.end_of_stmt()?;
                    Ok(Stmt::SetMode(words))
                }
                Some((t, pos)) => Err(self.err(
                    pos,
                    format!(
                        "expected '$variable' or 'mode' after 'set', found {}",
                        show(&t)
                    ),
                )),
                None => Err(self.err(pos, "'set' needs a variable")),
            },
            "define" => {
                let (what, wpos) = self.word("fileset, file, process, flowop or randvar")?;
                match what.as_str() {
                    "fileset" => {
                        let a = self.attrs()?;
                        self.end_of_stmt()?;
                        Ok(Stmt::DefineFileset(a))
                    }
                    "file" => {
                        let a = self.attrs()?;
                        self.end_of_stmt()?;
                        Ok(Stmt::DefineFile(a))
                    }
                    "process" => self.process(),
                    "flowop" => {
                        let attrs = self.attrs()?;
                        let flowops = self.flowops("a composite flowop")?;
                        Ok(Stmt::DefineFlowop { attrs, flowops })
                    }
                    // `define randvar name=$v, ...` is `set $v = randvar(...)`.
                    "randvar" => {
                        let mut def = self.randvar(wpos, false)?;
                        let k = def.attrs.iter().position(|(n, _, _)| n == "name");
                        let var = match k.map(|k| def.attrs.remove(k)) {
                            Some((_, RawValue::Var(v), _)) => v,
                            Some((_, _, p)) => {
                                return Err(self.err(p, "a randvar's name must be a $variable"))
                            }
                            None => return Err(self.err(wpos, "define randvar needs name=$variable")),
                        };
                        self.end_of_stmt()?;
                        Ok(Stmt::Set {
                            var,
                            value: RawValue::Randvar(def),
                        })
                    }
                    other => Err(LangError {
                        file: self.file.into(),
                        pos: wpos,
                        with_col: false,
                        msg: format!("unknown definition 'define {other}' (supported: fileset, file, process, flowop, randvar)"),
                    }),
                }
            }
            "run" => {
                let v = match self.peek() {
                    None | Some((Tok::Newline, _)) => None,
                    _ => Some(self.value()?),
                };
                self.end_of_stmt()?;
                Ok(Stmt::Run(v))
            }
            "eventgen" => {
                let a = self.attrs()?;
                self.end_of_stmt()?;
                Ok(Stmt::Eventgen(a))
            }
            "debug" => {
                let v = self.value()?;
                self.end_of_stmt()?;
                Ok(Stmt::Debug(v))
            }
            "echo" => {
                let v = match self.next() {
                    Some((Tok::Str(s), _)) | Some((Tok::Word(s), _)) => s,
                    Some((t, pos)) => {
                        return Err(self.err(
                            pos,
                            format!("expected a string after echo, found {}", show(&t)),
                        ))
                    }
                    None => String::new(),
                };
                self.end_of_stmt()?;
                Ok(Stmt::Echo(v))
            }
            other => Err(LangError {
                file: self.file.into(),
                pos,
                with_col: false,
                msg: format!(
                    "unknown statement '{other}' (supported: set, define, eventgen, run, echo, debug)"
                ),
            }),
        }
    }
}

fn show(t: &Tok) -> String {
    match t {
        Tok::Word(w) => format!("'{w}'"),
        Tok::Var(v) => format!("'${v}'"),
        Tok::Str(s) => format!("\"{s}\""),
        Tok::Punct(c) => format!("'{c}'"),
        Tok::Newline => "the end of the line".into(),
    }
}

/// Parse the text of workload file `file`.
pub fn parse(file: &str, text: &str) -> Result<Script, LangError> {
    let toks = lex(file, text)?;
    let mut p = Parser {
        file,
        toks,
        at: 0,
        nest: 0,
    };
    let mut stmts = Vec::new();
    loop {
        p.skip_newlines();
        let Some((tok, pos)) = p.next() else { break };
        match tok {
            Tok::Word(kw) => {
                let s = p.stmt(&kw, pos)?;
                stmts.push((s, pos));
            }
            t => return Err(p.err(pos, format!("expected a statement, found {}", show(&t)))),
        }
    }
    Ok(Script {
        file: file.into(),
        stmts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_personality() {
        let s = parse(
            "t.f",
            "# c\nset $n=10\nset $fs=cvar(type=cvar-gamma,parameters=mean:131072;gamma:1.5)\n\
             set mode quit firstdone\n\
             define fileset name=big,path=$dir,size=$fs,entries=$n,prealloc=80,readonly\n\
             define process name=p,instances=1\n{\n  thread name=t,memsize=10m,instances=$n\n  {\n\
             flowop createfile name=c1,filesetname=big,fd=1\n    flowop opslimit name=limit\n  }\n}\n\
             echo \"hi\"\nrun 60\n",
        )
        .unwrap();
        assert_eq!(s.stmts.len(), 7);
        assert_eq!(
            s.stmts[1].0,
            Stmt::Set {
                var: "fs".into(),
                value: RawValue::Cvar(vec![
                    ("type".into(), "cvar-gamma".into()),
                    ("parameters".into(), "mean:131072;gamma:1.5".into())
                ])
            }
        );
        let Stmt::DefineFileset(a) = &s.stmts[3].0 else {
            panic!()
        };
        assert_eq!(a.get("readonly"), Some(&RawValue::Flag));
        assert_eq!(a.get("path"), Some(&RawValue::Var("dir".into())));
        let Stmt::DefineProcess { threads, .. } = &s.stmts[4].0 else {
            panic!()
        };
        assert_eq!(threads[0].flowops.len(), 2);
        assert_eq!(threads[0].flowops[1].pos.line, 11);
        assert_eq!(s.stmts[6].0, Stmt::Run(Some(RawValue::Word("60".into()))));
    }

    #[test]
    fn syntax_errors_name_file_line_and_column() {
        let e = parse("w.f", "set $a=1\nset $b 2\n").unwrap_err();
        assert_eq!(e.to_string(), "w.f:2:8: expected '=', found '2'");
        let e = parse("w.f", "\n  set $a=\"open\n").unwrap_err();
        assert_eq!((e.pos.line, e.pos.col), (2, 10));
        let e = parse("w.f", "define process name=p\n{\n thread name=t\n {\n").unwrap_err();
        assert!(e.msg.contains("missing '}'"), "{e}");
        let e = parse("w.f", "frobnicate now\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.f:1: unknown statement 'frobnicate' (supported: set, define, eventgen, run, echo, debug)"
        );
        let e = parse("w.f", "set $a=1 @\n").unwrap_err();
        assert_eq!(e.to_string(), "w.f:1:10: unexpected character '@'");
    }
}
