//! What a figure shows: its series, bars, axes and styles (drawn by `draw`, written by the
//! module above).

use plotters::style::RGBColor;

/// Sixteen colours that stay apart from each other on white (and for the common forms of
/// colour blindness, together with the markers and line styles of [`SeriesStyle`]).
pub const PALETTE: [RGBColor; 16] = [
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
    RGBColor(0, 200, 220),   // cyan
    RGBColor(140, 86, 40),   // brown
    RGBColor(110, 190, 60),  // light green
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
    /// their own periods, so two series that share a colour (beyond 16) still differ.
    pub fn of(i: usize) -> SeriesStyle {
        SeriesStyle {
            colour: PALETTE[i % PALETTE.len()],
            dashed: (i / PALETTE.len() + i) % 2 == 1,
            marker: (i % 4) as u8,
        }
    }

    /// The style of series `i` when series come in pairs of one subject (a workload under two
    /// schemes, [`LineChart::paired`]): a pair shares its colour, its first line is solid with
    /// circles, its second dashed with triangles.
    pub fn paired(i: usize) -> SeriesStyle {
        SeriesStyle {
            colour: PALETTE[(i / 2) % PALETTE.len()],
            dashed: i % 2 == 1,
            marker: (i % 2) as u8,
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
    /// Only the x axis on a log scale (a latency CDF: latencies span decades, fractions do
    /// not; buffer sizes that double); ignored with `log`.
    pub log_x: bool,
    /// The x quantity is an integer: ticks only at the x values of the data, drawn as integers.
    pub integer_x: bool,
    /// How an integer x tick is labelled (default: the number), e.g. "adaptive" for 32.
    pub x_label: Option<fn(f64) -> String>,
    /// A dashed horizontal reference line at this y (e.g. 1.0 for a ratio).
    pub reference_y: Option<f64>,
    /// A linear y axis spans the data (and `reference_y`), padded, instead of starting at 0:
    /// for ratios near 1 whose differences are the point (a line, unlike a bar, needs no 0).
    pub fit_y: bool,
    /// Series come in pairs of one subject (series 2k and 2k+1): styles from
    /// [`SeriesStyle::paired`] instead of [`SeriesStyle::of`].
    pub paired: bool,
}

impl LineChart<'_> {
    /// How series `i` of this figure is drawn.
    pub fn style(&self, i: usize) -> SeriesStyle {
        if self.paired {
            SeriesStyle::paired(i)
        } else {
            SeriesStyle::of(i)
        }
    }
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

/// A grouped-bar figure: the x axis is a category (YCSB workloads, schemes, PMO sizes), one
/// group of bars per category, one bar per series in every group.
#[derive(Clone, Debug, Default)]
pub struct BarChart<'a> {
    pub title: &'a str,
    pub x_desc: &'a str,
    /// Quantity, unit and statistic, e.g. "throughput (ops/s, median of 3)".
    pub y_desc: &'a str,
    /// The categories, left to right; a point's `x` is its category's index.
    pub categories: Vec<String>,
    /// A log-scale y axis (values spanning decades).
    pub log_y: bool,
    /// A dashed horizontal reference line at this y (e.g. 1.0 for a ratio).
    pub reference_y: Option<f64>,
}

pub(super) const UNCERTAIN_NOTE: [&str; 2] =
    ["hollow / ?: samples spread wider", "than the effect shown"];
