//! Tick labels as a person writes them: `5 M`, `10 k`, `250 k`, `1.5`, `0.02`; never
//! `5000000.0`.

/// A tick value with at most three significant digits, thousands as `k`, millions as `M`,
/// billions as `G`, trailing zeros dropped; values below 0.001 in scientific form (`2e-5`).
pub fn human(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a < 1e-12 {
        return "0".into();
    }
    let (scaled, suffix) = if a >= 1e9 {
        (v / 1e9, " G")
    } else if a >= 1e6 {
        (v / 1e6, " M")
    } else if a >= 1e3 {
        (v / 1e3, " k")
    } else if a < 1e-3 {
        let exp = a.log10().floor() as i32;
        let mantissa = v / 10f64.powi(exp);
        return format!("{}e{exp}", significant(mantissa));
    } else {
        (v, "")
    };
    format!("{}{suffix}", significant(scaled))
}

/// `v` rounded to three significant digits, without trailing zeros or a trailing point.
fn significant(v: f64) -> String {
    let a = v.abs();
    let decimals = if a >= 100.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        // 0.123 -> 3 decimals, 0.0123 -> 4.
        (2 - a.log10().floor() as i32).max(0) as usize
    };
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn ticks_read_as_a_person_writes_them() {
        for (v, want) in [
            (5_000_000.0, "5 M"),
            (10_000.0, "10 k"),
            (250_000.0, "250 k"),
            (1_500.0, "1.5 k"),
            (2_500_000_000.0, "2.5 G"),
            (1_000.0, "1 k"),
            (999.0, "999"),
            (0.0, "0"),
            (1.0, "1"),
            (0.5, "0.5"),
            (1.25, "1.25"),
            (0.30000000000000004, "0.3"),
            (0.02, "0.02"),
            (0.001, "0.001"),
            (0.00002, "2e-5"),
            (12.5, "12.5"),
            (-3_000.0, "-3 k"),
            (1e4, "10 k"),
            (1e5, "100 k"),
            (1e6, "1 M"),
        ] {
            assert_eq!(human(v), want, "tick {v}");
        }
    }

    #[test]
    fn no_tick_label_is_a_raw_float() {
        for e in -2..10 {
            for m in [1.0, 2.0, 5.0] {
                let s = human(m * 10f64.powi(e));
                assert!(!s.ends_with(".0"), "{s}");
                assert!(s.len() <= 6, "{s} is too long for a tick");
            }
        }
    }
}
