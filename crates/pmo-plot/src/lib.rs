//! pmo's figures (the benchmarks' and the CXL simulator's study), drawn with `plotters` twice
//! from the same code: as SVG and as PNG (plotters' bitmap back end, text in DejaVu Sans
//! compiled in, so neither librsvg nor fontconfig nor any installed font is needed). Kinds:
//! lines (optionally log-log) for a numeric x axis, grouped bars for a categorical one, stacked
//! bars for a breakdown. This crate depends on no other pmo crate.
//!
//! Every figure keeps its legend in a panel of its own (it never hides a point), tells up to
//! [`PALETTE`]`.len()` series apart by colour and each line also by marker shape and line
//! style, labels numeric ticks as a person writes them ([`ticks::human`]: `5 M`, `10 k`), and
//! marks a value whose samples' spread is wider than the effect it shows: a hollow marker or
//! bar, a `?` after a stacked bar's label, with a note in the legend panel.

#![deny(unsafe_code)]

use std::path::{Path, PathBuf};

use plotters::prelude::*;

mod draw;
mod spec;
pub mod ticks;

pub use spec::{Bar, BarChart, Bars, LineChart, Point, Series, SeriesStyle, PALETTE};

/// Drawing a figure failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlotError {
    /// plotters could not draw or write the figure (its SVG or its PNG).
    #[error("plotting {}: {reason}", path.display())]
    Draw {
        /// The figure's file (the SVG, or the PNG beside it).
        path: PathBuf,
        /// The back end's message.
        reason: String,
    },
}

/// The PNG drawn beside an SVG figure of this module (every figure is written as both); its
/// path, or `None` when it is not there.
pub fn to_png(svg: &Path) -> Option<PathBuf> {
    let png = svg.with_extension("png");
    png.is_file().then_some(png)
}

const LEGEND_W: u32 = 260;

/// Register the font the PNG's text is drawn in (plotters' `ab_glyph` font back end uses no
/// system font): DejaVu Sans, for every family name the figures use.
fn register_fonts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for family in ["sans-serif", "serif", "monospace"] {
            for (style, bytes) in [
                (FontStyle::Normal, dejavu::sans::regular()),
                (FontStyle::Bold, dejavu::sans::bold()),
                (FontStyle::Italic, dejavu::sans::oblique()),
                (FontStyle::Oblique, dejavu::sans::oblique()),
            ] {
                // The bytes are a valid TrueType font compiled in: this cannot fail.
                let _ = plotters::style::register_font(family, style, bytes);
            }
        }
    });
}

/// Draw a figure of `size` pixels twice, to `svg` and to the PNG beside it, the legend in a
/// panel of `LEGEND_W` on the right.
fn write_both(svg: &Path, size: (u32, u32), fig: draw::Figure) -> Result<(), PlotError> {
    register_fonts();
    let err = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: svg.to_path_buf(),
        reason: e.to_string(),
    };
    {
        let root = SVGBackend::new(svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let (plot, legend) = root.split_horizontally(size.0 - LEGEND_W);
        fig.draw(&plot, &legend).map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    let png = svg.with_extension("png");
    let err = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: png.clone(),
        reason: e.to_string(),
    };
    let root = BitMapBackend::new(&png, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (plot, legend) = root.split_horizontally(size.0 - LEGEND_W);
    fig.draw(&plot, &legend).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Stacked bars, one per label, categories stacked in order; `reference_y` draws a dashed
/// horizontal line (e.g. at 1.0 for a normalised time). Writes `path` (SVG) and the PNG beside.
pub fn stacked_bars(
    path: &Path,
    title: &str,
    y_desc: &str,
    bars: &Bars,
    reference_y: Option<f64>,
) -> Result<(), PlotError> {
    // Each bar as wide as its label (about 7 px a character at 12 px), so labels never overlap.
    let longest = bars
        .iter()
        .map(|b| b.label.chars().count() + 2)
        .max()
        .unwrap_or(0);
    let per_bar = (7 * longest as u32 + 12).max(80);
    let width = (140 + per_bar * bars.len() as u32 + LEGEND_W).clamp(1100, 4000);
    write_both(
        path,
        (width, 580),
        draw::Figure::Stacked {
            title,
            y_desc,
            bars,
            reference_y,
        },
    )
}

/// Grouped bars: one group per category of `spec`, one bar per series in each (a point's `x`
/// is its category's index; a missing point is a missing bar). Writes `path` (SVG) and the
/// PNG beside it; nothing when there is no point.
pub fn grouped_bars(path: &Path, spec: &BarChart, series: &[Series]) -> Result<(), PlotError> {
    if series.iter().all(|s| s.points.is_empty()) {
        return Ok(());
    }
    let bars = spec.categories.len() * series.len().max(1);
    let width = (260 + 22 * bars as u32 + LEGEND_W).clamp(1000, 2600);
    write_both(path, (width, 560), draw::Figure::Grouped(spec, series))
}

/// One line per series (points sorted by x), for a numeric x axis. Writes `path` (SVG) and
/// the PNG beside it; nothing when there is no point.
pub fn lines(path: &Path, spec: &LineChart, series: &mut [Series]) -> Result<(), PlotError> {
    for s in series.iter_mut() {
        s.points.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
    if series.iter().all(|s| s.points.is_empty()) {
        return Ok(());
    }
    let series = &*series;
    write_both(
        path,
        (960 + LEGEND_W, 540),
        draw::Figure::Lines(spec, series),
    )
}

/// The texts of an SVG file of this crate (tick labels, titles, legend entries), trimmed and
/// unescaped: for tests of the figures.
pub fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            let text = body[..body.find("</text>")?].trim();
            // The SVG back end escapes XML's five characters; `&amp;` last, so `&amp;lt;`
            // stays `&lt;`.
            Some(
                text.replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&quot;", "\"")
                    .replace("&apos;", "'")
                    .replace("&amp;", "&"),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixteen_series_look_different() {
        let styles: Vec<SeriesStyle> = (0..PALETTE.len()).map(SeriesStyle::of).collect();
        for (i, a) in styles.iter().enumerate() {
            for b in &styles[i + 1..] {
                let d = |x: u8, y: u8| (x as i32 - y as i32).pow(2);
                let dist = d(a.colour.0, b.colour.0)
                    + d(a.colour.1, b.colour.1)
                    + d(a.colour.2, b.colour.2);
                assert!(dist > 60 * 60, "{a:?} and {b:?} are too close ({dist})");
            }
        }
        // Neighbours also differ in marker and line style.
        for i in 0..PALETTE.len() - 1 {
            assert_ne!(styles[i].marker, styles[i + 1].marker);
            assert_ne!(styles[i].dashed, styles[i + 1].dashed);
        }
    }

    #[test]
    fn paired_lines_share_a_colour_and_log_x_ticks_sit_at_the_data() {
        let styles: Vec<SeriesStyle> = (0..6).map(SeriesStyle::paired).collect();
        for pair in styles.chunks(2) {
            assert_eq!(pair[0].colour, pair[1].colour, "a pair shares its colour");
            assert!(!pair[0].dashed && pair[1].dashed);
            assert_ne!(pair[0].marker, pair[1].marker);
        }
        assert_ne!(styles[0].colour, styles[2].colour);
        assert_ne!(styles[2].colour, styles[4].colour);
        let spec = LineChart {
            title: "speedup vs buffer entries",
            x_desc: "entries (log scale)",
            y_desc: "speedup (x)",
            log_x: true,
            integer_x: true,
            reference_y: Some(1.0),
            fit_y: true,
            paired: true,
            ..Default::default()
        };
        assert_eq!(spec.style(3), SeriesStyle::paired(3));
        let dir = std::env::temp_dir().join(format!("pmo-plot-paired-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("paired.svg");
        let xs: [f64; 4] = [8.0, 16.0, 32.0, 64.0];
        let mut series: Vec<Series> = ["a pb", "a pb-rf", "b pb", "b pb-rf"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let pts: Vec<(f64, f64)> = xs
                    .iter()
                    .map(|&x| (x, 1.0 + 0.01 * i as f64 * x.log2()))
                    .collect();
                Series::plain(*name, &pts)
            })
            .collect();
        lines(&p, &spec, &mut series).unwrap();
        let texts = svg_texts(&std::fs::read_to_string(&p).unwrap());
        let has = |t: &str| texts.iter().any(|x| x == t);
        for tick in ["8", "16", "32", "64", "a pb-rf", "entries (log scale)"] {
            assert!(has(tick), "{tick}: {texts:?}");
        }
        assert!(
            !has("10") && !has("20"),
            "ticks at the data only: {texts:?}"
        );
        // The y axis spans the data (1 to 1.18), not 0 to 1.2.
        assert!(!has("0") && !has("0.5"), "y fitted to the data: {texts:?}");
        assert_png(&p.with_extension("png"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn figures_are_written_with_integer_ticks_a_reference_line_and_marks() {
        let dir = std::env::temp_dir().join(format!("pmo-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("lines.svg");
        let mut series = vec![
            Series::plain("a", &[(1.0, 1.0), (2.0, 1.2), (4.0, 1.1)]),
            Series {
                name: "b".into(),
                points: vec![Point {
                    x: 2.0,
                    y: 0.9,
                    uncertain: true,
                }],
            },
        ];
        let spec = LineChart {
            title: "t",
            x_desc: "threads",
            y_desc: "ratio",
            integer_x: true,
            reference_y: Some(1.0),
            ..Default::default()
        };
        lines(&p, &spec, &mut series).unwrap();
        let texts = svg_texts(&std::fs::read_to_string(&p).unwrap());
        let has = |t: &str| texts.iter().any(|x| x == t);
        for tick in ["1", "2", "4"] {
            assert!(has(tick), "tick {tick}: {texts:?}");
        }
        assert!(
            !has("1.5") && !has("2.0") && !has("3"),
            "integer ticks at the data only"
        );
        assert!(has("a") && has("b"), "legend");
        assert!(
            texts.iter().any(|t| t.starts_with("hollow / ?")),
            "the uncertain point is explained"
        );
        // A CDF: latencies over decades on a log x axis, fractions on a linear y axis.
        let c = dir.join("cdf.svg");
        let mut cdf = vec![Series::plain(
            "reads",
            &[(0.5, 0.1), (1.0, 0.5), (10.0, 0.99), (1000.0, 1.0)],
        )];
        let spec = LineChart {
            title: "cdf",
            x_desc: "latency",
            y_desc: "fraction",
            log_x: true,
            ..Default::default()
        };
        lines(&c, &spec, &mut cdf).unwrap();
        let texts = svg_texts(&std::fs::read_to_string(&c).unwrap());
        let has = |t: &str| texts.iter().any(|x| x == t);
        assert!(
            has("1") && has("10") && has("100") && has("1 k"),
            "decades on the x axis: {texts:?}"
        );
        assert!(!has("500"), "no linear x ticks: {texts:?}");
        let b = dir.join("bars.svg");
        stacked_bars(
            &b,
            "t",
            "time / wedi",
            &[
                Bar {
                    label: "x".into(),
                    parts: vec![("c1", 1.0), ("c2", 0.5)],
                    uncertain: false,
                },
                Bar {
                    label: "y".into(),
                    parts: vec![("c1", 0.7), ("c2", 0.4)],
                    uncertain: true,
                },
            ],
            Some(1.0),
        )
        .unwrap();
        let texts = svg_texts(&std::fs::read_to_string(&b).unwrap());
        assert!(
            texts.iter().any(|t| t == "y ?"),
            "uncertain bar marked: {texts:?}"
        );
        assert!(texts.iter().any(|t| t == "x"), "bar labels: {texts:?}");
        // One bar dwarfing the others (a disk beside memory) is cut at the top and says so;
        // the others keep a readable scale.
        let o = dir.join("outlier.svg");
        let bar = |label: &str, v: f64| Bar {
            label: label.into(),
            parts: vec![("c1", v * 0.5), ("c2", v * 0.5)],
            uncertain: false,
        };
        stacked_bars(
            &o,
            "t",
            "commit time (µs, median)",
            &[
                bar("a", 20.0),
                bar("disk", 435.0),
                bar("b", 15.0),
                bar("c", 10.0),
            ],
            None,
        )
        .unwrap();
        let texts = svg_texts(&std::fs::read_to_string(&o).unwrap());
        assert!(
            texts.iter().any(|t| t == "435 (off scale)"),
            "the cut bar says so: {texts:?}"
        );
        assert!(
            !texts.iter().any(|t| t == "400" || t == "100"),
            "the axis stops near the next tallest bar: {texts:?}"
        );
        let texts = svg_texts(&std::fs::read_to_string(&b).unwrap());
        assert!(
            !texts.iter().any(|t| t.contains("off scale")),
            "no bar is cut without an outlier: {texts:?}"
        );
        for f in [&p, &b, &o] {
            assert_png(&f.with_extension("png"));
            assert_eq!(to_png(f), Some(f.with_extension("png")));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A real PNG (signature, an IHDR of the figure's size) with more than a blank page in it.
    fn assert_png(png: &Path) {
        let bytes = std::fs::read(png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", png.display());
        assert_eq!(&bytes[12..16], b"IHDR");
        let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        assert!(w >= 900 && h >= 500, "{w}x{h}");
        // A white page compresses to a few hundred bytes; text, axes and bars do not.
        assert!(
            bytes.len() > 8_000,
            "{}: {} bytes",
            png.display(),
            bytes.len()
        );
    }

    #[test]
    fn categories_are_grouped_bars_with_readable_ticks_in_svg_and_png() {
        let dir = std::env::temp_dir().join(format!("pmo-plot-bars-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("grouped.svg");
        let series = vec![
            Series::plain(
                "shm",
                &[(0.0, 5_000_000.0), (1.0, 2_500_000.0), (2.0, 40_000.0)],
            ),
            Series {
                name: "pmo".into(),
                points: vec![Point {
                    x: 1.0,
                    y: 1_000_000.0,
                    uncertain: true,
                }],
            },
        ];
        let spec = BarChart {
            title: "YCSB",
            x_desc: "YCSB workload",
            y_desc: "throughput (ops/s, median of 3)",
            categories: ["A", "B", "C"].map(String::from).to_vec(),
            ..Default::default()
        };
        grouped_bars(&p, &spec, &series).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        let texts = svg_texts(&svg);
        let has = |t: &str| texts.iter().any(|x| x == t);
        for want in [
            "A",
            "B",
            "C",
            "shm",
            "pmo",
            "throughput (ops/s, median of 3)",
        ] {
            assert!(has(want), "{want}: {texts:?}");
        }
        assert!(has("5 M") || has("4 M"), "M ticks: {texts:?}");
        assert!(
            !texts
                .iter()
                .any(|t| t.ends_with(".0")
                    || t.len() > 3 && t.parse::<f64>().is_ok_and(|v| v >= 1000.0)),
            "a raw float tick: {texts:?}"
        );
        // Four bars (and the legend's two swatches) as rectangles, not a polyline.
        assert!(svg.matches("<rect").count() >= 4 + 2, "{svg}");
        assert_png(&p.with_extension("png"));
        // Log y: ticks are powers of ten written as people write them.
        let log = dir.join("grouped-log.svg");
        grouped_bars(
            &log,
            &BarChart {
                log_y: true,
                ..spec.clone()
            },
            &series,
        )
        .unwrap();
        let texts = svg_texts(&std::fs::read_to_string(&log).unwrap());
        assert!(
            texts.iter().any(|t| t == "100 k" || t == "1 M"),
            "{texts:?}"
        );
        assert_png(&log.with_extension("png"));
        if std::env::var_os("PMO_PLOT_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
