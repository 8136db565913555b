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
    /// Smallest and largest sample (`None`: not recorded), for the spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

impl Record {
    /// The spread of the samples relative to the value, `(max - min) / value` (`None` without
    /// a recorded spread or for a zero value).
    pub fn rel_spread(&self) -> Option<f64> {
        match (self.min, self.max) {
            (Some(lo), Some(hi)) if self.value != 0.0 => Some((hi - lo) / self.value.abs()),
            _ => None,
        }
    }
}

/// The ratio `num / den` of two medians and whether it is uncertain: the range of ratios the
/// samples allow (`num.min / den.max` to `num.max / den.min`) includes 1, i.e. the spread is
/// wider than the effect. Without recorded spreads a ratio is not marked.
pub fn ratio(num: &Record, den: &Record) -> (f64, bool) {
    let r = num.value / den.value;
    if std::ptr::eq(num, den) {
        return (r, false); // the reference itself
    }
    let uncertain = match (num.min, num.max, den.min, den.max) {
        (Some(a), Some(b), Some(c), Some(d)) if c > 0.0 && d > 0.0 => a / d <= 1.0 && b / c >= 1.0,
        _ => false,
    };
    (r, uncertain)
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
            min: None,
            max: None,
        });
    }

    /// Add a record of the median of `samples`, with their minimum and maximum.
    pub fn push_samples(
        &mut self,
        bench: &str,
        params: &[(&str, String)],
        metric: &str,
        samples: &[f64],
        unit: &str,
    ) {
        self.push(
            bench,
            params,
            metric,
            crate::median(samples),
            unit,
            samples.len(),
        );
        if let Some(r) = self.records.last_mut() {
            r.min = samples.iter().copied().reduce(f64::min);
            r.max = samples.iter().copied().reduce(f64::max);
        }
    }

    /// The first record matching `metric` and all `params`.
    pub fn get(&self, metric: &str, params: &[(&str, &str)]) -> Option<&Record> {
        self.records.iter().find(|r| {
            r.metric == metric
                && params
                    .iter()
                    .all(|(k, v)| r.params.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The value of the first record matching `metric` and all `params`.
    pub fn find(&self, metric: &str, params: &[(&str, &str)]) -> Option<f64> {
        self.get(metric, params).map(|r| r.value)
    }

    /// The values parameter `param` takes in the records of `metric`, in record order, each
    /// once.
    pub fn param_values(&self, metric: &str, param: &str) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for r in self.records.iter().filter(|r| r.metric == metric) {
            if let Some(x) = r.params.get(param) {
                if !v.contains(x) {
                    v.push(x.clone());
                }
            }
        }
        v
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

    /// Write as CSV: bench, one column per parameter name (union over records), metric, value
    /// (the median), unit, samples, min, max (empty when not recorded).
    pub fn write_csv(&self, path: &Path) -> Result<(), BenchError> {
        let mut keys: Vec<&String> = self.records.iter().flat_map(|r| r.params.keys()).collect();
        keys.sort();
        keys.dedup();
        let mut out = Vec::new();
        let header: Vec<&str> = std::iter::once("bench")
            .chain(keys.iter().map(|k| k.as_str()))
            .chain(["metric", "value", "unit", "samples", "min", "max"])
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
                r.min.map(|v| v.to_string()).unwrap_or_default(),
                r.max.map(|v| v.to_string()).unwrap_or_default(),
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
    fn param_values_lists_each_value_of_a_metric_once_in_order() {
        let mut r = Records::default();
        for (s, m) in [("b", "x"), ("a", "x"), ("b", "x"), ("c", "y")] {
            r.push("t", &[("scheme", s.to_string())], m, 1.0, "us", 1);
        }
        assert_eq!(r.param_values("x", "scheme"), vec!["b", "a"]);
        assert_eq!(r.param_values("y", "scheme"), vec!["c"]);
        assert!(r.param_values("x", "other").is_empty());
    }

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
        assert_eq!(lines[0], "bench,k,size,metric,value,unit,samples,min,max");
        assert_eq!(lines[1], "store,1,,psync_us,2.5,us,5,,");
        assert_eq!(lines[2], "store,,16MiB,attach_us,9,us,5,,");
        assert_eq!(r.find("attach_us", &[("size", "16MiB")]), Some(9.0));
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn spread_is_recorded_and_ratios_within_it_are_uncertain() {
        let mut r = Records::default();
        let p = |s: &str| vec![("scheme", s.to_string())];
        r.push_samples("suite", &p("a"), "wall_s", &[1.0, 1.3, 0.9], "s");
        r.push_samples("suite", &p("b"), "wall_s", &[1.1, 1.2, 1.15], "s");
        r.push_samples("suite", &p("c"), "wall_s", &[2.0, 2.1, 2.05], "s");
        let a = r.get("wall_s", &[("scheme", "a")]).unwrap();
        assert_eq!(
            (a.value, a.min, a.max, a.samples),
            (1.0, Some(0.9), Some(1.3), 3)
        );
        let (b, c) = (
            r.get("wall_s", &[("scheme", "b")]).unwrap(),
            r.get("wall_s", &[("scheme", "c")]).unwrap(),
        );
        // b/a = 1.15: a's spread (0.9..1.3) is wider than that effect.
        assert!(ratio(b, a).1);
        // c/b = 1.78: far outside both spreads.
        let (v, unsure) = ratio(c, b);
        assert!((v - 2.05 / 1.15).abs() < 1e-12 && !unsure);
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
