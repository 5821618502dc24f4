//! One table row per peer kernel, and its Markdown rendering.

/// What one peer kernel did in this run. Text cells say what happened, including why a step
/// did not happen; the counter cells are `None` when the kernel did not run (or, for the
/// efficiencies, when it issued no request of that kind).
#[derive(Debug, Clone, PartialEq)]
pub struct PeerRow {
    /// `crate version`, e.g. `oxicuda-ptx 0.5.5`.
    pub krate: String,
    /// The `.entry` name.
    pub kernel: String,
    pub shape: String,
    /// `yes (N regs)`, `no: <ptxas error>`, or `not checked (…)`.
    pub assembles: String,
    /// `yes`, or `no: <interpreter error>` (an unsupported instruction, a parse error, …).
    pub interpreter_runs: String,
    /// `none`, or the findings by kind with their PTX line.
    pub findings: String,
    /// `yes (…)`, `no: …`, `semantics unknown: …`, or `not run`.
    pub matches_reference: String,
    /// Dynamic thread-instructions ÷ output elements.
    pub instr_per_output: Option<f64>,
    /// Output elements (the denominator above).
    pub outputs: Option<u64>,
    pub load_efficiency: Option<f64>,
    pub store_efficiency: Option<f64>,
    /// Ordinary shared requests' wavefronts ÷ the fewest they could take (1.00 = no bank
    /// conflicts, whatever the access width).
    pub smem_conflict_factor: Option<f64>,
    /// Input adaptations and other measured facts.
    pub note: String,
}

pub(crate) fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn num(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "–".to_string(), |v| format!("{v:.digits$}"))
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_string(), |v| format!("{:.0}%", v * 100.0))
}

/// The table, one row per peer kernel, in the order given.
pub fn to_markdown(rows: &[PeerRow]) -> String {
    let mut out = String::from(
        "| crate | kernel | shape | assembles (ptxas sm_80)? | interpreter runs? | findings | \
         matches reference? | instr/output | load eff. | store eff. | smem wf/min | \
         note |\n|---|---|---|---|---|---|---|---:|---:|---:|---:|---|\n",
    );
    for r in rows {
        let instr = match (r.instr_per_output, r.outputs) {
            (Some(v), Some(n)) => format!("{v:.1} (÷{n})"),
            _ => "–".to_string(),
        };
        out.push_str(&format!(
            "| {} | `{}` | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            cell(&r.krate),
            cell(&r.kernel),
            cell(&r.shape),
            cell(&r.assembles),
            cell(&r.interpreter_runs),
            cell(&r.findings),
            cell(&r.matches_reference),
            instr,
            pct(r.load_efficiency),
            pct(r.store_efficiency),
            num(r.smem_conflict_factor, 2),
            cell(&r.note),
        ));
    }
    out
}
