//! ptxforge-peers: kernels of public PTX-generating crates (`oxicuda-ptx`, `aprender-gpu`), run
//! side by side with ptxforge's in ptxforge's interpreter, on the shapes of ptxforge's own
//! benchmark.
//!
//! For every peer kernel, in one run: generate its PTX through the crate's public API
//! ([`generate`]), assemble it with ptxas for sm_80 ([`assemble`]), parse and run it in
//! `ptxforge-sim` with every check on, compare its output with ptxforge's host reference after
//! adapting the inputs to the peer's layout ([`cases`]), and report the interpreter's counters
//! ([`report`]). Nothing here is part of the ptxforge library or of `cargo xtask test`: this
//! package is its own workspace.

pub mod assemble;
pub mod cases;
pub mod generate;
pub mod report;
pub mod rewrite;

use std::collections::BTreeMap;
use std::path::PathBuf;

use ptxforge_sim::{Finding, LaunchReport, Module};

pub use report::{to_markdown, PeerRow};

use cases::{HarnessError, Outcome, Verdict};
use generate::{Case, PeerKernel};

/// Layout adaptations and caveats of each case, stated in the table's note column.
fn adaptation(case: Case) -> &'static str {
    match case {
        Case::MoeGating => "",
        Case::MoePermute => {
            "bins compared as sets (atomic slot order); input = reference gating indices"
        }
        Case::MoeExpertGemm => {
            "ffn = linear (the peer has no SwiGLU); inputs = reference token_ids/counts; output \
             buffer [T, F] as documented"
        }
        Case::MoeUnpermute => {
            "row width F (the peer unpermutes expert_dim rows); inputs = reference Y (permuted \
             layout), gating, token_ids and routed counts as the peer's permute writes them"
        }
        Case::ConvIm2col => "cols [N, C·KH·KW, OH·OW] = ptxforge's layout for N = 1, groups = 1",
        Case::ConvDirect | Case::Conv1x1 => "bias pointer null (no bias)",
        Case::ConvBackwardData | Case::ConvBackwardFilter => "",
        Case::Nf4Forward { .. }
        | Case::Nf4Transposed { .. }
        | Case::Nf4ForwardWmma { .. }
        | Case::Nf4TransposedWmma { .. } => {
            "same block order as ptxforge's W [N, K]; nibbles swapped per byte (peer: element 2j \
             in the low nibble); absmax passed as the separate scales buffer"
        }
    }
}

/// `OutOfBounds ×3 (line 45)`-style summary of a launch's findings.
fn summarize_findings(report: &LaunchReport) -> String {
    if report.findings.is_empty() {
        return "none".to_string();
    }
    let mut by_kind: BTreeMap<&str, (u64, Vec<usize>, Option<&Finding>)> = BTreeMap::new();
    for f in &report.findings {
        let entry = by_kind.entry(f.kind.name()).or_default();
        entry.0 += f.count;
        entry.1.push(f.line);
        entry.2.get_or_insert(f);
    }
    let mut parts: Vec<String> = by_kind
        .into_iter()
        .map(|(kind, (count, mut lines, first))| {
            lines.sort_unstable();
            lines.dedup();
            let lines: Vec<String> = lines.iter().take(4).map(usize::to_string).collect();
            let example = first.map(|f| f.message.as_str()).unwrap_or_default();
            format!("{kind} ×{count} (PTX line {}): {example}", lines.join(", "))
        })
        .collect();
    if report.findings_dropped > 0 {
        parts.push(format!("{} more not kept", report.findings_dropped));
    }
    parts.join("; ")
}

fn verdict_cell(v: &Verdict) -> String {
    match v {
        Verdict::Match {
            worst: Some(worst),
            tolerance,
        } => format!("yes ({tolerance}; worst {worst:.2} of allowance)"),
        Verdict::Match {
            worst: None,
            tolerance,
        } => format!("yes ({tolerance})"),
        Verdict::Mismatch(why) => format!("no: {why}"),
        Verdict::SemanticsUnknown(why) => format!("semantics unknown: {why}"),
    }
}

fn join_note(parts: &[&str]) -> String {
    parts
        .iter()
        .filter(|p| !p.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("; ")
}

/// The rows of one peer kernel: its own, plus — when the interpreter cannot parse the original
/// text and a semantics-preserving rewrite exists — a row for the rewritten text.
fn rows(kernel: &PeerKernel, ptxas: Option<&PathBuf>) -> Vec<PeerRow> {
    let ptx = match &kernel.ptx {
        Ok(p) => p,
        Err(e) => {
            return vec![PeerRow {
                assembles: "–".to_string(),
                interpreter_runs: format!("no: the generator failed: {e}"),
                note: format!("`{}`", kernel.generator),
                ..empty_row(kernel)
            }]
        }
    };
    let original = row(kernel, ptx, ptxas, None);
    let mut out = vec![original];
    if out[0].interpreter_runs.starts_with("no:") {
        if let Some((text, sites)) = rewrite::negated_pred_operands(ptx) {
            let how = format!(
                "PTX rewritten before running: `and/or.pred d, a, !b` → `not.pred t, b; and/or.pred \
                 d, a, t` at {sites} site(s), same semantics; the row above is the original text"
            );
            let mut r = row(kernel, &text, ptxas, Some(how));
            r.kernel = format!("{} (rewritten)", kernel.entry);
            out.push(r);
        }
    }
    out
}

fn empty_row(kernel: &PeerKernel) -> PeerRow {
    PeerRow {
        krate: kernel.peer.crate_name().to_string(),
        kernel: kernel.entry.clone(),
        shape: kernel.shape.clone(),
        assembles: String::new(),
        interpreter_runs: String::new(),
        findings: "–".to_string(),
        matches_reference: "not run".to_string(),
        instr_per_output: None,
        outputs: None,
        load_efficiency: None,
        store_efficiency: None,
        smem_conflict_factor: None,
        note: String::new(),
    }
}

fn row(
    kernel: &PeerKernel,
    ptx: &str,
    ptxas: Option<&PathBuf>,
    rewrite: Option<String>,
) -> PeerRow {
    let mut row = empty_row(kernel);
    row.assembles = assemble::check(ptxas, ptx);
    let outcome: Result<Outcome, HarnessError> = Module::parse(ptx)
        .map_err(HarnessError::from)
        .and_then(|module| cases::run(kernel.case, &module, &kernel.entry));
    let launch_note;
    match outcome {
        Err(HarnessError::Sim(e)) => {
            let limitation = if row.assembles.starts_with("yes") {
                " (ptxas accepts this PTX: an interpreter limitation)"
            } else {
                ""
            };
            row.interpreter_runs = format!("no: {e}{limitation}");
            launch_note = String::new();
        }
        Err(e @ HarnessError::Reference(_)) => {
            row.interpreter_runs = "not run".to_string();
            row.matches_reference = format!("harness error: {e}");
            launch_note = String::new();
        }
        Ok(o) => {
            let c = &o.report.counters;
            row.interpreter_runs = "yes".to_string();
            row.findings = summarize_findings(&o.report);
            row.matches_reference = verdict_cell(&o.verdict);
            row.outputs = Some(o.outputs);
            row.instr_per_output = Some(c.instructions.total() as f64 / o.outputs.max(1) as f64);
            row.load_efficiency = (c.global_load_requests + c.cp_async_requests > 0)
                .then(|| c.global_load_efficiency());
            row.store_efficiency =
                (c.global_store_requests > 0).then(|| c.global_store_efficiency());
            row.smem_conflict_factor =
                (c.shared_requests > 0).then(|| c.shared_bank_conflict_factor());
            launch_note = std::iter::once(o.launch)
                .chain(o.observations)
                .collect::<Vec<_>>()
                .join("; ");
        }
    }
    row.note = join_note(&[
        rewrite.as_deref().unwrap_or_default(),
        &format!("`{}`", kernel.generator),
        &launch_note,
        adaptation(kernel.case),
    ]);
    row
}

/// Every peer kernel, generated, assembled, run and compared now.
pub fn peer_rows() -> Vec<PeerRow> {
    let ptxas = assemble::locate();
    generate::all()
        .iter()
        .flat_map(|k| rows(k, ptxas.as_ref()))
        .collect()
}

/// The assembly survey as a Markdown table: every oxicuda-ptx MoE and conv generator for f16,
/// f32 and f64, with whether ptxas (sm_80) assembles it and whether the interpreter parses it.
/// Only the f32 kernels are run (the main table).
pub fn survey_markdown() -> String {
    let ptxas = assemble::locate();
    let mut out = String::from(
        "| generator (oxicuda-ptx 0.5.5) | dtype | assembles (ptxas sm_80)? | interpreter parses? |\n\
         |---|---|---|---|\n",
    );
    for item in generate::survey() {
        let (asm, parses) = match &item.ptx {
            Err(e) => ("–".to_string(), format!("generator failed: {e}")),
            Ok(ptx) => (
                assemble::check(ptxas.as_ref(), ptx),
                match Module::parse(ptx) {
                    Ok(_) => "yes".to_string(),
                    Err(e) => format!("no: {e}"),
                },
            ),
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            item.generator,
            item.dtype,
            report::cell(&asm),
            report::cell(&parses)
        ));
    }
    out
}
