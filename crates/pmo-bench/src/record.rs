//! Tidy benchmark records and their CSV/JSON output.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::BenchError;

/// One measurement: what was measured, under which parameters, the value and its unit.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    /// Benchmark family, e.g. `store`.
    pub bench: String,
    /// Parameters (ordered, so CSV columns are stable).
    pub params: BTreeMap<String, String>,
    /// What the value is, e.g. `psync_us`.
    pub metric: String,
    pub value: f64,
    pub unit: String,
    /// Samples the value is the median of.
    pub samples: usize,
}

/// A collection of records.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Records {
    pub records: Vec<Record>,
}

impl Records {
    /// Add a record.
    pub fn push(
        &mut self,
        bench: &str,
        params: &[(&str, String)],
        metric: &str,
        value: f64,
        unit: &str,
        samples: usize,
    ) {
        self.records.push(Record {
            bench: bench.into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            metric: metric.into(),
            value,
            unit: unit.into(),
            samples,
        });
    }

    /// The value of the first record matching `metric` and all `params`.
    pub fn find(&self, metric: &str, params: &[(&str, &str)]) -> Option<f64> {
        self.records
            .iter()
            .find(|r| {
                r.metric == metric
                    && params
                        .iter()
                        .all(|(k, v)| r.params.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|r| r.value)
    }

    /// Read records written by [`Records::write_json`].
    pub fn read_json(path: &Path) -> Result<Records, BenchError> {
        let text = std::fs::read_to_string(path).map_err(|source| BenchError::Io {
            op: format!("read {}", path.display()),
            source,
        })?;
        serde_json::from_str(&text)
            .map_err(|e| BenchError::Other(format!("{}: not a records file: {e}", path.display())))
    }

    /// Write as JSON.
    pub fn write_json(&self, path: &Path) -> Result<(), BenchError> {
        let text =
            serde_json::to_string_pretty(self).map_err(|e| BenchError::Other(e.to_string()))?;
        std::fs::write(path, text).map_err(|source| BenchError::Io {
            op: format!("write {}", path.display()),
            source,
        })
    }

    /// Write as CSV: bench, one column per parameter name (union over records), metric, value, unit, samples.
    pub fn write_csv(&self, path: &Path) -> Result<(), BenchError> {
        let mut keys: Vec<&String> = self.records.iter().flat_map(|r| r.params.keys()).collect();
        keys.sort();
        keys.dedup();
        let mut out = Vec::new();
        let header: Vec<&str> = std::iter::once("bench")
            .chain(keys.iter().map(|k| k.as_str()))
            .chain(["metric", "value", "unit", "samples"])
            .collect();
        writeln!(out, "{}", header.join(",")).expect("vec write");
        for r in &self.records {
            let mut row = vec![csv_field(&r.bench)];
            row.extend(
                keys.iter()
                    .map(|k| csv_field(r.params.get(*k).map(String::as_str).unwrap_or(""))),
            );
            row.extend([
                csv_field(&r.metric),
                format!("{}", r.value),
                csv_field(&r.unit),
                r.samples.to_string(),
            ]);
            writeln!(out, "{}", row.join(",")).expect("vec write");
        }
        std::fs::write(path, out).map_err(|source| BenchError::Io {
            op: format!("write {}", path.display()),
            source,
        })
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_has_union_of_params() {
        let mut r = Records::default();
        r.push("store", &[("k", "1".into())], "psync_us", 2.5, "us", 5);
        r.push(
            "store",
            &[("size", "16MiB".into())],
            "attach_us",
            9.0,
            "us",
            5,
        );
        let p = std::env::temp_dir().join(format!("pmo-bench-csv-{}", std::process::id()));
        r.write_csv(&p).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "bench,k,size,metric,value,unit,samples");
        assert_eq!(lines[1], "store,1,,psync_us,2.5,us,5");
        assert_eq!(lines[2], "store,,16MiB,attach_us,9,us,5");
        assert_eq!(r.find("attach_us", &[("size", "16MiB")]), Some(9.0));
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn json_round_trips_and_foreign_files_are_errors() {
        let mut r = Records::default();
        r.push("suite", &[("scheme", "wedi".into())], "wall_s", 0.5, "s", 3);
        let p = std::env::temp_dir().join(format!("pmo-bench-json-{}", std::process::id()));
        r.write_json(&p).unwrap();
        let back = Records::read_json(&p).unwrap();
        assert_eq!(back.find("wall_s", &[("scheme", "wedi")]), Some(0.5));
        assert_eq!(back.records[0].samples, 3);
        std::fs::write(&p, b"{\"not\": 1}").unwrap();
        assert!(Records::read_json(&p).is_err());
        std::fs::remove_file(&p).unwrap();
        assert!(Records::read_json(&p).is_err(), "missing file");
    }
}
