//! "Did you mean …?" for unknown argument keys and value names: an edit distance (optimal string
//! alignment, so a swapped pair of letters costs one) plus containment for prefixed or
//! abbreviated spellings (`num_experts`, `in_ch`).

/// Optimal-string-alignment distance between `a` and `b`, ignoring ASCII case: insertions,
/// deletions, substitutions and transpositions of adjacent characters each cost one.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().map(|c| c.to_ascii_lowercase()).collect();
    let b: Vec<char> = b.chars().map(|c| c.to_ascii_lowercase()).collect();
    // Three rolling rows: the transposition rule looks two rows back.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            current[j] = best;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

/// The candidate `input` most likely misspells, if any is close enough to be worth suggesting.
///
/// Close enough means an edit distance of at most a third of the longer word (at least one), or,
/// for inputs of three characters or more, one word containing the other (`num_experts` →
/// `experts`, `in_ch` → `in_channels`) when exactly one candidate does.
pub(crate) fn did_you_mean<'a>(
    input: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let candidates: Vec<&'a str> = candidates.into_iter().collect();
    let lower = input.to_ascii_lowercase();
    let by_distance = candidates
        .iter()
        .map(|&c| (edit_distance(&lower, c), c))
        .filter(|&(d, c)| d <= (lower.chars().count().max(c.chars().count()) / 3).max(1))
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c);
    if by_distance.is_some() || lower.chars().count() < 3 {
        return by_distance;
    }
    let mut containing = candidates
        .iter()
        .copied()
        .filter(|c| c.len() >= 3 && (lower.contains(c) || c.contains(lower.as_str())));
    match (containing.next(), containing.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// `did you mean `x`? ` (with the trailing space) or nothing.
pub(crate) fn hint<'a>(input: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    did_you_mean(input, candidates)
        .map(|s| format!("did you mean `{s}`? "))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_counts_each_edit_once() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("experts", "experts"), 0);
        assert_eq!(edit_distance("expers", "experts"), 1); // deletion
        assert_eq!(edit_distance("expertss", "experts"), 1); // insertion
        assert_eq!(edit_distance("exparts", "experts"), 1); // substitution
        assert_eq!(edit_distance("top_k", "tpo_k"), 1); // transposition
        assert_eq!(edit_distance("TOP_K", "top_k"), 0); // case-insensitive
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("ça", "ca"), 1); // characters, not bytes
    }

    #[test]
    fn suggests_close_spellings() {
        let keys = [
            "experts",
            "top_k",
            "hidden",
            "expert_dim",
            "dtype",
            "arch",
            "ffn",
        ];
        assert_eq!(did_you_mean("expers", keys), Some("experts"));
        assert_eq!(did_you_mean("topk", keys), Some("top_k"));
        assert_eq!(did_you_mean("Experts", keys), Some("experts"));
        assert_eq!(did_you_mean("hiden", keys), Some("hidden"));
        assert_eq!(did_you_mean("dtpye", keys), Some("dtype"));
        assert_eq!(did_you_mean("expert_dims", keys), Some("expert_dim"));
    }

    #[test]
    fn suggests_by_containment() {
        let keys = ["experts", "top_k", "in_channels", "out_channels", "groups"];
        assert_eq!(did_you_mean("num_experts", keys), Some("experts"));
        assert_eq!(did_you_mean("in_ch", keys), Some("in_channels"));
        // Ambiguous containment suggests nothing rather than a coin toss.
        assert_eq!(did_you_mean("chan", keys), None);
    }

    #[test]
    fn stays_quiet_when_nothing_is_close() {
        let keys = ["experts", "top_k", "hidden"];
        assert_eq!(did_you_mean("batch_size", keys), None);
        assert_eq!(did_you_mean("x", keys), None);
        assert_eq!(did_you_mean("", keys), None);
        assert_eq!(did_you_mean("anything", []), None);
        assert_eq!(hint("zzz", keys), "");
        assert_eq!(hint("expert", keys), "did you mean `experts`? ");
    }
}
