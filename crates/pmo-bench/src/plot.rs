//! Figures of the benchmarks, drawn as SVG with `plotters` (and converted to PNG when
//! `rsvg-convert` is installed): lines (optionally log-log) and stacked bars.

use std::path::{Path, PathBuf};

use plotters::coord::CoordTranslate;
use plotters::prelude::*;

use crate::BenchError;

/// Convert an SVG figure to PNG with `rsvg-convert` when it is installed; the PNG's path.
pub fn to_png(svg: &Path) -> Option<PathBuf> {
    let png = svg.with_extension("png");
    let ok = std::process::Command::new("rsvg-convert")
        .arg(svg)
        .arg("-o")
        .arg(&png)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    ok.then_some(png)
}

/// Bars: (label, stacked parts (category, value)); every bar lists the same categories.
pub type Bars<'a> = [(String, Vec<(&'a str, f64)>)];

/// Stacked bars, one per label, categories stacked in order.
pub fn stacked_bars(path: &Path, title: &str, bars: &Bars) -> Result<(), BenchError> {
    let err = |e: &dyn std::fmt::Display| BenchError::Other(format!("{}: {e}", path.display()));
    let ymax = bars
        .iter()
        .map(|b| b.1.iter().map(|p| p.1).sum::<f64>())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let width = (120 + 70 * bars.len()).clamp(640, 2400) as u32;
    let root = SVGBackend::new(path, (width, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let n = bars.len() as u32;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(60)
        .y_label_area_size(60)
        .build_cartesian_2d((0u32..n).into_segmented(), 0f64..ymax)
        .map_err(|e| err(&e))?;
    let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len().max(1))
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                names.get(*i as usize).cloned().unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .draw()
        .map_err(|e| err(&e))?;
    let colours = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(127, 127, 127),
    ];
    let cats: Vec<&str> = bars
        .first()
        .map(|b| b.1.iter().map(|p| p.0).collect())
        .unwrap_or_default();
    for (ci, cat) in cats.iter().enumerate() {
        let c = colours[ci % colours.len()];
        let rects: Vec<_> = bars
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let below: f64 = b.1.iter().take(ci).map(|p| p.1).sum();
                let v = b.1.get(ci).map_or(0.0, |p| p.1);
                let i = i as u32;
                Rectangle::new(
                    [
                        (SegmentValue::Exact(i), below),
                        (SegmentValue::Exact(i + 1), below + v),
                    ],
                    c.filled(),
                )
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(|e| err(&e))?
            .label(*cat)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// One line per series (points sorted by x); `log` draws both axes on a log scale.
pub fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &mut [(String, Vec<(f64, f64)>)],
    log: bool,
) -> Result<(), BenchError> {
    let err = |e: &dyn std::fmt::Display| BenchError::Other(format!("{}: {e}", path.display()));
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, 0.0f64);
    for (_, v) in series.iter_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        for &(x, y) in v.iter() {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if x0 > x1 {
        return Ok(());
    }
    let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    if log {
        let mut chart = builder
            .build_cartesian_2d(
                (x0.max(1e-9)..x1.max(x0 * 2.0)).log_scale(),
                ((y0 * 0.8).max(1e-9)..(y1 * 1.25).max(1e-9)).log_scale(),
            )
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .draw()
            .map_err(|e| err(&e))?;
        draw_lines(&mut chart, series).map_err(|e| err(&e))?;
    } else {
        let mut chart = builder
            .build_cartesian_2d(x0..x1.max(x0 + 1.0), 0f64..(y1 * 1.15).max(1e-9))
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .draw()
            .map_err(|e| err(&e))?;
        draw_lines(&mut chart, series).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

fn draw_lines<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate<From = (f64, f64)>,
{
    for (i, (name, v)) in series.iter().enumerate() {
        let c = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(v.iter().copied(), c.stroke_width(2)).point_size(3))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
}
