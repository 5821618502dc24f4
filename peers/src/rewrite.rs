//! Semantics-preserving rewrites of peer PTX around interpreter limitations, so the rest of a
//! kernel can still be measured. A rewritten kernel is always reported in its own row, next to
//! the row showing what the interpreter said about the original text.

/// Logical predicate instructions whose source operands may be negated (`!%p`).
const LOGICAL_PRED: [&str; 3] = ["and.pred", "or.pred", "xor.pred"];

/// Replaces each negated source operand `!%pN` of `and/or/xor.pred` with a fresh predicate
/// computed just before by `not.pred` (`and.pred d, a, !b` → `not.pred t, b; and.pred d, a,
/// t`), declaring the fresh registers after the body's opening brace. Returns the new text and
/// the number of operands rewritten, or `None` when there is nothing to rewrite.
pub fn negated_pred_operands(ptx: &str) -> Option<(String, usize)> {
    let mut out = String::with_capacity(ptx.len() + 256);
    let mut fresh = 0usize;
    for line in ptx.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let trimmed = code.trim_start();
        let body = match trimmed.strip_prefix('@') {
            // Skip the guard `@%p` / `@!%p`.
            Some(rest) => rest
                .split_once(char::is_whitespace)
                .map_or("", |(_, r)| r.trim_start()),
            None => trimmed,
        };
        let is_logical = LOGICAL_PRED
            .iter()
            .any(|op| body.starts_with(op) && body[op.len()..].starts_with(char::is_whitespace));
        if !is_logical || !body.contains('!') {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        let (opcode, operands) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
        let mut rewritten = Vec::new();
        for (i, operand) in operands.trim_end_matches([';', ' ']).split(',').enumerate() {
            let operand = operand.trim();
            match operand.strip_prefix('!') {
                Some(reg) if i > 0 => {
                    let tmp = format!("%peer_not{fresh}");
                    fresh += 1;
                    out.push_str(&format!("{indent}not.pred {tmp}, {};\n", reg.trim()));
                    rewritten.push(tmp);
                }
                _ => rewritten.push(operand.to_string()),
            }
        }
        let guard = &trimmed[..trimmed.len() - body.len()];
        out.push_str(&format!(
            "{indent}{guard}{opcode} {};\n",
            rewritten.join(", ")
        ));
    }
    if fresh == 0 {
        return None;
    }
    let declaration = format!("    .reg .pred %peer_not<{fresh}>;\n");
    let entry = out.find(".entry")?;
    let at = entry + out[entry..].find("{\n")? + 2;
    out.insert_str(at, &declaration);
    Some((out, fresh))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_negated_sources_only() {
        let ptx =
            ".entry k(\n)\n{\n    .reg .pred %p<4>;\n    and.pred %p2, %p1, !%p0;  // c\n    \
                   @%p1 or.pred %p3, !%p2, %p0;\n    setp.eq.u32 %p1, %r0, 0;\n    ret;\n}\n";
        let (out, n) = negated_pred_operands(ptx).unwrap();
        assert_eq!(n, 2);
        assert!(out.contains("{\n    .reg .pred %peer_not<2>;\n    .reg .pred %p<4>;"));
        assert!(out.contains("    not.pred %peer_not0, %p0;\n    and.pred %p2, %p1, %peer_not0;\n"));
        assert!(
            out.contains("    not.pred %peer_not1, %p2;\n    @%p1 or.pred %p3, %peer_not1, %p0;\n")
        );
        assert!(out.contains("setp.eq.u32 %p1, %r0, 0;"));
        assert_eq!(negated_pred_operands("and.pred %p2, %p1, %p0;\n"), None);
    }
}
