//! Shared-memory bank conflicts as every bench table reports them: wavefronts ÷ the fewest
//! wavefronts the same requests could take, so 1.00 means conflict-free whatever the access
//! width. A 16-byte `ld.shared.v4` of a warp needs at least 4 wavefronts and an `ldmatrix.x4`
//! at least 4 (one per 8×8 matrix), so raw wavefronts per request would call both conflicts.

use ptxforge_sim::Counters;

/// `ldmatrix` wavefronts per 8×8 matrix read (1.00 = conflict-free); `None` without ldmatrix.
pub fn ldmatrix_per_matrix(c: &Counters) -> Option<f64> {
    (c.ldmatrix_matrices > 0).then(|| c.ldmatrix_wavefronts_per_matrix())
}

/// Ordinary shared loads, stores and atomics: wavefronts ÷ the fewest they could take;
/// `None` without such a request.
pub fn smem_per_min(c: &Counters) -> Option<f64> {
    (c.shared_requests > 0).then(|| c.shared_bank_conflict_factor())
}

/// `cp.async` writes into shared memory: wavefronts ÷ the fewest they could take; `None`
/// without a copy.
pub fn cp_async_per_min(c: &Counters) -> Option<f64> {
    (c.cp_async_requests > 0).then(|| c.cp_async_bank_conflict_factor())
}

/// Every shared-memory access together (ordinary requests, `cp.async` writes and `ldmatrix`,
/// the latter at one wavefront per 8×8 matrix at best): wavefronts ÷ the fewest they could
/// take. 1.0 when the kernel touches no shared memory.
pub fn factor(c: &Counters) -> f64 {
    let taken = c.shared_wavefronts + c.cp_async_shared_wavefronts + c.ldmatrix_wavefronts;
    let fewest = c.shared_min_wavefronts + c.cp_async_shared_min_wavefronts + c.ldmatrix_matrices;
    if fewest == 0 {
        1.0
    } else {
        taken as f64 / fewest as f64
    }
}

/// A table cell: two decimals, or `–` where the kernel issued no such access.
pub fn cell(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_string(), |v| format!("{v:.2}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-computed: conflict-free `v4` shared loads (4 wavefronts each, 4 at least) and
    /// conflict-free `ldmatrix.x4` (4 wavefronts, 4 matrices) read as 1.00, although both take
    /// 4 wavefronts per request; one 2-way conflicted matrix in 8 raises the factor to 9/8 for
    /// ldmatrix and 41/40 overall.
    #[test]
    fn wide_accesses_without_conflicts_read_as_one() {
        let mut c = Counters {
            shared_requests: 8,
            shared_wavefronts: 32,
            shared_min_wavefronts: 32,
            ldmatrix_requests: 2,
            ldmatrix_wavefronts: 8,
            ldmatrix_matrices: 8,
            ..Counters::default()
        };
        assert_eq!(c.shared_wavefronts_per_request(), 4.0);
        assert_eq!(smem_per_min(&c), Some(1.0));
        assert_eq!(ldmatrix_per_matrix(&c), Some(1.0));
        assert_eq!(factor(&c), 1.0);
        c.ldmatrix_wavefronts = 9;
        assert_eq!(ldmatrix_per_matrix(&c), Some(9.0 / 8.0));
        assert_eq!(factor(&c), 41.0 / 40.0);
        assert_eq!(cell(smem_per_min(&c)), "1.00");
    }

    /// No access of a kind: a dash in the table and no conflict in the factor.
    #[test]
    fn absent_accesses_are_dashes() {
        let c = Counters::default();
        assert_eq!(cell(ldmatrix_per_matrix(&c)), "–");
        assert_eq!(cell(smem_per_min(&c)), "–");
        assert_eq!(factor(&c), 1.0);
    }
}
