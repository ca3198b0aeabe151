//! `--plot`: an SVG of a report's time series, drawn with plotters: throughput per operation
//! over time above, latency percentiles (p50, p99, p99.9 of each sample) below. The warm-up is
//! left of 0 on the time axis.

use crate::report::Report;
use plotters::prelude::*;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
#[error("cannot draw {path}: {message}")]
pub struct PlotError {
    path: String,
    message: String,
}

pub fn plot(report: &Report, path: &Path) -> Result<(), PlotError> {
    draw(report, path).map_err(|e| PlotError {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

type Series = Vec<(f64, f64)>;

fn draw(report: &Report, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let names: Vec<&String> = report.operations.keys().collect();
    let mut rate: Vec<(String, Series)> = Vec::new();
    let mut lat: Vec<(String, Series)> = Vec::new();
    for name in &names {
        let mut ops = Vec::new();
        let (mut p50, mut p99, mut p999) = (Vec::new(), Vec::new(), Vec::new());
        for iv in &report.intervals {
            let Some(o) = iv.ops.get(*name) else {
                ops.push((iv.t_s, 0.0));
                continue;
            };
            ops.push((iv.t_s, o.ops_per_s));
            if o.ok > 0 {
                p50.push((iv.t_s, o.latency_ms.p50));
                p99.push((iv.t_s, o.latency_ms.p99));
                p999.push((iv.t_s, o.latency_ms.p999));
            }
        }
        rate.push((format!("{name} ops/s"), ops));
        lat.push((format!("{name} p50"), p50));
        lat.push((format!("{name} p99"), p99));
        lat.push((format!("{name} p99.9"), p999));
    }
    let xs = report.intervals.iter().map(|i| i.t_s);
    let x0 = xs.clone().fold(0.0f64, f64::min).min(0.0);
    let x1 = xs.fold(1.0f64, f64::max);
    let ymax = |series: &[(String, Series)]| {
        series
            .iter()
            .flat_map(|(_, s)| s.iter().map(|p| p.1))
            .fold(0.0f64, f64::max)
            .max(1e-3)
            * 1.1
    };
    let w = &report.workload;
    let title = format!(
        "{} · {} · {}",
        w.scenario.as_str(),
        w.endpoints.join(", "),
        w.loop_label()
    );

    let root = SVGBackend::new(path, (1100, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(&title, ("sans-serif", 20))?;
    let (upper, lower) = root.split_vertically(360);
    for (area, series, y_desc) in [
        (&upper, &rate, "operations/s"),
        (&lower, &lat, "latency, ms"),
    ] {
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, 0.0..ymax(series))?;
        chart
            .configure_mesh()
            .x_desc("seconds since the measured window began (warm-up below 0)")
            .y_desc(y_desc)
            .draw()?;
        for (i, (label, points)) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
