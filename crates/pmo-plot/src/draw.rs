//! The drawing itself, over any plotters back end: the same code draws the SVG and the PNG.

use plotters::coord::ranged1d::{
    AsRangedCoord, DefaultFormatting, KeyPointHint, Ranged, ValueFormatter,
};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::spec::{BarChart, Bars, LineChart, Series, SeriesStyle, UNCERTAIN_NOTE};
use super::ticks::human;

pub(super) type Root<DB> = DrawingArea<DB, Shift>;
pub(super) type Drawn = Result<(), String>;

/// A figure to draw, the same on every back end.
pub(super) enum Figure<'a> {
    Stacked {
        title: &'a str,
        y_desc: &'a str,
        bars: &'a Bars<'a>,
        reference_y: Option<f64>,
    },
    Grouped(&'a BarChart<'a>, &'a [Series]),
    Lines(&'a LineChart<'a>, &'a [Series]),
}

impl Figure<'_> {
    /// Draw into `plot`, the legend into `legend`.
    pub(super) fn draw<DB: DrawingBackend>(&self, plot: &Root<DB>, legend: &Root<DB>) -> Drawn {
        match *self {
            Figure::Stacked {
                title,
                y_desc,
                bars,
                reference_y,
            } => stacked(plot, legend, title, y_desc, bars, reference_y),
            Figure::Grouped(spec, series) => grouped(plot, legend, spec, series),
            Figure::Lines(spec, series) => lines(plot, legend, spec, series),
        }
    }
}

fn s<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// An axis with ticks exactly at the given values (the data's x values, or the bars'
/// centres), over any f64 axis (linear or log).
pub(super) struct Ticks<R: Ranged<ValueType = f64>> {
    pub inner: R,
    pub ticks: Vec<f64>,
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

/// Category `i` of `n` spans `[i, i + 1)` on the x axis; its label sits at `i + 0.5`.
fn category_axis(n: usize) -> Ticks<RangedCoordf64> {
    Ticks {
        inner: RangedCoordf64::from(0f64..n.max(1) as f64),
        ticks: (0..n.max(1)).map(|i| i as f64 + 0.5).collect(),
    }
}

fn category_label(names: &[String]) -> impl Fn(&f64) -> String + '_ {
    move |v| names.get(v.floor() as usize).cloned().unwrap_or_default()
}

/// The top of a stacked chart's linear axis when one bar dwarfs the others (more than 4x the
/// next tallest, with at least three bars): 1.6x the next tallest, so the others stay
/// readable; that bar is then cut at the top and labelled with its value. `None`: no cap.
fn off_scale_cap(totals: &[f64], reference_y: Option<f64>) -> Option<f64> {
    let mut t: Vec<f64> = totals.iter().copied().filter(|v| v.is_finite()).collect();
    t.sort_by(f64::total_cmp);
    let (&first, rest) = t.split_last()?;
    let &second = rest.last()?;
    let cap = second.max(reference_y.unwrap_or(0.0)) * 1.6;
    (t.len() >= 3 && second > 0.0 && first > 4.0 * second && cap < first).then_some(cap)
}

/// Stacked bars over `plot`, the legend in `legend_area`.
fn stacked<DB: DrawingBackend>(
    plot: &Root<DB>,
    legend_area: &Root<DB>,
    title: &str,
    y_desc: &str,
    bars: &Bars,
    reference_y: Option<f64>,
) -> Drawn {
    let totals: Vec<f64> = bars
        .iter()
        .map(|b| b.parts.iter().map(|p| p.1).sum::<f64>())
        .collect();
    let top = totals
        .iter()
        .copied()
        .fold(reference_y.unwrap_or(0.0), f64::max);
    let ymax = off_scale_cap(&totals, reference_y).unwrap_or(top.max(1e-9) * 1.15);
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
    let mut chart = ChartBuilder::on(plot)
        .caption(title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(70)
        .build_cartesian_2d(category_axis(n), 0f64..ymax)
        .map_err(s)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_desc)
        .x_label_formatter(&category_label(&names))
        .y_label_formatter(&|v| human(*v))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .x_label_style(("sans-serif", 12).into_font())
        .draw()
        .map_err(s)?;
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
                let (y0, y1) = (below.min(ymax), (below + v).min(ymax));
                Rectangle::new([(x + 0.12, y0), (x + 0.88, y1)], c.filled())
            })
            .collect();
        chart.draw_series(rects).map_err(s)?;
    }
    // A bar cut at the top of the axis says so, with its value.
    let cut = totals.iter().enumerate().filter(|(_, t)| **t > ymax);
    // Inside the bar, just below the axis' top (above it would run into the caption).
    let style =
        TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    chart
        .draw_series(cut.map(|(i, t)| {
            Text::new(
                format!("{} (off scale)", human(*t)),
                (i as f64 + 0.5, ymax * 0.98),
                style.clone(),
            )
        }))
        .map_err(s)?;
    if let Some(r) = reference_y {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, r), (n as f64, r)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(s)?;
    }
    let entries: Vec<(String, SeriesStyle)> = cats
        .iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), SeriesStyle::of(i)))
        .collect();
    let uncertain = bars.iter().any(|b| b.uncertain);
    legend(legend_area, &entries, true, uncertain)
}

/// Grouped bars: per category a group, per series a bar in every group (x of a point: the
/// category's index).
fn grouped<DB: DrawingBackend>(
    plot: &Root<DB>,
    legend_area: &Root<DB>,
    spec: &BarChart,
    series: &[Series],
) -> Drawn {
    let values = || series.iter().flat_map(|s| s.points.iter().map(|p| p.y));
    let hi = values()
        .fold(spec.reference_y.unwrap_or(0.0), f64::max)
        .max(1e-9);
    let mut builder = ChartBuilder::on(plot);
    builder
        .caption(spec.title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(55)
        .y_label_area_size(70);
    let x = category_axis(spec.categories.len());
    if spec.log_y {
        let lo = values()
            .filter(|v| *v > 0.0)
            .fold(f64::MAX, f64::min)
            .min(hi);
        // Bars start a decade below the smallest one, so every bar has a visible height.
        let bottom = 10f64.powf((lo * 0.5).log10().floor());
        grouped_on(
            &mut builder,
            x,
            (bottom..hi * 2.0).log_scale(),
            spec,
            series,
        )?;
    } else {
        grouped_on(&mut builder, x, 0f64..hi * 1.15, spec, series)?;
    }
    let entries: Vec<(String, SeriesStyle)> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), SeriesStyle::of(i)))
        .collect();
    let uncertain = series.iter().any(|s| s.points.iter().any(|p| p.uncertain));
    legend(legend_area, &entries, true, uncertain)
}

fn grouped_on<DB: DrawingBackend, Y: AsRangedCoord<Value = f64>>(
    builder: &mut ChartBuilder<'_, '_, DB>,
    x: Ticks<RangedCoordf64>,
    y: Y,
    spec: &BarChart,
    series: &[Series],
) -> Drawn
where
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = builder.build_cartesian_2d(x, y).map_err(s)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(spec.x_desc)
        .y_desc(spec.y_desc)
        .x_label_formatter(&category_label(&spec.categories))
        .y_label_formatter(&|v| human(*v))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .x_label_style(("sans-serif", 14).into_font())
        .draw()
        .map_err(s)?;
    let bottom = chart.y_range().start;
    let m = series.len().max(1) as f64;
    let w = 0.8 / m;
    for (j, ser) in series.iter().enumerate() {
        let st = SeriesStyle::of(j);
        let rects: Vec<_> = ser
            .points
            .iter()
            .filter(|p| p.x >= 0.0 && (p.x as usize) < spec.categories.len())
            .map(|p| {
                let x0 = p.x.floor() + 0.1 + j as f64 * w;
                let style = if p.uncertain {
                    st.colour.stroke_width(2)
                } else {
                    st.colour.filled()
                };
                Rectangle::new([(x0 + w * 0.06, bottom), (x0 + w * 0.94, p.y)], style)
            })
            .collect();
        chart.draw_series(rects).map_err(s)?;
    }
    if let Some(r) = spec.reference_y {
        let n = spec.categories.len() as f64;
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, r), (n, r)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(s)?;
    }
    Ok(())
}

/// Lines over `plot`, the legend in `legend_area`; the series' points are sorted by x.
fn lines<DB: DrawingBackend>(
    plot: &Root<DB>,
    legend_area: &Root<DB>,
    spec: &LineChart,
    series: &[Series],
) -> Drawn {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, 0.0f64);
    let mut xs: Vec<f64> = Vec::new();
    for p in series.iter().flat_map(|s| &s.points) {
        x0 = x0.min(p.x);
        x1 = x1.max(p.x);
        y0 = y0.min(p.y);
        y1 = y1.max(p.y);
        if !xs.contains(&p.x) {
            xs.push(p.x);
        }
    }
    xs.sort_by(f64::total_cmp);
    if let Some(r) = spec.reference_y {
        y0 = y0.min(r);
        y1 = y1.max(r);
    }
    let mut builder = ChartBuilder::on(plot);
    builder
        .caption(spec.title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70);
    let int_label = |v: &f64| match spec.x_label {
        Some(f) => f(*v),
        None => human(*v),
    };
    let num_label = |v: &f64| human(*v);
    let y_range_log = ((y0 * 0.8).max(1e-9)..(y1 * 1.25).max(1e-9)).log_scale();
    let y_range_lin = if spec.fit_y && y1 > y0 {
        let pad = (y1 - y0) * 0.08;
        (y0 - pad)..(y1 + pad)
    } else if spec.fit_y {
        (y0 - 0.5)..(y1 + 0.5)
    } else {
        0f64..(y1 * 1.15).max(1e-9)
    };
    let x_hi = if spec.log || spec.log_x {
        x1.max(x0 * 2.0)
    } else {
        x1.max(x0 + 1.0)
    };
    match (spec.log, spec.integer_x) {
        (false, false) if spec.log_x => lines_on(
            &mut builder,
            (x0.max(1e-9)..x_hi).log_scale(),
            y_range_lin,
            spec,
            series,
            &num_label,
            false,
        ),
        (true, true) => lines_on(
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
            &int_label,
            true,
        ),
        (false, true) if spec.log_x => lines_on(
            &mut builder,
            Ticks {
                inner: plotters::coord::combinators::LogCoord::<f64>::from(
                    (x0.max(1e-9) / 1.15..x_hi * 1.15).log_scale(),
                ),
                ticks: xs,
            },
            y_range_lin,
            spec,
            series,
            &int_label,
            true,
        ),
        (true, false) => lines_on(
            &mut builder,
            (x0.max(1e-9)..x_hi).log_scale(),
            y_range_log,
            spec,
            series,
            &num_label,
            false,
        ),
        (false, true) => {
            let pad = ((x_hi - x0) * 0.04).max(0.2);
            lines_on(
                &mut builder,
                Ticks {
                    inner: RangedCoordf64::from((x0 - pad)..(x_hi + pad)),
                    ticks: xs,
                },
                y_range_lin,
                spec,
                series,
                &int_label,
                true,
            )
        }
        (false, false) => lines_on(
            &mut builder,
            x0..x_hi,
            y_range_lin,
            spec,
            series,
            &num_label,
            false,
        ),
    }?;
    let entries: Vec<(String, SeriesStyle)> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), spec.style(i)))
        .collect();
    let uncertain = series.iter().any(|s| s.points.iter().any(|p| p.uncertain));
    legend(legend_area, &entries, false, uncertain)
}

fn lines_on<DB: DrawingBackend, X, Y>(
    builder: &mut ChartBuilder<'_, '_, DB>,
    x: X,
    y: Y,
    spec: &LineChart,
    series: &[Series],
    x_fmt: &dyn Fn(&f64) -> String,
    only_data_x: bool,
) -> Drawn
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = builder.build_cartesian_2d(x, y).map_err(s)?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(spec.x_desc)
        .y_desc(spec.y_desc)
        .x_label_formatter(x_fmt)
        .y_label_formatter(&|v| human(*v))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15));
    if only_data_x {
        mesh.disable_x_mesh();
    }
    mesh.draw().map_err(s)?;
    if let Some(r) = spec.reference_y {
        let (a, b) = (chart.x_range().start, chart.x_range().end);
        chart
            .draw_series(DashedLineSeries::new(
                [(a, r), (b, r)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(s)?;
    }
    for (i, ser) in series.iter().enumerate() {
        let st = spec.style(i);
        let line = st.colour.stroke_width(2);
        let pts: Vec<(f64, f64)> = ser.points.iter().map(|p| (p.x, p.y)).collect();
        if st.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts, 8, 5, line))
                .map_err(s)?;
        } else {
            chart.draw_series(LineSeries::new(pts, line)).map_err(s)?;
        }
        for p in &ser.points {
            marker(chart.plotting_area(), (p.x, p.y), st, !p.uncertain).map_err(s)?;
        }
    }
    Ok(())
}

/// Draw a marker of `st`'s shape at `at` (filled, or hollow for an uncertain value).
fn marker<DB: DrawingBackend, CT: plotters::coord::CoordTranslate>(
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
fn legend<DB: DrawingBackend>(
    area: &Root<DB>,
    entries: &[(String, SeriesStyle)],
    swatch: bool,
    uncertain: bool,
) -> Drawn {
    let font = ("sans-serif", 13).into_font();
    let mut y = 40;
    for (name, st) in entries {
        if swatch {
            area.draw(&Rectangle::new(
                [(10, y - 6), (30, y + 6)],
                st.colour.filled(),
            ))
            .map_err(s)?;
        } else {
            let line = st.colour.stroke_width(2);
            if st.dashed {
                area.draw(&PathElement::new(vec![(8, y), (16, y)], line))
                    .map_err(s)?;
                area.draw(&PathElement::new(vec![(22, y), (30, y)], line))
                    .map_err(s)?;
            } else {
                area.draw(&PathElement::new(vec![(8, y), (32, y)], line))
                    .map_err(s)?;
            }
            marker(area, (20, y), *st, true).map_err(s)?;
        }
        area.draw(&Text::new(name.clone(), (40, y - 7), font.clone()))
            .map_err(s)?;
        y += 20;
    }
    if uncertain {
        y += 10;
        for line in UNCERTAIN_NOTE {
            area.draw(&Text::new(line, (10, y - 7), font.clone()))
                .map_err(s)?;
            y += 17;
        }
    }
    Ok(())
}
