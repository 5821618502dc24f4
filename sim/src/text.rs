//! The sanitizer-style human report (`ptxforge-sim run --report text`): one block per finding,
//! in the layout compute-sanitizer users know, then an error summary and the main counters.

use std::fmt::Write;

use crate::device::LaunchReport;
use crate::findings::{Access, Finding};

const BAR: &str = "=========";

fn dims(d: [u32; 3]) -> String {
    format!("({},{},{})", d[0], d[1], d[2])
}

fn location(pc: usize, line: usize) -> String {
    format!("PTX line {line} (instruction {pc})")
}

fn finding(out: &mut String, entry: &str, f: &Finding) {
    let _ = writeln!(out, "{BAR} {}: {}", f.kind.name(), f.message);
    let _ = writeln!(out, "{BAR}     at {} in {entry}", location(f.pc, f.line));
    if let Some(src) = &f.source {
        let _ = writeln!(out, "{BAR}     source {src}");
    }
    let _ = writeln!(
        out,
        "{BAR}     by thread {} in block {}",
        dims(f.thread),
        dims(f.block)
    );
    if let Some(a) = f.address {
        let what = f
            .access
            .map_or(String::new(), |k| format!(" ({})", k.name()));
        let _ = writeln!(out, "{BAR}     address 0x{a:x}{what}");
    }
    if let Some(o) = &f.other {
        other(out, o);
    }
    if f.count > 1 {
        let _ = writeln!(out, "{BAR}     {} occurrences in all", f.count);
    }
    let _ = writeln!(out, "{BAR}");
}

fn other(out: &mut String, o: &Access) {
    let _ = writeln!(
        out,
        "{BAR}     conflicting {} by thread {} in block {} at {}, address 0x{:x}",
        o.kind.name(),
        dims(o.thread),
        dims(o.block),
        location(o.pc, o.line),
        o.address
    );
}

/// The report of a launch of `entry` as text.
pub fn report_text(entry: &str, r: &LaunchReport) -> String {
    let mut out = format!("{BAR} PTXFORGE-SIM\n");
    for f in &r.findings {
        finding(&mut out, entry, f);
    }
    let errors = r.findings.iter().map(|f| f.count).sum::<u64>() + r.findings_dropped;
    let _ = write!(
        out,
        "{BAR} ERROR SUMMARY: {errors} error{} ({} distinct",
        if errors == 1 { "" } else { "s" },
        r.findings.len()
    );
    if r.findings_dropped > 0 {
        let _ = write!(out, ", {} more not kept", r.findings_dropped);
    }
    let c = &r.counters;
    let _ = writeln!(
        out,
        ")\n{BAR} {} instructions, {} global load / {} store requests, {} shared requests, {} barriers",
        c.instructions.total(),
        c.global_load_requests,
        c.global_store_requests,
        c.shared_requests,
        c.barriers
    );
    out
}
