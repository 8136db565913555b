//! Figures of the benchmarks, drawn as SVG with `plotters` (and converted to PNG when
//! `rsvg-convert` is installed): lines (optionally log-log) and stacked bars.
//!
//! Every figure keeps its legend in a panel of its own (it never hides a point), tells up to
//! [`PALETTE`]`.len()` series apart by colour and each also by marker shape and line style, and
//! marks a value whose samples' spread is wider than the effect it shows: a hollow marker on a
//! line, a `?` after a bar's label, with a note in the legend panel.

use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::{
    AsRangedCoord, DefaultFormatting, KeyPointHint, Ranged, ValueFormatter,
};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::BenchError;

/// Convert an SVG figure to PNG with `rsvg-convert` when it is installed; the PNG's path.
pub fn to_png(svg: &Path) -> Option<PathBuf> {
    let png = svg.with_extension("png");
    let ok = std::process::Command::new("rsvg-convert")
        .arg(svg)
        .arg("-o")
        .arg(&png)
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    ok.then_some(png)
}

/// Thirteen colours that stay apart from each other on white (and for the common forms of
/// colour blindness, together with the markers and line styles of [`SeriesStyle`]).
pub const PALETTE: [RGBColor; 13] = [
    RGBColor(0, 114, 178),   // blue
    RGBColor(230, 159, 0),   // orange
    RGBColor(0, 158, 115),   // bluish green
    RGBColor(213, 94, 0),    // vermillion
    RGBColor(204, 121, 167), // reddish purple
    RGBColor(86, 180, 233),  // sky blue
    RGBColor(0, 0, 0),       // black
    RGBColor(153, 0, 0),     // dark red
    RGBColor(102, 61, 153),  // purple
    RGBColor(128, 128, 128), // grey
    RGBColor(0, 90, 50),     // dark green
    RGBColor(170, 140, 0),   // olive
    RGBColor(255, 0, 200),   // magenta
];

/// How series `i` is drawn: its colour, whether its line is dashed, and its marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeriesStyle {
    pub colour: RGBColor,
    pub dashed: bool,
    /// 0 circle, 1 triangle, 2 square, 3 diamond.
    pub marker: u8,
}

impl SeriesStyle {
    /// The style of series `i`: colours in [`PALETTE`] order; markers and dashes cycle on
    /// their own periods, so two series that share a colour (beyond 13) still differ.
    pub fn of(i: usize) -> SeriesStyle {
        SeriesStyle {
            colour: PALETTE[i % PALETTE.len()],
            dashed: (i / PALETTE.len() + i) % 2 == 1,
            marker: (i % 4) as u8,
        }
    }
}

/// One point of a line; `uncertain`: the samples' spread is wider than the effect shown.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    pub uncertain: bool,
}

/// A named line.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<Point>,
}

impl Series {
    /// A series of points none of which is marked uncertain.
    pub fn plain(name: impl Into<String>, points: &[(f64, f64)]) -> Series {
        Series {
            name: name.into(),
            points: points
                .iter()
                .map(|&(x, y)| Point {
                    x,
                    y,
                    uncertain: false,
                })
                .collect(),
        }
    }
}

/// A line figure.
#[derive(Clone, Debug, Default)]
pub struct LineChart<'a> {
    pub title: &'a str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    /// Both axes on a log scale.
    pub log: bool,
    /// The x quantity is an integer: ticks only at the x values of the data, drawn as integers.
    pub integer_x: bool,
    /// How an integer x tick is labelled (default: the number), e.g. "adaptive" for 32.
    pub x_label: Option<fn(f64) -> String>,
    /// A dashed horizontal reference line at this y (e.g. 1.0 for a ratio).
    pub reference_y: Option<f64>,
}

/// One stacked bar; `uncertain`: the samples' spread is wider than the effect the bar shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar<'a> {
    pub label: String,
    pub parts: Vec<(&'a str, f64)>,
    pub uncertain: bool,
}

/// Bars: (label, stacked parts (category, value)); every bar lists the same categories.
pub type Bars<'a> = [Bar<'a>];

const LEGEND_W: u32 = 260;
const UNCERTAIN_NOTE: [&str; 2] = ["hollow / ?: samples spread wider", "than the effect shown"];

fn err_at(path: &Path) -> impl Fn(&dyn std::fmt::Display) -> BenchError + '_ {
    move |e| BenchError::Other(format!("{}: {e}", path.display()))
}

/// Stacked bars, one per label, categories stacked in order; `reference_y` draws a dashed
/// horizontal line (e.g. at 1.0 for a normalised time).
pub fn stacked_bars(
    path: &Path,
    title: &str,
    y_desc: &str,
    bars: &Bars,
    reference_y: Option<f64>,
) -> Result<(), BenchError> {
    let err = err_at(path);
    let top = bars
        .iter()
        .map(|b| b.parts.iter().map(|p| p.1).sum::<f64>())
        .fold(reference_y.unwrap_or(0.0), f64::max);
    let ymax = top.max(1e-9) * 1.15;
    let width = (140 + 80 * bars.len() as u32 + LEGEND_W).clamp(1100, 2600);
    let root = SVGBackend::new(path, (width, 580)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (plot_area, legend_area) = root.split_horizontally(width - LEGEND_W);
    let n = bars.len().max(1);
    let names: Vec<String> = bars
        .iter()
        .map(|b| {
            if b.uncertain {
                format!("{} ?", b.label)
            } else {
                b.label.clone()
            }
        })
        .collect();
    let centres: Vec<f64> = (0..n).map(|i| i as f64 + 0.5).collect();
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(70)
        .build_cartesian_2d(
            Ticks {
                inner: RangedCoordf64::from(0f64..n as f64),
                ticks: centres,
            },
            0f64..ymax,
        )
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_desc)
        .x_label_formatter(&|v| {
            let i = v.floor() as usize;
            names.get(i).cloned().unwrap_or_default()
        })
        .x_label_style(("sans-serif", 12).into_font())
        .draw()
        .map_err(|e| err(&e))?;
    let cats: Vec<&str> = bars
        .first()
        .map(|b| b.parts.iter().map(|p| p.0).collect())
        .unwrap_or_default();
    for ci in 0..cats.len() {
        let c = SeriesStyle::of(ci).colour;
        let rects: Vec<_> = bars
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let below: f64 = b.parts.iter().take(ci).map(|p| p.1).sum();
                let v = b.parts.get(ci).map_or(0.0, |p| p.1);
                let x = i as f64;
                Rectangle::new([(x + 0.12, below), (x + 0.88, below + v)], c.filled())
            })
            .collect();
        chart.draw_series(rects).map_err(|e| err(&e))?;
    }
    if let Some(r) = reference_y {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, r), (n as f64, r)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(|e| err(&e))?;
    }
    let any_uncertain = bars.iter().any(|b| b.uncertain);
    let entries: Vec<(String, SeriesStyle)> = cats
        .iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), SeriesStyle::of(i)))
        .collect();
    legend(&legend_area, &entries, true, any_uncertain).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// One line per series (points sorted by x).
pub fn lines(path: &Path, spec: &LineChart, series: &mut [Series]) -> Result<(), BenchError> {
    let err = err_at(path);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, 0.0f64);
    let mut xs: Vec<f64> = Vec::new();
    for s in series.iter_mut() {
        s.points.sort_by(|a, b| a.x.total_cmp(&b.x));
        for p in &s.points {
            x0 = x0.min(p.x);
            x1 = x1.max(p.x);
            y0 = y0.min(p.y);
            y1 = y1.max(p.y);
            if !xs.contains(&p.x) {
                xs.push(p.x);
            }
        }
    }
    if x0 > x1 {
        return Ok(());
    }
    xs.sort_by(f64::total_cmp);
    if let Some(r) = spec.reference_y {
        y0 = y0.min(r);
        y1 = y1.max(r);
    }
    let root = SVGBackend::new(path, (960 + LEGEND_W, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (plot_area, legend_area) = root.split_horizontally(960);
    let mut builder = ChartBuilder::on(&plot_area);
    builder
        .caption(spec.title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70);
    let any_uncertain = series.iter().any(|s| s.points.iter().any(|p| p.uncertain));
    let int_label = |v: &f64| match spec.x_label {
        Some(f) => f(*v),
        None => format!("{v:.0}"),
    };
    let y_range_log = ((y0 * 0.8).max(1e-9)..(y1 * 1.25).max(1e-9)).log_scale();
    let y_range_lin = 0f64..(y1 * 1.15).max(1e-9);
    let x_hi = if spec.log {
        x1.max(x0 * 2.0)
    } else {
        x1.max(x0 + 1.0)
    };
    match (spec.log, spec.integer_x) {
        (true, true) => draw_lines_on(
            &mut builder,
            Ticks {
                inner: plotters::coord::combinators::LogCoord::<f64>::from(
                    (x0.max(1e-9)..x_hi).log_scale(),
                ),
                ticks: xs,
            },
            y_range_log,
            spec,
            series,
            Some(&int_label),
        ),
        (true, false) => draw_lines_on(
            &mut builder,
            (x0.max(1e-9)..x_hi).log_scale(),
            y_range_log,
            spec,
            series,
            None,
        ),
        (false, true) => {
            let pad = ((x_hi - x0) * 0.04).max(0.2);
            draw_lines_on(
                &mut builder,
                Ticks {
                    inner: RangedCoordf64::from((x0 - pad)..(x_hi + pad)),
                    ticks: xs,
                },
                y_range_lin,
                spec,
                series,
                Some(&int_label),
            )
        }
        (false, false) => draw_lines_on(&mut builder, x0..x_hi, y_range_lin, spec, series, None),
    }
    .map_err(|e| err(&e))?;
    let entries: Vec<(String, SeriesStyle)> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), SeriesStyle::of(i)))
        .collect();
    legend(&legend_area, &entries, false, any_uncertain).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// An axis with ticks exactly at the given values (the data's x values, or the bars'
/// centres), over any f64 axis (linear or log).
struct Ticks<R: Ranged<ValueType = f64>> {
    inner: R,
    ticks: Vec<f64>,
}

impl<R: Ranged<ValueType = f64>> Ranged for Ticks<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;
    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }
    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }
    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult = Result<(), DrawingAreaErrorKind<std::io::Error>>;

fn draw_lines_on<'a, X, Y>(
    builder: &mut ChartBuilder<'_, '_, SVGBackend<'a>>,
    x: X,
    y: Y,
    spec: &LineChart,
    series: &[Series],
    x_fmt: Option<&dyn Fn(&f64) -> String>,
) -> DrawResult
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = builder.build_cartesian_2d(x, y)?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(spec.x_desc).y_desc(spec.y_desc);
    if let Some(f) = x_fmt {
        mesh.x_label_formatter(f).disable_x_mesh();
    }
    mesh.draw()?;
    if let Some(r) = spec.reference_y {
        let (a, b) = (chart.x_range().start, chart.x_range().end);
        chart.draw_series(DashedLineSeries::new(
            [(a, r), (b, r)],
            6,
            4,
            BLACK.stroke_width(1),
        ))?;
    }
    for (i, s) in series.iter().enumerate() {
        let st = SeriesStyle::of(i);
        let line = st.colour.stroke_width(2);
        let pts: Vec<(f64, f64)> = s.points.iter().map(|p| (p.x, p.y)).collect();
        if st.dashed {
            chart.draw_series(DashedLineSeries::new(pts, 8, 5, line))?;
        } else {
            chart.draw_series(LineSeries::new(pts, line))?;
        }
        for p in &s.points {
            draw_marker(chart.plotting_area(), (p.x, p.y), st, !p.uncertain)?;
        }
    }
    Ok(())
}

/// Draw a marker of `st`'s shape at `at` (filled, or hollow for an uncertain value).
fn draw_marker<DB: DrawingBackend, CT: plotters::coord::CoordTranslate>(
    area: &DrawingArea<DB, CT>,
    at: CT::From,
    st: SeriesStyle,
    filled: bool,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    CT::From: Clone,
{
    let style = if filled {
        st.colour.filled()
    } else {
        st.colour.stroke_width(2)
    };
    let at = EmptyElement::at(at);
    match st.marker {
        0 => area.draw(&(at + Circle::new((0, 0), 5, style))),
        1 => area.draw(&(at + TriangleMarker::new((0, 0), 6, style))),
        2 => area.draw(&(at + Rectangle::new([(-4, -4), (4, 4)], style))),
        _ => area.draw(&(at + Polygon::new(vec![(0, -6), (6, 0), (0, 6), (-6, 0)], style))),
    }
}

/// The legend panel: one row per entry (a swatch for bars, a line with its marker for
/// lines), then the note on uncertain values when there are any.
fn legend(
    area: &Area,
    entries: &[(String, SeriesStyle)],
    swatch: bool,
    uncertain: bool,
) -> DrawResult {
    let font = ("sans-serif", 13).into_font();
    let mut y = 40;
    for (name, st) in entries {
        if swatch {
            area.draw(&Rectangle::new(
                [(10, y - 6), (30, y + 6)],
                st.colour.filled(),
            ))?;
        } else {
            let line = st.colour.stroke_width(2);
            if st.dashed {
                area.draw(&PathElement::new(vec![(8, y), (16, y)], line))?;
                area.draw(&PathElement::new(vec![(22, y), (30, y)], line))?;
            } else {
                area.draw(&PathElement::new(vec![(8, y), (32, y)], line))?;
            }
            draw_marker(area, (20, y), *st, true)?;
        }
        area.draw(&Text::new(name.clone(), (40, y - 7), font.clone()))?;
        y += 20;
    }
    if uncertain {
        y += 10;
        for line in UNCERTAIN_NOTE {
            area.draw(&Text::new(line, (10, y - 7), font.clone()))?;
            y += 17;
        }
    }
    Ok(())
}

/// The texts of an SVG file (tick labels, titles, legend entries), trimmed: for tests.
#[cfg(test)]
pub(crate) fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim().to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirteen_series_look_different() {
        let styles: Vec<SeriesStyle> = (0..13).map(SeriesStyle::of).collect();
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
        for i in 0..12 {
            assert_ne!(styles[i].marker, styles[i + 1].marker);
            assert_ne!(styles[i].dashed, styles[i + 1].dashed);
        }
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
        let _ = std::fs::remove_dir_all(&dir);
    }
}
