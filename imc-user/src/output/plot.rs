//! `imc report --plot OUT.svg`: bandwidth over time, stacked by the run's top groups (the
//! largest at the bottom, in the strongest colour), everything else in grey on top, bursts as
//! shaded bands labelled with their first culprit. The y axis is in the source's unit: bytes/s
//! (with a binary prefix) for memory controllers, the events per second for stand-ins.
use crate::attribution::timeline::{Point, Timeline, Unit};
use crate::model::result::BurstRow;
use crate::output::report::CommandReport;
use crate::text::binary_prefix;
use plotters::prelude::*;
use std::path::Path;

const SIZE: (u32, u32) = (1200, 600);
/// More intervals than this are averaged in buckets: an SVG of a day at 100 ms would not open.
const MAX_POINTS: usize = 1000;

/// Strong colours for the top groups, in order; the rest is grey.
const COLOURS: [RGBColor; 8] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];
const REST: RGBColor = RGBColor(190, 190, 190);
const BURST: RGBColor = RGBColor(255, 236, 150);

/// The fill colour of group `i` (tests look for it in the SVG).
pub fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// Averages runs of adjacent intervals so that at most `max` remain (time-weighted).
fn resample(points: &[Point], max: usize) -> Vec<Point> {
    if points.len() <= max || max == 0 {
        return points.to_vec();
    }
    let per = points.len().div_ceil(max);
    points
        .chunks(per)
        .map(|c| {
            let dt = |p: &Point| p.t_end_ns.saturating_sub(p.t_start_ns) as f64;
            let total: f64 = c.iter().map(dt).sum::<f64>().max(1.0);
            let avg =
                |f: &dyn Fn(&Point) -> f64| c.iter().map(|p| f(p) * dt(p)).sum::<f64>() / total;
            let n = c[0].groups.len();
            Point {
                t_start_ns: c[0].t_start_ns,
                t_end_ns: c[c.len() - 1].t_end_ns,
                packages: Vec::new(),
                groups: (0..n).map(|i| avg(&|p: &Point| p.groups[i])).collect(),
                rest: avg(&|p: &Point| p.rest),
            }
        })
        .collect()
}

/// The y scale: values are divided by `div` and the axis says `label`.
fn scale(unit: &Unit, peak: f64) -> (f64, String) {
    match unit {
        Unit::Bytes => {
            let (scaled, prefix) = binary_prefix(peak);
            let div = if scaled > 0.0 { peak / scaled } else { 1.0 };
            (div, format!("{prefix}B/s"))
        }
        Unit::Counts(_) => (1.0, unit.per_s()),
    }
}

/// Draws the plot into an SVG string.
pub fn svg(tl: &Timeline, bursts: &[BurstRow], title: &str) -> Result<String, String> {
    svg_with(tl, bursts, title, None)
}

/// [`svg`], with the recorded command's rate drawn as a black line over the bands.
pub fn svg_with(
    tl: &Timeline,
    bursts: &[BurstRow],
    title: &str,
    command: Option<&CommandReport>,
) -> Result<String, String> {
    let mut out = String::new();
    draw(tl, bursts, title, command, &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// The command's rate per interval as (start, end, per second), averaged in runs of adjacent
/// intervals so that at most `max` remain.
fn command_steps(c: &CommandReport, max: usize) -> Vec<(u64, u64, f64)> {
    let per = c.per_interval.len().div_ceil(max.max(1)).max(1);
    c.per_interval
        .chunks(per)
        .map(|run| {
            let (t0, t1) = (run[0].t_start_ns, run[run.len() - 1].t_end_ns);
            let secs: f64 = run
                .iter()
                .map(|s| s.t_end_ns.saturating_sub(s.t_start_ns) as f64 / 1e9)
                .sum();
            let traffic: f64 = run.iter().map(|s| s.traffic).sum();
            (t0, t1, if secs > 0.0 { traffic / secs } else { 0.0 })
        })
        .collect()
}

/// A label cut to `n` characters, with an ellipsis when cut.
fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Axis numbers: 1.5k, 2M for counts; one decimal for scaled bytes.
fn tick_label(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Bursts listed in the side panel (all are shaded).
const LISTED_BURSTS: usize = 10;
const PANEL: u32 = 330;

fn draw(
    tl: &Timeline,
    bursts: &[BurstRow],
    title: &str,
    command: Option<&CommandReport>,
    out: &mut String,
) -> Result<(), Box<dyn std::error::Error>> {
    let points = resample(&tl.points, MAX_POINTS);
    let t0 = points.first().map_or(0, |p| p.t_start_ns);
    let x_of = |t: u64| t.saturating_sub(t0) as f64 / 1e9;
    let x_max = points.last().map_or(1.0, |p| x_of(p.t_end_ns)).max(1e-3);
    let (div, unit_label) = scale(&tl.unit, tl.peak());
    let y_max = (tl.peak() / div * 1.08).max(1e-9);

    let root = SVGBackend::with_string(out, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let (left, panel) = root.split_horizontally(SIZE.0 - PANEL);
    let mut chart = ChartBuilder::on(&left)
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the start of the recording")
        .y_desc(unit_label)
        .y_label_formatter(&|v| tick_label(*v))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;

    // Bursts behind the traffic: a numbered band over the whole height.
    for b in bursts {
        let (x0, x1) = (x_of(b.t_start_ns), x_of(b.t_end_ns));
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x0, 0.0), (x1, y_max)],
            BURST.filled(),
        )))?;
    }
    // Stacked bands, the largest group at the bottom; the rest on top.
    let n = tl.groups.len();
    for k in 0..=n {
        let fill = if k < n { colour(k) } else { REST };
        let outline = band_outline(&points, k, div, x_of);
        chart.draw_series(std::iter::once(Polygon::new(outline, fill.filled())))?;
    }
    if let Some(c) = command {
        let mut line = Vec::new();
        for (a, b, rate) in command_steps(c, MAX_POINTS) {
            line.push((x_of(a), rate / div));
            line.push((x_of(b), rate / div));
        }
        chart.draw_series(LineSeries::new(line, BLACK.stroke_width(2)))?;
    }
    for (i, b) in bursts.iter().enumerate().take(LISTED_BURSTS) {
        chart.draw_series(std::iter::once(Text::new(
            format!("{}", i + 1),
            (x_of(b.t_start_ns), y_max * 0.99),
            ("sans-serif", 13).into_font().color(&BLACK),
        )))?;
    }
    let legend = command.map(|c| {
        format!(
            "command (pid {}) {:.1}%",
            c.pid,
            c.share_of_total.unwrap_or(0.0) * 100.0
        )
    });
    draw_panel(&panel, tl, bursts, t0, legend)?;
    root.present()?;
    Ok(())
}

/// The outline of band `k` of a stacked chart: group k spans from the sum of groups 0..k to
/// the sum of groups 0..=k (band `n` is the rest, on top), each point a step of its interval.
fn band_outline(
    points: &[Point],
    k: usize,
    div: f64,
    x_of: impl Fn(u64) -> f64,
) -> Vec<(f64, f64)> {
    let level = |p: &Point, k: usize| -> f64 {
        (p.groups[..k.min(p.groups.len())].iter().sum::<f64>()
            + if k > p.groups.len() { p.rest } else { 0.0 })
            / div
    };
    let mut outline: Vec<(f64, f64)> = Vec::with_capacity(points.len() * 4);
    for p in points {
        let v = level(p, k + 1);
        outline.push((x_of(p.t_start_ns), v));
        outline.push((x_of(p.t_end_ns), v));
    }
    for p in points.iter().rev() {
        let v = level(p, k);
        outline.push((x_of(p.t_end_ns), v));
        outline.push((x_of(p.t_start_ns), v));
    }
    outline
}

/// The side panel: the legend (largest first) and the bursts with their first culprits.
fn draw_panel<DB: DrawingBackend>(
    panel: &DrawingArea<DB, plotters::coord::Shift>,
    tl: &Timeline,
    bursts: &[BurstRow],
    t0: u64,
    command: Option<String>,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let font = ("sans-serif", 14).into_font();
    let bold = ("sans-serif", 14).into_font().style(FontStyle::Bold);
    let mut y = 20;
    let by = tl.by.name();
    panel.draw(&Text::new(
        format!("top by {by} (share)"),
        (10, y),
        bold.clone(),
    ))?;
    y += 22;
    let entry = |fill: RGBColor, label: String, y: i32| -> Result<(), Box<dyn std::error::Error>> {
        panel.draw(&Rectangle::new([(10, y), (24, y + 12)], fill.filled()))?;
        panel.draw(&Text::new(clip(&label, 40), (32, y), font.clone()))?;
        Ok(())
    };
    for (i, g) in tl.groups.iter().enumerate() {
        entry(colour(i), format!("{} {:.1}%", g.label, g.share * 100.0), y)?;
        y += 20;
    }
    entry(REST, "others and unattributed (device/unseen)".into(), y)?;
    if let Some(label) = command {
        y += 20;
        // A line, not a band: the command's rate over the stack.
        panel.draw(&Rectangle::new([(10, y + 5), (24, y + 7)], BLACK.filled()))?;
        panel.draw(&Text::new(clip(&label, 40), (32, y), font.clone()))?;
    }
    y += 34;
    if bursts.is_empty() {
        panel.draw(&Text::new("no bursts", (10, y), bold))?;
        return Ok(());
    }
    panel.draw(&Text::new(
        format!("bursts (shaded): {}", bursts.len()),
        (10, y),
        bold,
    ))?;
    y += 22;
    for (i, b) in bursts.iter().enumerate().take(LISTED_BURSTS) {
        let at = b.t_start_ns.saturating_sub(t0) as f64 / 1e9;
        let who = b.tasks.first().map_or_else(String::new, |r| {
            format!("{} {:.0}%", tl.by.label(r), r.share * 100.0)
        });
        panel.draw(&Text::new(
            clip(&format!("{}  +{at:.1} s  {who}", i + 1), 44),
            (10, y),
            font.clone(),
        ))?;
        y += 18;
    }
    if bursts.len() > LISTED_BURSTS {
        panel.draw(&Text::new(
            format!("… {} more", bursts.len() - LISTED_BURSTS),
            (10, y),
            font,
        ))?;
    }
    Ok(())
}

/// Writes the plot to `path`.
pub fn write(
    path: &Path,
    tl: &Timeline,
    bursts: &[BurstRow],
    title: &str,
    command: Option<&CommandReport>,
) -> std::io::Result<()> {
    let s = svg_with(tl, bursts, title, command).map_err(std::io::Error::other)?;
    crate::sys::file::replace_with(path, s.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::Summary;
    use crate::model::GroupBy;
    use crate::model::result::{IntervalResult, PackageRow, TaskRow};
    use crate::model::{Direction, SlotRole, SlotScope, SlotSpec};

    fn timeline(bytes_per_count: Option<f64>, n: u64) -> Timeline {
        let specs = [SlotSpec {
            event: "page-faults".into(),
            scope: SlotScope::Cpu,
            role: SlotRole::Traffic(Direction::Total),
            bytes_per_count,
            counter_bits: 64,
        }];
        let ivs: Vec<IntervalResult> = (0..n)
            .map(|i| {
                let task = |pid: u32, comm: &str, v: f64| TaskRow {
                    pid,
                    tgid: pid,
                    comm: comm.into(),
                    total_bytes: bytes_per_count.map_or(0, |b| (v * b) as u64),
                    share: 0.4,
                    values: [("page-faults".to_string(), v)].into(),
                    ..TaskRow::default()
                };
                let total = bytes_per_count.map_or(0, |b| (300.0 * b) as u64);
                IntervalResult {
                    t_start_ns: i * 100_000_000,
                    t_end_ns: (i + 1) * 100_000_000,
                    packages: vec![PackageRow {
                        id: 0,
                        total_bytes: total,
                        ..PackageRow::default()
                    }],
                    tasks: vec![task(1, "big", 120.0), task(2, "small", 60.0)],
                    ..IntervalResult::default()
                }
            })
            .collect();
        let mut sum = Summary::new(&specs);
        for iv in &ivs {
            sum.add(iv);
        }
        let mut tl = Timeline::new(&specs, &sum.finish(GroupBy::Comm), GroupBy::Comm, 8);
        for iv in &ivs {
            tl.add(iv);
        }
        tl
    }

    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = t.split_once('>')?.1;
                Some(body.split_once("</text>")?.0.trim().to_owned())
            })
            .collect()
    }

    #[test]
    fn counts_are_labelled_as_counts_and_every_group_has_a_band() {
        let s = svg(&timeline(None, 20), &[], "t").unwrap();
        let t = texts(&s);
        assert!(t.contains(&"page-faults/s".to_string()), "{t:?}");
        assert!(t.iter().all(|l| !l.contains("B/s")), "{t:?}");
        // 120 of the 180 attributed faults, which are 80% of all: 53.3%.
        assert!(t.contains(&"big 53.3%".to_string()), "{t:?}");
        assert!(t.contains(&"no bursts".to_string()), "{t:?}");
        assert_eq!(s.matches("<polygon").count(), 3, "big, small and the rest");
        assert!(s.contains(&format!("fill=\"#{:02X}{:02X}{:02X}\"", 214, 39, 40)));
    }

    #[test]
    fn an_empty_recording_still_draws() {
        let tl = timeline(None, 0);
        assert!(tl.points.is_empty());
        let s = svg(&tl, &[], "empty").unwrap();
        assert!(texts(&s).contains(&"empty".to_string()));
        let t = crate::output::perfetto::trace(&tl, &[]);
        assert!(t.packet.iter().all(|p| !p.has_track_event()));
    }

    #[test]
    fn bytes_get_a_binary_prefix_and_long_runs_are_resampled() {
        // 300 lines of 64 KiB in 100 ms: 187.5 MiB/s.
        let tl = timeline(Some(65536.0), 5000);
        let s = svg(&tl, &[], "t").unwrap();
        assert!(texts(&s).contains(&"MiB/s".to_string()));
        assert_eq!(resample(&tl.points, MAX_POINTS).len(), 1000);
        // Averaging keeps the level.
        let r = resample(&tl.points, 7);
        assert!(
            r.iter()
                .all(|p| (p.groups[0] - tl.points[0].groups[0]).abs() < 1e-6)
        );
        assert_eq!(r.last().unwrap().t_end_ns, 5000 * 100_000_000);
    }
}
