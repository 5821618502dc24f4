//! JSON: hand-written output for a [`LaunchReport`] (used by the CLI; stable field names) and a
//! small reader for launch spec files ([`read`]).

pub mod read;

use crate::device::LaunchReport;
use crate::findings::{Access, Finding};

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn dims(d: [u32; 3]) -> String {
    format!("[{},{},{}]", d[0], d[1], d[2])
}

fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

fn access(a: &Access) -> String {
    format!(
        "{{\"kind\":{},\"pc\":{},\"line\":{},\"thread\":{},\"block\":{},\"address\":{}}}",
        esc(a.kind.name()),
        a.pc,
        a.line,
        dims(a.thread),
        dims(a.block),
        a.address
    )
}

fn finding(f: &Finding) -> String {
    format!(
        "{{\"kind\":{},\"message\":{},\"pc\":{},\"line\":{},\"thread\":{},\"block\":{},\"address\":{},\"access\":{},\"other\":{},\"count\":{},\"source\":{}}}",
        esc(f.kind.name()),
        esc(&f.message),
        f.pc,
        f.line,
        dims(f.thread),
        dims(f.block),
        f.address.map_or("null".into(), |a| a.to_string()),
        f.access.map_or("null".into(), |a| esc(a.name())),
        f.other.as_ref().map_or("null".into(), access),
        f.count,
        f.source.as_ref().map_or("null".into(), |s| format!(
            "{{\"file\":{},\"line\":{},\"column\":{}}}",
            esc(&s.file),
            s.line,
            s.column
        ))
    )
}

/// The report as one JSON object: `{"findings": [...], "findings_dropped": n, "counters": {...}}`.
pub fn report_json(r: &LaunchReport) -> String {
    let findings: Vec<String> = r.findings.iter().map(finding).collect();
    let c = &r.counters;
    let mut instr: Vec<String> = c
        .instructions
        .fields()
        .iter()
        .map(|(k, v)| format!("{}:{v}", esc(k)))
        .collect();
    instr.push(format!("\"total\":{}", c.instructions.total()));
    format!(
        "{{\"findings\":[{}],\"findings_dropped\":{},\"counters\":{{\"instructions\":{{{}}},\"global_load_requests\":{},\"global_load_sectors\":{},\"global_load_bytes\":{},\"global_load_efficiency\":{},\"global_store_requests\":{},\"global_store_sectors\":{},\"global_store_bytes\":{},\"global_store_efficiency\":{},\"shared_requests\":{},\"shared_wavefronts\":{},\"shared_wavefronts_per_request\":{},\"shared_min_wavefronts\":{},\"shared_bank_conflict_factor\":{},\"barriers\":{},\"barrier_releases\":{},\"mma_instructions\":{},\"mma_flops\":{},\"ldmatrix_requests\":{},\"ldmatrix_wavefronts\":{},\"ldmatrix_wavefronts_per_request\":{},\"ldmatrix_matrices\":{},\"ldmatrix_wavefronts_per_matrix\":{},\"cp_async_requests\":{},\"cp_async_sectors\":{},\"cp_async_bytes\":{},\"cp_async_global_bytes\":{},\"cp_async_shared_wavefronts\":{},\"cp_async_shared_min_wavefronts\":{},\"cp_async_bank_conflict_factor\":{}}}}}",
        findings.join(","),
        r.findings_dropped,
        instr.join(","),
        c.global_load_requests,
        c.global_load_sectors,
        c.global_load_bytes,
        num(c.global_load_efficiency()),
        c.global_store_requests,
        c.global_store_sectors,
        c.global_store_bytes,
        num(c.global_store_efficiency()),
        c.shared_requests,
        c.shared_wavefronts,
        num(c.shared_wavefronts_per_request()),
        c.shared_min_wavefronts,
        num(c.shared_bank_conflict_factor()),
        c.barriers,
        c.barrier_releases,
        c.mma_instructions,
        c.mma_flops,
        c.ldmatrix_requests,
        c.ldmatrix_wavefronts,
        num(c.ldmatrix_wavefronts_per_request()),
        c.ldmatrix_matrices,
        num(c.ldmatrix_wavefronts_per_matrix()),
        c.cp_async_requests,
        c.cp_async_sectors,
        c.cp_async_bytes,
        c.cp_async_global_bytes,
        c.cp_async_shared_wavefronts,
        c.cp_async_shared_min_wavefronts,
        num(c.cp_async_bank_conflict_factor()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(esc("a\"b\\\n"), "\"a\\\"b\\\\\\n\"");
    }
}
