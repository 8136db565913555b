//! A YCSB core workload: the properties of `site.ycsb.workloads.CoreWorkload` this driver
//! honours, read from YCSB's own property files.

use std::path::Path;

use crate::YcsbError;

/// The largest record (`fieldcount` x `fieldlength`) a workload may ask for: 1 GiB, which every
/// store is built with and the driver allocates per operation.
pub const MAX_RECORD_LEN: usize = 1 << 30;

/// The largest workload file read (YCSB's are a few hundred bytes).
pub const MAX_FILE_LEN: u64 = 1 << 20;

/// Request distribution (`requestdistribution`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    Zipfian,
    Uniform,
    Latest,
}

/// The properties of one core workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// `a` .. `f`, or the file's name.
    pub name: String,
    pub record_count: u64,
    pub operation_count: u64,
    pub field_count: usize,
    pub field_length: usize,
    pub read: f64,
    pub update: f64,
    pub insert: f64,
    pub scan: f64,
    pub read_modify_write: f64,
    pub distribution: Distribution,
    /// Scans read 1..=max_scan_length records, uniformly (`scanlengthdistribution=uniform`).
    pub max_scan_length: usize,
    /// `insertorder=hashed` (YCSB's default): keys are hashed record numbers.
    pub hashed_keys: bool,
    /// `key=value` lines of the file this driver does not act on: unknown keys (a misspelt
    /// `recordcout` included) and YCSB client settings it does not honour (`threadcount`,
    /// `target`, ...). YCSB ignores them silently; the benchmarks print them as a warning.
    pub ignored: Vec<String>,
}

/// Properties that change nothing for a key/value store driven by one client, so they are
/// accepted silently whatever their value: a record is one value, read and written whole (as
/// YCSB's key/value bindings, RocksDB's among them, do whichever fields are asked for); every
/// read is checked against the record number it carries (`dataintegrity`); the `hotspot*`
/// fractions and `fieldlengthhistogram` only serve distributions refused here; the rest names
/// YCSB's own table, binding and measurement output.
const NO_EFFECT_HERE: &[&str] = &[
    "readallfields",
    "writeallfields",
    "readallfieldsbyname",
    "dataintegrity",
    "fieldnameprefix",
    "table",
    "hotspotdatafraction",
    "hotspotopnfraction",
    "fieldlengthhistogram",
    "db",
    "exporter",
    "exportfile",
    "measurementtype",
    "measurement.interval",
    "histogram.buckets",
    "timeseries.granularity",
    "status.interval",
];

impl Workload {
    /// The core workload `letter` (`a`..`f`) as YCSB's `workloads/` files define it (1000
    /// records, 1000 operations, 10 fields of 100 bytes).
    pub fn core(letter: char) -> Option<Workload> {
        let base = Workload {
            name: letter.to_string(),
            record_count: 1000,
            operation_count: 1000,
            field_count: 10,
            field_length: 100,
            read: 0.0,
            update: 0.0,
            insert: 0.0,
            scan: 0.0,
            read_modify_write: 0.0,
            distribution: Distribution::Zipfian,
            max_scan_length: 100,
            hashed_keys: true,
            ignored: Vec::new(),
        };
        Some(match letter {
            'a' => Workload {
                read: 0.5,
                update: 0.5,
                ..base
            },
            'b' => Workload {
                read: 0.95,
                update: 0.05,
                ..base
            },
            'c' => Workload { read: 1.0, ..base },
            'd' => Workload {
                read: 0.95,
                insert: 0.05,
                distribution: Distribution::Latest,
                ..base
            },
            'e' => Workload {
                scan: 0.95,
                insert: 0.05,
                ..base
            },
            'f' => Workload {
                read: 0.5,
                read_modify_write: 0.5,
                ..base
            },
            _ => return None,
        })
    }

    /// Core workload `letter` from YCSB's file `dir/workload<letter>` when it exists, else
    /// [`Workload::core`]. A path there that is not a readable file (a directory, a dangling
    /// link) is an error, not the built-in workload.
    pub fn find(letter: char, dir: Option<&Path>) -> Result<Workload, YcsbError> {
        if let Some(dir) = dir {
            let path = dir.join(format!("workload{letter}"));
            if path.symlink_metadata().is_ok() {
                let mut w = Workload::from_file(&path)?;
                w.name = letter.to_string();
                return Ok(w);
            }
        }
        Workload::core(letter).ok_or_else(|| YcsbError::Workload {
            path: format!("workload{letter}"),
            msg: "no such core workload (a..f)".into(),
        })
    }

    /// Parse a YCSB property file (`key=value` lines, `#` comments). Values it cannot honour
    /// are errors. Properties it does not act on are kept in [`Workload::ignored`] (YCSB ignores
    /// those of other workload classes and bindings), except those that change nothing here.
    pub fn from_file(path: &Path) -> Result<Workload, YcsbError> {
        let err = |msg: String| YcsbError::Workload {
            path: path.display().to_string(),
            msg,
        };
        // A device or a fifo is no property file (/dev/zero would be read until memory runs
        // out), nor is a file of megabytes (YCSB's are a few hundred bytes).
        let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
        if meta.is_dir() {
            return Err(err("is a directory, not a YCSB property file".into()));
        }
        if !meta.is_file() {
            return Err(err("not a regular file".into()));
        }
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(
                std::fs::File::open(path).map_err(|e| err(e.to_string()))?,
                MAX_FILE_LEN + 1,
            ),
            &mut text,
        )
        .map_err(|e| err(e.to_string()))?;
        if text.len() as u64 > MAX_FILE_LEN {
            return Err(err(format!(
                "larger than {MAX_FILE_LEN} bytes: not a YCSB property file"
            )));
        }
        let name = path
            .file_name()
            .map_or("workload".into(), |n| n.to_string_lossy().into_owned());
        Workload::parse(&name, &text).map_err(|msg| YcsbError::Workload {
            path: path.display().to_string(),
            msg,
        })
    }

    /// Parse properties text; `name` labels the result.
    pub fn parse(name: &str, text: &str) -> Result<Workload, String> {
        let mut w = Workload::core('a').expect("core a");
        w.name = name.to_string();
        w.read = 0.95; // CoreWorkload's own defaults where the file is silent
        w.update = 0.05;
        let mut insert_count = None;
        // A UTF-8 byte order mark (some editors write one) is not part of the first key.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                return Err(format!("line {}: not key=value: {line:?}", n + 1));
            };
            let (k, v) = (k.trim(), v.trim());
            let num = |v: &str| {
                v.parse::<f64>()
                    .map_err(|_| format!("line {}: {k}={v:?} is not a number", n + 1))
            };
            let int = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| format!("line {}: {k}={v:?} is not a count", n + 1))
            };
            // YCSB reads counts as Java longs and a field's length as an int: larger values
            // are errors there too (and would overflow the driver's sums here).
            let below = |v: &str, max: u64| {
                int(v).and_then(|x| {
                    if x <= max {
                        Ok(x)
                    } else {
                        Err(format!("line {}: {k}={v} is more than {max}", n + 1))
                    }
                })
            };
            match k {
                "recordcount" => w.record_count = below(v, i64::MAX as u64)?,
                "operationcount" => w.operation_count = below(v, i64::MAX as u64)?,
                "fieldcount" => w.field_count = below(v, i32::MAX as u64)? as usize,
                "fieldlength" => w.field_length = below(v, i32::MAX as u64)? as usize,
                "readproportion" => w.read = num(v)?,
                "updateproportion" => w.update = num(v)?,
                "insertproportion" => w.insert = num(v)?,
                "scanproportion" => w.scan = num(v)?,
                "readmodifywriteproportion" => w.read_modify_write = num(v)?,
                "maxscanlength" => {
                    w.max_scan_length = below(v, i32::MAX as u64)? as usize;
                    if w.max_scan_length == 0 {
                        return Err(format!(
                            "line {}: maxscanlength=0: a scan reads at least 1 record",
                            n + 1
                        ));
                    }
                }
                "minscanlength" if int(v)? != 1 => {
                    return Err(format!(
                    "line {}: minscanlength={v} is not supported (scans read 1..=maxscanlength)",
                    n + 1
                ))
                }
                "fieldlengthdistribution" if v != "constant" => {
                    return Err(format!(
                        "fieldlengthdistribution={v} is not supported (constant)"
                    ))
                }
                "insertstart" if int(v)? != 0 => {
                    return Err(format!(
                    "line {}: insertstart={v} is not supported (0: one client loads every record)",
                    n + 1
                ))
                }
                "insertcount" => insert_count = Some(int(v)?),
                "requestdistribution" => {
                    w.distribution = match v {
                        "zipfian" => Distribution::Zipfian,
                        "uniform" => Distribution::Uniform,
                        "latest" => Distribution::Latest,
                        _ => {
                            return Err(format!(
                            "requestdistribution={v} is not supported (zipfian, uniform, latest)"
                        ))
                        }
                    }
                }
                "scanlengthdistribution" if v != "uniform" => {
                    return Err(format!(
                        "scanlengthdistribution={v} is not supported (uniform)"
                    ))
                }
                "insertorder" => {
                    w.hashed_keys = match v {
                        "hashed" => true,
                        "ordered" => false,
                        _ => {
                            return Err(format!(
                                "insertorder={v} is not supported (hashed, ordered)"
                            ))
                        }
                    }
                }
                "workload"
                    if v != "site.ycsb.workloads.CoreWorkload"
                        && v != "com.yahoo.ycsb.workloads.CoreWorkload" =>
                {
                    return Err(format!("workload={v}: only CoreWorkload is supported"))
                }
                // Honoured at the one value this driver supports (checked just above).
                "minscanlength"
                | "fieldlengthdistribution"
                | "insertstart"
                | "scanlengthdistribution"
                | "workload" => {}
                k if NO_EFFECT_HERE.contains(&k) => {}
                _ => w.ignored.push(format!("{k}={v}")),
            }
        }
        if let Some(c) = insert_count.filter(|c| *c != w.record_count) {
            return Err(format!(
                "insertcount={c} is not supported with recordcount={} (one client loads every \
                 record)",
                w.record_count
            ));
        }
        if w.field_count.saturating_mul(w.field_length) > MAX_RECORD_LEN {
            return Err(format!(
                "fieldcount={} x fieldlength={}: a record of more than {MAX_RECORD_LEN} bytes",
                w.field_count, w.field_length
            ));
        }
        let total = w.total_proportion();
        let props = [w.read, w.update, w.insert, w.scan, w.read_modify_write];
        // The driver draws an operation from [0, total): an infinite total (finite
        // proportions that overflow when added) would make every draw NaN.
        if props.iter().any(|p| !p.is_finite() || *p < 0.0) || total <= 0.0 || !total.is_finite() {
            return Err(
                "the operation proportions must be >= 0 and add up to more than 0 (and a finite \
                 number)"
                    .into(),
            );
        }
        Ok(w)
    }

    /// The operation proportions' sum: an operation is drawn from `[0, total)`.
    pub fn total_proportion(&self) -> f64 {
        self.read + self.update + self.insert + self.scan + self.read_modify_write
    }

    /// Bytes of one record.
    pub fn record_len(&self) -> usize {
        self.field_count * self.field_length
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_ycsb_file_like_the_builtin() {
        let text = "# Yahoo! Cloud System Benchmark\nrecordcount=1000\noperationcount=1000\n\
                    workload=site.ycsb.workloads.CoreWorkload\nreadallfields=true\n\
                    readproportion=0\nupdateproportion=0\nscanproportion=0.95\n\
                    insertproportion=0.05\nrequestdistribution=zipfian\nmaxscanlength=100\n\
                    scanlengthdistribution=uniform\n";
        let mut w = Workload::parse("e", text).unwrap();
        w.name = "e".into();
        assert_eq!(w, Workload::core('e').unwrap());
    }

    #[test]
    fn keeps_what_it_does_not_act_on_for_a_warning() {
        let w = Workload::parse(
            "t",
            "recordcout=5000\nthreadcount=8\nreadallfields=false\nwriteallfields=true\n\
             minscanlength=1\ninsertstart=0\nworkload=site.ycsb.workloads.CoreWorkload\n\
             target = 100\n",
        )
        .unwrap();
        assert_eq!(
            w.ignored,
            ["recordcout=5000", "threadcount=8", "target=100"]
        );
        assert_eq!(w.record_count, 1000, "the misspelt key changed nothing");
    }

    #[test]
    fn rejects_what_it_cannot_honour() {
        assert!(Workload::parse("x", "requestdistribution=hotspot\n").is_err());
        assert!(Workload::parse("x", "readproportion=abc\n").is_err());
        assert!(Workload::parse("x", "readproportion=0\nupdateproportion=0\n").is_err());
        assert!(Workload::parse("x", "garbage line\n").is_err());
        assert!(Workload::parse("x", "readproportion=-1\nupdateproportion=2\n").is_err());
    }

    #[test]
    fn the_shared_files_match_the_builtin_defaults() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/ycsb");
        if !dir.is_dir() {
            return; // the shared inputs are not part of a plain clone
        }
        for l in ['a', 'b', 'c', 'd', 'e', 'f'] {
            assert_eq!(
                Workload::find(l, Some(&dir)).unwrap(),
                Workload::core(l).unwrap(),
                "workload{l}"
            );
        }
    }
}
